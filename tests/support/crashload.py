"""Exporter load for the crash and overload tests (and their heavy twins in bench/).

Each exporter thread sends raw OTLP/gRPC requests whose span ids are unique,
and records a span as acknowledged only when the server answered OK: that is
the set the durability checks compare with the database. A failed export is
retried with the same bytes (as an OTel exporter does), so a request that was
stored but not acknowledged before a crash arrives twice, and must be stored
once.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import grpc
from google.rpc import error_details_pb2

from support.otlp_craft import new_span_id, new_trace_id, plain_request
from support.servers import EXPORT_METHOD

RETRY_INFO_TRAILER = "google.rpc.retryinfo-bin"
# Reconnect fast after a restart: grpc's default backoff grows to minutes.
CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
]
SpanKey = tuple[str, str]


@dataclass
class LoadReport:
    """What the exporters saw; `acked` is every span id answered OK."""

    acked: set[SpanKey] = field(default_factory=set)
    requests_acked: int = 0
    failed_attempts: int = 0
    retry_infos: list[float] = field(default_factory=list)
    abandoned_requests: int = 0
    unexpected: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class ExportLoad:
    """`exporters` threads sending `spans_per_request`-span requests until stopped.

    `honour_retry_info`: on UNAVAILABLE with a RetryInfo delay, wait that long
    (plus jitter) before retrying; otherwise retry after a short random pause.
    `max_requests` bounds each exporter (None: until `stop`). `seed` seeds the
    jitter and the pauses.
    """

    def __init__(
        self,
        target: str,
        *,
        exporters: int,
        spans_per_request: int,
        metadata: tuple[tuple[str, str], ...] = (),
        honour_retry_info: bool = False,
        max_requests: int | None = None,
        seed: int,
    ) -> None:
        self.report = LoadReport()
        self._target = target
        self._spans = spans_per_request
        self._metadata = metadata
        self._honour = honour_retry_info
        self._max_requests = max_requests
        self._random = random.Random(seed)
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, name=f"exporter-{n}", daemon=True)
            for n in range(exporters)
        ]

    def start(self) -> ExportLoad:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> LoadReport:
        self._stop.set()
        return self.join()

    def join(self, timeout: float | None = None) -> LoadReport:
        for thread in self._threads:
            thread.join(timeout)
        return self.report

    def _run(self) -> None:
        sent = 0
        with grpc.insecure_channel(self._target, options=CHANNEL_OPTIONS) as channel:
            export = channel.unary_unary(EXPORT_METHOD)
            while not self._stop.is_set():
                if self._max_requests is not None and sent >= self._max_requests:
                    return
                sent += 1
                trace_id, span_ids = new_trace_id(), [new_span_id() for _ in range(self._spans)]
                now = time.time_ns()
                body = plain_request(trace_id, span_ids, start_unix_nano=now - 1_000_000,
                                     end_unix_nano=now).SerializeToString()
                if self._deliver(export, body):
                    with self.report.lock:
                        self.report.requests_acked += 1
                        self.report.acked.update((trace_id.hex(), s.hex()) for s in span_ids)

    def _deliver(self, export: grpc.UnaryUnaryMultiCallable, body: bytes) -> bool:
        """Send until OK; give up only when told to stop (the request is then unacked)."""
        while True:
            try:
                export(body, metadata=self._metadata, timeout=10)
                return True
            except grpc.RpcError as error:
                delay = self._on_failure(error)
            if self._stop.wait(delay):
                with self.report.lock:
                    self.report.abandoned_requests += 1
                return False

    def _on_failure(self, error: grpc.RpcError) -> float:
        code = error.code()
        retry_delay = _retry_delay(error)
        with self.report.lock:
            self.report.failed_attempts += 1
            if retry_delay is not None:
                self.report.retry_infos.append(retry_delay)
            if code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                self.report.unexpected.append(f"{code}: {error.details()}")
        if self._honour and retry_delay is not None:
            return retry_delay * self._random.uniform(1.0, 1.5)
        return self._random.uniform(0.05, 0.2)


def _retry_delay(error: grpc.RpcError) -> float | None:
    for key, value in error.trailing_metadata() or ():
        if key == RETRY_INFO_TRAILER:
            info = error_details_pb2.RetryInfo.FromString(value)
            return float(info.retry_delay.seconds + info.retry_delay.nanos / 1e9)
    return None


@dataclass(frozen=True)
class Stored:
    """What the database holds after the run."""

    spans: set[SpanKey]
    duplicates: int


def stored_spans(db: Path) -> Stored:
    with duckdb.connect(str(db), read_only=True) as connection:
        rows = connection.execute("SELECT trace_id, span_id FROM spans").fetchall()
        duplicates = connection.execute(
            "SELECT count(*) FROM (SELECT trace_id, span_id FROM spans"
            " GROUP BY trace_id, span_id HAVING count(*) > 1)"
        ).fetchone()
    assert duplicates is not None
    return Stored({(row[0], row[1]) for row in rows}, int(duplicates[0]))


class RssSampler:
    """Peak resident memory of a process, from /proc/<pid>/status every few ms."""

    def __init__(self, pid: int, every_seconds: float = 0.05) -> None:
        self.peak_kib = 0
        self.first_kib = _rss_kib(pid) or 0
        self._pid = pid
        self._every = every_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak_kib

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            rss = _rss_kib(self._pid)
            if rss is None:
                return
            self.peak_kib = max(self.peak_kib, rss)


def _rss_kib(pid: int) -> int | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return None
