"""The extraction worker: a real child process that prepares what the server would.

It must prepare exactly the rows the server prepares itself, answer None
(never a wrong write) when it cannot, come back after it dies, and never
outlive the server, however the server ends.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from support import MakeServer, export_raw, fixture_requests, scenarios

from collector.extraction_worker import ExtractionWorker
from collector.extractor import batch_from_export
from collector.store import PreparedWrite, prepare_write

READY_TIMEOUT_SECONDS = 60.0
# Stamped with the time each side prepared the rows; everything else must match.
RECEIVED = "received_unix_nano"


@pytest.fixture
def worker() -> Iterator[ExtractionWorker]:
    started = ExtractionWorker()
    try:
        yield started
    finally:
        started.close()


def _plain_bodies() -> list[bytes]:
    # Captured without transport compression, so each file is one ExportTraceServiceRequest.
    return [
        body
        for scenario in scenarios()
        if scenario != "k_gzip_compression"
        for body, _ in fixture_requests(scenario)
    ]


def _prepared_when_ready(worker: ExtractionWorker, bodies: list[bytes]) -> PreparedWrite:
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        rows = worker.prepare(bodies)
        if rows is not None:
            return rows
        time.sleep(0.05)
    raise AssertionError("the extraction worker never prepared a run")


def _comparable(table: pa.Table) -> pa.Table:
    return table.drop_columns([RECEIVED]) if RECEIVED in table.column_names else table


def _assert_same_write(left: PreparedWrite, right: PreparedWrite) -> None:
    for name in ("resources", "spans", "span_chunks", "executions", "transitions"):
        assert _comparable(getattr(left, name)).equals(_comparable(getattr(right, name))), name


def test_the_worker_prepares_the_rows_the_server_would(worker: ExtractionWorker) -> None:
    bodies = _plain_bodies()
    assert len(bodies) > 10
    here = prepare_write([batch_from_export(body) for body in bodies])
    assert here.transitions.num_rows > 0 and here.executions.num_rows > 0
    _assert_same_write(_prepared_when_ready(worker, bodies), here)


def test_a_body_that_does_not_decode_is_left_to_the_server(worker: ExtractionWorker) -> None:
    good = _plain_bodies()[:2]
    _prepared_when_ready(worker, good)
    pid = worker.pid
    assert worker.prepare([b"\xff\xff\xff not protobuf"]) is None
    # The same child goes on preparing.
    assert worker.pid == pid
    rows = worker.prepare(good)
    assert rows is not None and rows.spans.num_rows > 0


def test_a_killed_worker_is_replaced_and_meanwhile_the_server_prepares(
    worker: ExtractionWorker,
) -> None:
    bodies = _plain_bodies()[:3]
    _prepared_when_ready(worker, bodies)
    first = worker.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    assert worker.prepare(bodies) is None
    assert worker.pid not in (None, first)
    _assert_same_write(
        _prepared_when_ready(worker, bodies),
        prepare_write([batch_from_export(body) for body in bodies]),
    )


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found.update(int(child) for child in (task / "children").read_text().split())
    return found


def _worker_of(pid: int) -> int:
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        for child in _children(pid):
            command = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
            if b"collector.extraction_worker" in command:
                return child
        time.sleep(0.05)
    raise AssertionError("serve started no extraction worker")


def _gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":  # exited, waiting for its (re)parent to reap it
            return True
        time.sleep(0.05)
    return False


def _one_fixture_export(server_target: str) -> None:
    body, metadata = fixture_requests("a_linear")[0]
    export_raw(server_target, body, metadata)


@pytest.mark.parametrize("ending", [signal.SIGTERM, signal.SIGKILL])
def test_the_worker_never_outlives_serve(make_server: MakeServer, ending: signal.Signals) -> None:
    server = make_server()
    assert server.process is not None
    child = _worker_of(server.process.pid)
    _one_fixture_export(server.grpc_target)
    if ending == signal.SIGKILL:
        server.kill()
    else:
        server.stop(ending)
    assert _gone(child, 10.0)


def test_without_the_worker_serve_starts_no_child_and_stores_all(
    make_server: MakeServer,
) -> None:
    server = make_server("--no-extraction-worker")
    assert server.process is not None
    _one_fixture_export(server.grpc_target)
    listed = server.get_json("/api/executions")
    assert listed["executions"], listed
    assert not any(
        b"collector.extraction_worker" in Path(f"/proc/{child}/cmdline").read_bytes()
        for child in _children(server.process.pid)
    )
