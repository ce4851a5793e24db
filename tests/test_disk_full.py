"""A full disk: refused with "retry", never acknowledged and lost, stored once there is room.

The disk fills for real: the server is a `statetrail serve` subprocess whose
files may not grow past a size (RLIMIT_FSIZE, see Server.limit_file_size), so
its writes fail with EFBIG in the kernel, as they fail with ENOSPC on a full
disk. A mount of a small tmpfs would need privileges CI may not have; the
limit needs none. It is per file, so each test picks a limit that the file it
means to fill reaches first, and checks that it did:

- the spool: exports big in the spool and small in DuckDB (random bytes,
  which no compression shrinks, on a span the receiver rejects: rejected spans
  stay in the spooled export and are never stored), then a limit just above
  the spool's segment;
- DuckDB: a limit just above the database file. Between checkpoints DuckDB
  writes only its WAL, which grows several times faster than the spool (a
  span's rows and keys against its protobuf bytes), so the WAL fills first;
  a checkpoint, which must grow the file, cannot either.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from google.rpc import error_details_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from support.crashload import stored_spans
from support.otlp_craft import new_span_id, new_trace_id, plain_request, relocated_fixture
from support.polling import wait_until
from support.servers import EXPORT_METHOD, MakeServer, Server

from collector.store import Store

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="prlimit(2) is Linux's"
)

SpanKey = tuple[str, str]
KIB = 1024
MIB = 1024 * KIB
# Spans per request while filling DuckDB: ~11 KB in the spool, ~40 KB of WAL.
SPANS = 200
MAX_REQUESTS = 2_000
RETRY_INFO_TRAILER = "google.rpc.retryinfo-bin"


@dataclass(frozen=True)
class Files:
    segment: int
    database: int
    wal: int


def _files(db: Path) -> Files:
    segments = sorted(db.with_name(db.name + ".spool").glob("*.seg"))
    wal = db.with_name(db.name + ".wal")
    return Files(
        segment=segments[-1].stat().st_size if segments else 0,
        database=db.stat().st_size,
        wal=wal.stat().st_size if wal.exists() else 0,
    )


def _request(spans: int, padding: int = 0) -> tuple[bytes, set[SpanKey]]:
    """A plain export of `spans` new spans; with `padding`, one more span, which the
    receiver rejects (its trace id is all zero), carries that many random bytes."""
    trace_id, span_ids = new_trace_id(), [new_span_id() for _ in range(spans)]
    now = time.time_ns()
    request = plain_request(trace_id, span_ids, start_unix_nano=now - 1_000, end_unix_nano=now)
    if padding:
        spans_pb = request.resource_spans[0].scope_spans[0].spans
        rejected = spans_pb.add(trace_id=bytes(16), span_id=new_span_id(), name="padding")
        rejected.attributes.add(
            key="padding", value=common_pb2.AnyValue(bytes_value=os.urandom(padding))
        )
    return request.SerializeToString(), {(trace_id.hex(), s.hex()) for s in span_ids}


@contextmanager
def _exporter(server: Server) -> Iterator[grpc.UnaryUnaryMultiCallable]:
    """One channel for many exports, as an application's exporter keeps one."""
    with grpc.insecure_channel(server.grpc_target) as channel:
        yield channel.unary_unary(EXPORT_METHOD)


def _refusal(export: grpc.UnaryUnaryMultiCallable, body: bytes) -> grpc.RpcError | None:
    try:
        export(body, timeout=30)
    except grpc.RpcError as error:
        return error
    return None


def _assert_retry(error: grpc.RpcError | None, *words: str) -> None:
    """UNAVAILABLE with a RetryInfo delay, saying why: what exporters retry."""
    assert error is not None, "the export was acknowledged"
    assert error.code() == grpc.StatusCode.UNAVAILABLE, error
    trailers = dict(error.trailing_metadata() or ())
    retry = error_details_pb2.RetryInfo.FromString(trailers[RETRY_INFO_TRAILER])
    assert retry.retry_delay.seconds > 0
    message = error.details()
    for word in words:
        assert word in message, message


def _send_until_refused(
    export: grpc.UnaryUnaryMultiCallable, acked: set[SpanKey]
) -> tuple[grpc.RpcError, bytes, set[SpanKey]]:
    """Export new requests one at a time, adding the acknowledged spans to `acked`,
    until one is refused; return the refusal and that request."""
    for _ in range(MAX_REQUESTS):
        body, spans = _request(SPANS)
        error = _refusal(export, body)
        if error is not None:
            return error, body, spans
        acked |= spans
    raise AssertionError(f"{MAX_REQUESTS} exports and the disk never filled")


def _wait_stored(server: Server, spans: int) -> None:
    try:
        wait_until(
            lambda: server.get_json("/healthz"),
            until=lambda health: health["backlog_bytes"] == 0 and health["spans"] >= spans,
            timeout=30, interval=0.1, what=f"{spans} spans stored, the backlog empty",
        )  # fmt: skip
    except AssertionError as never_stored:
        raise AssertionError(f"{never_stored}\n{server.output()}") from None


def _assert_stored_once(db: Path, acked: set[SpanKey]) -> None:
    """Every acknowledged span is in the file once, its bytes readable, nothing else."""
    stored = stored_spans(db)
    assert stored.duplicates == 0
    assert not acked - stored.spans, f"{len(acked - stored.spans)} acknowledged spans lost"
    assert stored.spans == acked
    store = Store(db, read_only=True)
    try:
        assert store.counts()["spans"] == len(acked)
        traces = sorted({trace for trace, _ in acked})
        for trace in (traces[0], traces[-1]):
            # The span's bytes come back from their compressed chunk: the file
            # the failed writes and checkpoints touched is intact.
            rows = store.spans_of_trace(trace)
            assert {(trace, row.span_id) for row in rows} == {k for k in acked if k[0] == trace}
    finally:
        store.close()


def test_a_full_spool_answers_retry_and_takes_exports_again_once_there_is_room(
    make_server: MakeServer,
) -> None:
    server: Server = make_server()
    acked: set[SpanKey] = set()
    with _exporter(server) as export:
        for _ in range(4):
            body, spans = _request(5, padding=1 * MIB)
            export(body, timeout=30)
            acked |= spans
        before = _files(server.db)
        limit = before.segment + 256 * KIB
        assert before.database < limit and before.wal < limit, before
        server.limit_file_size(limit)

        big, big_spans = _request(5, padding=1 * MIB)
        _assert_retry(_refusal(export, big), "could not write the spool", "File too large")
        # Nothing of the refused export stays behind to be read as a record.
        assert _files(server.db).segment == before.segment
        http = httpx.post(
            f"{server.url}/v1/traces",
            content=big,
            headers={"content-type": "application/x-protobuf"},
            timeout=30,
        )
        assert http.status_code == 503, http.text
        assert int(http.headers["retry-after"]) > 0
        # Up, reading, and the export that fits in what is left is taken.
        health = server.get_json("/healthz")
        assert (health["status"], health["spans"]) == ("ok", len(acked))
        small, small_spans = _request(5)
        export(small, timeout=30)
        acked |= small_spans

        server.limit_file_size(None)
        export(big, timeout=30)  # the exporter's retry
        acked |= big_spans
    assert server.get_json("/healthz")["spans"] == len(acked)
    assert server.stop() in (0, -15), server.output()
    _assert_stored_once(server.db, acked)


@pytest.mark.slow
def test_a_full_database_keeps_what_it_acknowledged_in_the_spool_and_stores_it_once_there_is_room(
    make_server: MakeServer,
) -> None:
    server: Server = make_server()
    acked: set[SpanKey] = set()
    with _exporter(server) as export:
        body, spans = _request(SPANS)
        export(body, timeout=30)
        acked |= spans
        before = _files(server.db)
        server.limit_file_size(before.database + 64 * KIB)

        # A lone exporter's export waits for its rows: once the WAL cannot
        # grow, the receiver still holding the call answers "retry".
        error, body, spans = _send_until_refused(export, acked)
        _assert_retry(error, "could not store", ".wal", "File too large")
        stored = len(acked)
        assert server.get_json("/healthz")["backlog_bytes"] > 0, "it waits in the spool"
        # Its retry is acknowledged from the spool, where the first copy waits,
        # and so is what follows, until the spool cannot grow either.
        export(body, timeout=30)
        acked |= spans
        error, body, spans = _send_until_refused(export, acked)
        _assert_retry(error, "could not write the spool", "File too large")
        health = server.get_json("/healthz")
        assert (health["status"], health["spans"]) == ("ok", stored)
        assert health["backlog_bytes"] > 0

        server.limit_file_size(None)
        export(body, timeout=30)
        acked |= spans
    _wait_stored(server, len(acked))
    assert server.stop() in (0, -15), server.output()
    _assert_stored_once(server.db, acked)


@pytest.mark.slow
def test_a_server_stopped_and_started_on_a_full_disk_stores_it_all_once_there_is_room(
    make_server: MakeServer, tmp_path: Path
) -> None:
    db = tmp_path / "full.duckdb"
    Store(db).close()  # migrated while there was room
    server: Server = make_server(db=db, start=False)
    server.file_size_limit = db.stat().st_size + 64 * KIB
    server.start()
    acked: set[SpanKey] = set()
    with _exporter(server) as export:
        error, body, spans = _send_until_refused(export, acked)
        _assert_retry(error, "could not store", ".wal")
        stored = len(acked)
        export(body, timeout=30)
        acked |= spans
        # A Junjo workflow too, acknowledged from the spool: executions and
        # transitions must come through the restarts once as well.
        workflow = relocated_fixture("d_subflow", end_unix_nano=time.time_ns(), tag="full")
        for request in workflow:
            export(request, timeout=30)
    acked |= _span_keys(workflow)
    # The drain cannot store the backlog and the closing checkpoint cannot
    # grow the file: both give up, and the process exits cleanly.
    assert server.stop() in (0, -15), server.output()
    assert "checkpoint on close failed" in server.output()

    # Started again on the still-full disk, the server comes up (its opening
    # checkpoint fails), holds what the spool has, and takes more; once there
    # is room, it stores all of it.
    server.start()
    assert "could not checkpoint" in server.output()
    health = server.get_json("/healthz")
    assert (health["status"], health["spans"]) == ("ok", stored), server.output()
    assert health["backlog_bytes"] > 0
    with _exporter(server) as export:
        body, spans = _request(SPANS)
        export(body, timeout=30)
        acked |= spans
        server.limit_file_size(None)
        _wait_stored(server, len(acked))
        health = server.wait_replayed()
        assert (health["executions"], health["transitions"]) == (3, _set_state_events(workflow))
        body, spans = _request(SPANS)
        export(body, timeout=30)  # stored, and visible, at once again
        acked |= spans
    assert server.get_json("/healthz")["spans"] == len(acked)
    assert server.stop() in (0, -15), server.output()
    _assert_stored_once(db, acked)


def _span_keys(bodies: list[bytes]) -> set[SpanKey]:
    return {(span.trace_id.hex(), span.span_id.hex()) for span in _spans(bodies)}


def _set_state_events(bodies: list[bytes]) -> int:
    return sum(event.name == "set_state" for span in _spans(bodies) for event in span.events)


def _spans(bodies: list[bytes]) -> Iterator[Any]:
    for body in bodies:
        request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                yield from scope_spans.spans


# The ingest pipeline in a process of its own, whose files may not grow past a
# limit: room for the WAL to reach the store's checkpoint threshold (DuckDB
# checkpoints a commit that would take the WAL past it), none for the database
# file to grow by what a checkpoint writes. That checkpoint fails, and DuckDB
# refuses everything after it ("database has been invalidated"). The probe
# exports until one is refused, makes room, sends it again and one more, and
# prints what the store holds as JSON.
CHECKPOINT_PROBE = textwrap.dedent(
    """
    import json, os, resource, sys, time
    from pathlib import Path
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
    from opentelemetry.proto.trace.v1 import trace_pb2
    from collector.intake.ingest import Ingestor
    from collector.intake.sink import RetryLater
    from collector.store import Store, StoreError

    db = Path(sys.argv[1])
    Store(db).close()
    store = Store(db, checkpoint_threshold="1536KB")
    ingestor = Ingestor(store, db.with_name(db.name + ".spool"))
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (db.stat().st_size + 64 * 1024, hard))

    def export():
        request = trace_service_pb2.ExportTraceServiceRequest()
        spans = request.resource_spans.add().scope_spans.add().spans
        trace_id = os.urandom(16)
        for n in range(200):
            spans.append(trace_pb2.Span(trace_id=trace_id, span_id=os.urandom(8),
                                        name=f"s{n}", start_time_unix_nano=1,
                                        end_time_unix_nano=2))
        return request

    sent, refusal = [], None
    while refusal is None and len(sent) < 500:
        request = export()
        try:
            ingestor.ingest(request)
        except RetryLater as exc:
            refusal = str(exc)
        sent.append(request)
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
    ingestor.ingest(sent[-1])  # the refused export, sent again
    sent.append(export())
    ingestor.ingest(sent[-1])
    deadline = time.monotonic() + 20
    while ingestor.backlog_bytes() and time.monotonic() < deadline:
        time.sleep(0.05)
    ingestor.close(drain_seconds=0)
    try:
        spans = store.counts()["spans"]
        traces = [store.spans_of_trace(r.resource_spans[0].scope_spans[0].spans[0]
                                       .trace_id.hex()) for r in sent]
        stored = [sorted(row.span_id for row in rows) for rows in traces]
    except StoreError as exc:
        spans, stored = str(exc), []
    store.close()
    print(json.dumps({
        "refusal": refusal,
        "spans": spans,
        "sent": [sorted(s.span_id.hex() for s in r.resource_spans[0].scope_spans[0].spans)
                 for r in sent],
        "stored": stored,
    }))
    """
)


def test_a_checkpoint_that_fails_on_a_full_disk_does_not_stop_storing_for_good(
    tmp_path: Path,
) -> None:
    result = subprocess.run(
        [sys.executable, "-c", CHECKPOINT_PROBE, str(tmp_path / "c.duckdb")],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["refusal"] is not None, "the checkpoint never failed"
    assert "checkpoint" in seen["refusal"], seen["refusal"]
    assert len(seen["sent"]) > 3, "exports were stored before the checkpoint"
    # Once there is room, every export is in the store once, with its own bytes.
    assert seen["spans"] == 200 * len(seen["sent"]), (seen["spans"], result.stderr[-3000:])
    assert seen["stored"] == seen["sent"]
