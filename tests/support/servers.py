"""Test support: a real `statetrail serve` on free loopback ports, and the fixtures.

Nothing here is a mock: the server is the installed command in a subprocess,
the database a real DuckDB file, and clients talk to it over real sockets.
"""

from __future__ import annotations

import functools
import json
import os
import random
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import grpc
import uvicorn
from starlette.types import ASGIApp

from support.polling import wait_until

FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "junjo" / "fixtures"
EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
FIXTURE_API_KEY = "test-junjo-api-key-0123456789"
STARTUP_TIMEOUT_SECONDS = 30.0
# Below Linux's ephemeral range (32768-60999): a port the kernel handed out
# with bind(0) can be taken by any outgoing connection before the server binds
# it, which once failed CI with "address already in use".
TEST_PORT_RANGE = (20000, 32000)
BIND_ATTEMPTS = 5
# Not seeded, unlike the tests' random draws: runs side by side must not try the same ports.
_PORTS = random.SystemRandom()


def free_port() -> int:
    """A loopback port that is free now and outside the ephemeral range."""
    while True:
        port = _PORTS.randint(*TEST_PORT_RANGE)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


@contextmanager
def serving_in_thread(app: ASGIApp, port: int) -> Iterator[str]:
    """Run an ASGI app under uvicorn on a loopback port in this process; yield its URL."""
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
    serving = threading.Thread(target=server.run, daemon=True)
    serving.start()
    wait_until(
        lambda: server.started or not serving.is_alive(), timeout=10, interval=0.01,
        what="uvicorn to start",
    )  # fmt: skip
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        serving.join(timeout=30)


@dataclass
class Server:
    """A running `statetrail serve` subprocess and how to reach it."""

    db: Path
    grpc_port: int
    http_port: int
    args: Sequence[str]
    process: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    # Bytes any one file the server writes may reach from its start (RLIMIT_FSIZE):
    # a full disk (tests/test_disk_full.py). None: no limit.
    file_size_limit: int | None = None

    @classmethod
    def on_free_ports(
        cls,
        db: Path,
        *args: str,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> Server:
        """A server (not started yet) for `db` on loopback ports that are free now."""
        return cls(
            db=db, grpc_port=free_port(), http_port=free_port(), args=args,
            env=env or {}, cwd=cwd,
        )  # fmt: skip

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def start(self) -> Server:
        """Start the server; on a first start, retry elsewhere if a port was taken."""
        first_start = self.process is None
        for _ in range(BIND_ATTEMPTS - 1):
            try:
                return self._start_once()
            except RuntimeError as error:
                if not (first_start and "address already in use" in str(error)):
                    raise
                self.grpc_port, self.http_port = free_port(), free_port()
        return self._start_once()

    def _start_once(self) -> Server:
        assert self.process is None or self.process.poll() is not None
        self.log = self.db.with_suffix(f".{time.monotonic_ns()}.log")
        command = [
            sys.executable, "-m", "collector", "serve",
            "--db", str(self.db),
            "--grpc-port", str(self.grpc_port),
            "--http-port", str(self.http_port),
            "--log-level", "warning",
            *self.args,
        ]
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, **self.env}, cwd=self.cwd,
                preexec_fn=_file_size_limiter(self.file_size_limit),
            )
        self._wait_ready()
        return self

    def limit_file_size(self, limit: int | None) -> None:
        """Cap (None: uncap) the size of every file the running server writes, now.

        A write past the cap fails with EFBIG ("File too large") as one past a
        full disk fails with ENOSPC: Python ignores SIGXFSZ, which would
        otherwise kill the process. The cap is per file, so a test picks one
        that the file it means to fill reaches first.
        """
        assert self.process is not None
        _, hard = resource.prlimit(self.process.pid, resource.RLIMIT_FSIZE)
        soft = hard if limit is None else _capped(limit, hard)
        resource.prlimit(self.process.pid, resource.RLIMIT_FSIZE, (soft, hard))

    def _wait_ready(self) -> None:
        try:
            wait_until(
                self._answers_health, timeout=STARTUP_TIMEOUT_SECONDS, interval=0.1,
                what="statetrail serve to answer /healthz",
            )  # fmt: skip
        except AssertionError as timeout:
            raise RuntimeError(f"statetrail serve did not start:\n{self.output()}") from timeout

    def _answers_health(self) -> bool:
        """Whether /healthz answers; a server that exited raises (start() reads why)."""
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"statetrail serve exited early:\n{self.output()}")
        try:
            self.get_json("/healthz")
        except OSError:
            return False
        return True

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log and self.log.exists() else ""

    def get_json(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=30) as reply:
            return json.load(reply)

    def wait_replayed(self, timeout: float = 30.0) -> dict[str, Any]:
        """Wait until every committed execution has been replayed; return /healthz."""
        health: dict[str, Any] = wait_until(
            lambda: self.get_json("/healthz"), until=lambda health: not health["replaying"],
            timeout=timeout, what="replays to finish",
        )  # fmt: skip
        return health

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout=60)

    def kill(self) -> None:
        self.stop(signal.SIGKILL)


class MakeServer(Protocol):
    """conftest's `make_server` fixture: a server on a fresh DB file (or `db`), started
    unless `start=False`; the fixture stops whatever is still running afterwards."""

    def __call__(self, *args: str, db: Path | None = None, start: bool = True) -> Server: ...


def _capped(limit: int, hard: int) -> int:
    return limit if hard == resource.RLIM_INFINITY else min(limit, hard)


def _file_size_limiter(limit: int | None) -> functools.partial[None] | None:
    """What the child runs before exec to start under `limit`: a C call, nothing to import."""
    if limit is None:
        return None
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    return functools.partial(
        resource.setrlimit, resource.RLIMIT_FSIZE, (_capped(limit, hard), hard)
    )


def export_raw(
    target: str,
    body: bytes,
    metadata: Sequence[tuple[str, str]] = (),
    *,
    compression: grpc.Compression | None = None,
    timeout: float = 30.0,
) -> bytes:
    """One Export RPC with exactly these bytes, as a real gRPC client sends them."""
    with grpc.insecure_channel(
        target, options=[("grpc.max_send_message_length", 512 * 1024 * 1024)]
    ) as channel:
        call = channel.unary_unary(EXPORT_METHOD)
        reply: bytes = call(body, metadata=tuple(metadata), compression=compression,
                            timeout=timeout)
        return reply


def fixture_requests(scenario: str) -> list[tuple[bytes, list[tuple[str, str]]]]:
    """The captured request bytes of a scenario with the metadata they arrived with."""
    folder = FIXTURES / scenario
    requests = []
    for body_path in sorted(folder.glob("request_*.pb")):
        meta = json.loads(body_path.with_suffix(".meta.json").read_text())
        metadata = [
            (key, value) for key, value in meta["invocation_metadata"] if key != "user-agent"
        ]
        requests.append((body_path.read_bytes(), metadata))
    return requests


def send_scenario(
    target: str, scenario: str, *, compression: grpc.Compression | None = None
) -> list[bytes]:
    """Export every captured request of a scenario to `target`; the replies, in order."""
    return [
        export_raw(target, body, metadata, compression=compression)
        for body, metadata in fixture_requests(scenario)
    ]


def captured_compression(scenario: str) -> grpc.Compression | None:
    """Gzip if the scenario's exporter compressed its requests when captured."""
    env = manifest(scenario)["exporter"]["OTEL_env"]
    return grpc.Compression.Gzip if env.get("OTEL_EXPORTER_OTLP_COMPRESSION") == "gzip" else None


def scenarios() -> list[str]:
    return sorted(p.name for p in FIXTURES.iterdir() if (p / "manifest.json").exists())


def manifest(scenario: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((FIXTURES / scenario / "manifest.json").read_text())
    return loaded
