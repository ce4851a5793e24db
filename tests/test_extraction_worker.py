"""The extraction worker: a real child process that prepares what the server would.

It must prepare exactly the rows the server prepares itself, answer None
(never a wrong write) when it cannot, come back after it dies, and never
outlive the server, however the server ends.
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pyarrow as pa
import pytest
from support.polling import wait_until
from support.servers import MakeServer, export_raw, fixture_requests, scenarios

from collector.encode.exports import batch_from_export
from collector.intake import extractor as extractor_module
from collector.intake.extractor import Extractor
from collector.intake.spool import START, Export, Spool, pack
from collector.intake.worker import ExtractionWorker
from collector.store import PreparedWrite, Store, prepare_write

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


def _prepared_when_ready(worker: ExtractionWorker, bodies: Sequence[Export]) -> PreparedWrite:
    prepared = wait_until(
        lambda: worker.prepare(bodies), until=lambda rows: rows is not None,
        timeout=READY_TIMEOUT_SECONDS, what="the extraction worker to prepare a run",
    )  # fmt: skip
    assert prepared is not None
    return prepared


def _wait_caught_up(extractor: Extractor, spool: Spool) -> None:
    wait_until(
        lambda: extractor.position >= spool.durable_end, timeout=READY_TIMEOUT_SECONDS,
        interval=0.02, what="the extractor to catch up",
    )  # fmt: skip


def _comparable(table: pa.Table) -> pa.Table:
    return table.drop_columns([RECEIVED]) if RECEIVED in table.column_names else table


def _assert_same_write(left: PreparedWrite, right: PreparedWrite) -> None:
    for name in ("resources", "spans", "span_chunk_pieces", "executions", "transitions"):
        assert _comparable(getattr(left, name)).equals(_comparable(getattr(right, name))), name


def test_the_worker_prepares_the_rows_the_server_would(worker: ExtractionWorker) -> None:
    bodies = _plain_bodies()
    assert len(bodies) > 10
    here = prepare_write([batch_from_export(body) for body in bodies])
    assert here.transitions.num_rows > 0 and here.executions.num_rows > 0
    _assert_same_write(_prepared_when_ready(worker, bodies), here)


def test_the_worker_prepares_spooled_exports_as_their_bytes(worker: ExtractionWorker) -> None:
    """Exports reach the worker as the spool holds them: packed, or (older records) not."""
    bodies = _plain_bodies()
    mixed = [pack(body) if index % 2 else body for index, body in enumerate(bodies)]
    _assert_same_write(_prepared_when_ready(worker, mixed), _prepared_when_ready(worker, bodies))


def test_the_worker_loads_neither_duckdb_nor_arrow_compute(worker: ExtractionWorker) -> None:
    # DuckDB's library would cost the child ~8 MB of private memory it never uses:
    # it builds rows (collector/encode/), it never touches the database. Arrow's
    # compute functions, ~6 MB more, only the store uses (collector/store/prepared.py).
    _prepared_when_ready(worker, _plain_bodies()[:2])
    assert worker.pid is not None
    maps = Path(f"/proc/{worker.pid}/maps").read_text().splitlines()
    libraries = {Path(line.split()[-1]).name for line in maps if "/" in line}
    assert any(name.startswith("libarrow.so") for name in libraries)
    assert not [name for name in libraries if name.startswith(("_duckdb", "_compute."))]


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


def test_a_resting_worker_exits_and_the_next_run_starts_another(
    worker: ExtractionWorker,
) -> None:
    bodies = _plain_bodies()[:3]
    here = prepare_write([batch_from_export(body) for body in bodies])
    _prepared_when_ready(worker, bodies)
    first = worker.pid
    assert first is not None
    worker.rest()
    assert worker.pid is None
    assert not Path(f"/proc/{first}").exists()  # exited and reaped: its memory is back
    # The run that wakes it is prepared by the caller while the new child starts.
    assert worker.prepare(bodies) is None
    assert worker.pid not in (None, first)
    _assert_same_write(_prepared_when_ready(worker, bodies), here)


def test_the_extractor_rests_its_worker_when_nothing_comes_and_wakes_it_for_more(
    worker: ExtractionWorker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(extractor_module, "PREPARER_IDLE_SECONDS", 0.3)
    first, later = _plain_bodies()[:3], _plain_bodies()[3:8]
    _prepared_when_ready(worker, first)
    store = Store(tmp_path / "i.duckdb")
    spool = Spool(tmp_path / "i.duckdb.spool", START)
    # Spooled before the extractor starts, so that it is never idle before them.
    spool.append(first, time.time_ns())
    log: list[str] = []
    extractor = Extractor(store, spool, START, preparer=_Recorded(worker, log))

    try:
        _wait_caught_up(extractor, spool)
        wait_until(
            lambda: worker.pid is None, timeout=READY_TIMEOUT_SECONDS,
            what="the idle worker to be rested",
        )  # fmt: skip
        assert log[-1] == "rest" and log.count("rest") == 1
        spool.append(later, time.time_ns())
        extractor.notify()
        _wait_caught_up(extractor, spool)
        counts = store.counts()
    finally:
        extractor.close(5.0)
        store.close()
        spool.close()
    # Woken for the later records (prepared here while the new child starts: the
    # unit test above shows that child preparing), nothing was lost or stored twice.
    assert log[log.index("rest") + 1] == "refused"
    assert counts == _counts_in_process(tmp_path, [*first, *later])


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found.update(int(child) for child in (task / "children").read_text().split())
    return found


def _worker_of(pid: int) -> int:
    child = wait_until(
        lambda: _extraction_child(pid), timeout=READY_TIMEOUT_SECONDS,
        what="serve to start an extraction worker",
    )  # fmt: skip
    assert child is not None
    return child


def _extraction_child(pid: int) -> int | None:
    for child in _children(pid):
        command = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        if b"collector.intake.worker" in command:
            return child
    return None


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state == "Z"  # exited, waiting for its (re)parent to reap it


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
    wait_until(lambda: _gone(child), timeout=10.0, what=f"the worker {child} to exit")


def test_without_the_worker_serve_starts_no_child_and_stores_all(
    make_server: MakeServer,
) -> None:
    server = make_server("--no-extraction-worker")
    assert server.process is not None
    _one_fixture_export(server.grpc_target)
    listed = server.get_json("/api/executions")
    assert listed["executions"], listed
    assert not any(
        b"collector.intake.worker" in Path(f"/proc/{child}/cmdline").read_bytes()
        for child in _children(server.process.pid)
    )


class _Recorded:
    """The real worker, with the order of the extractor's calls to it written down."""

    def __init__(self, worker: ExtractionWorker, log: list[str]) -> None:
        self._worker = worker
        self._log = log

    def submit(self, exports: Sequence[Export]) -> bool:
        submitted = self._worker.submit(exports)
        self._log.append("submit" if submitted else "refused")
        return submitted

    def collect(self) -> PreparedWrite | None:
        rows = self._worker.collect()
        self._log.append("collect" if rows is not None else "unprepared")
        return rows

    def rest(self) -> None:
        self._worker.rest()
        self._log.append("rest")


def _extract_all(
    worker: ExtractionWorker,
    tmp_path: Path,
    bodies: list[bytes],
    before: Callable[[], None],
    checkpoint_threshold: str = "128MB",
) -> tuple[dict[str, int], list[str], list[Path]]:
    """Store `bodies`, spooled, through an extractor using `worker`; `before` runs first."""
    store = Store(tmp_path / "w.duckdb", checkpoint_threshold=checkpoint_threshold)
    spool = Spool(tmp_path / "w.duckdb.spool", START)
    spool.append(bodies, time.time_ns())
    log: list[str] = []
    before()
    extractor = Extractor(
        store,
        spool,
        START,
        on_commit=lambda result, more: log.append("commit"),
        preparer=_Recorded(worker, log),
    )
    _wait_caught_up(extractor, spool)
    extractor.close(5.0)
    counts = store.counts()
    store.close()
    spool.close()
    return counts, log, sorted((tmp_path / "w.duckdb.spool" / "quarantine").glob("*.pb"))


def _counts_in_process(tmp_path: Path, bodies: list[bytes]) -> dict[str, int]:
    store = Store(tmp_path / "here.duckdb")
    store.write([batch_from_export(body) for body in bodies])
    counts = store.counts()
    store.close()
    return counts


BAD = b"\xff\xff\xff not protobuf"


def _one_record_runs(
    worker: ExtractionWorker, monkeypatch: pytest.MonkeyPatch, count: int
) -> list[bytes]:
    """`count` exports to spool, stored one record a run (so that runs queue up
    behind each other), with the worker started."""
    monkeypatch.setattr(extractor_module, "BATCH_BYTES", 1)
    good = _plain_bodies()[:count]
    _prepared_when_ready(worker, good[:1])
    return good


def test_the_next_run_is_prepared_while_one_commits_and_a_bad_record_drops_it(
    worker: ExtractionWorker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = _one_record_runs(worker, monkeypatch, 8)
    # A record that does not decode (a damaged disk, or a bug) in the middle: its run
    # is stored record by record, and the run prepared ahead of it is dropped.
    counts, log, quarantined = _extract_all(
        worker, tmp_path, [*good[:4], BAD, *good[4:]], lambda: None
    )
    assert counts == _counts_in_process(tmp_path, good)
    assert [path.read_bytes() for path in quarantined] == [BAD]
    # A run was handed to the worker between the rows of the one before and its commit.
    assert ("submit", "commit") in itertools.pairwise(log), log
    assert "unprepared" in log  # the bad record's run


@pytest.mark.slow
def test_a_failing_commit_with_a_run_prepared_ahead_stores_every_run_once(
    worker: ExtractionWorker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = _one_record_runs(worker, monkeypatch, 6)
    # A directory where DuckDB's write-ahead log must go: the first commits fail for
    # real, each with the next run already handed to the worker, and the retries work
    # once the directory is gone.
    wal = tmp_path / "w.duckdb.wal"
    failures = threading.Timer(1.0, wal.rmdir)

    def fail_commits_for_a_second() -> None:
        wal.mkdir()
        failures.start()

    try:
        counts, log, quarantined = _extract_all(
            worker, tmp_path, good, fail_commits_for_a_second
        )
    finally:
        failures.cancel()
    assert counts == _counts_in_process(tmp_path, good)
    assert quarantined == []
    assert log.count("commit") == len(good)
    assert log.count("submit") > len(good), "no commit failed with a run prepared ahead"


def test_a_run_whose_commit_will_checkpoint_is_not_read_ahead(
    worker: ExtractionWorker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While DuckDB checkpoints inside a commit, no worker holds a run prepared ahead."""
    good = _one_record_runs(worker, monkeypatch, 6)
    # A threshold below one run's WAL: once the first commit shows how much a run
    # adds, every later commit checkpoints, and none is overlapped.
    counts, log, _ = _extract_all(worker, tmp_path, good, lambda: None, "1KiB")
    assert counts == _counts_in_process(tmp_path, good)
    after_first = log[log.index("commit") + 1:]
    assert log.count("commit") == len(good)
    assert ("submit", "commit") not in itertools.pairwise(after_first), log
    # Nor an idle one: the worker is stopped before each of those commits.
    assert all(
        before == "rest" for before, step in itertools.pairwise(after_first) if step == "commit"
    ), log

