"""Keeping the field index sorted: the policy, the store's rewrite, and the idle replayer."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support.history_records import scenario
from support.polling import wait_until

from collector.index.query import parse_query
from collector.jobs.burst_memory import BurstMemory
from collector.jobs.replayer import Replayer, replay_stores
from collector.model import Evidence, Execution, Transition
from collector.store import IngestBatch, Store, StoreError, WriteResult, field_layout
from collector.store import rewrite as rewrite_module
from collector.store.field_layout import CompactionPolicy, IndexLayout
from collector.store.listing import ExecutionQuery

EVERY_APPEND = CompactionPolicy(min_appended_rows=1, appended_share=0.0)


@pytest.mark.parametrize(
    ("layout", "due"),
    [
        (IndexLayout(0, 0), False),
        (IndexLayout(0, 999_999), False),
        (IndexLayout(0, 1_000_000), True),
        (IndexLayout(50_000_000, 4_999_999), False),
        (IndexLayout(50_000_000, 5_000_000), True),
    ],
)
def test_a_rewrite_is_due_past_a_floor_and_then_a_share_of_the_sorted_rows(
    layout: IndexLayout, due: bool
) -> None:
    assert CompactionPolicy().due(layout) is due


def _runs(count: int, first: int = 0) -> tuple[list[Execution], list[Transition]]:
    executions, transitions = [], []
    for n in range(first, first + count):
        execution, steps, _ = scenario(
            {"n": 0, "k": n % 5, "tags": []},
            [[{"op": "replace", "path": "/n", "value": i},
              {"op": "add", "path": "/tags/-", "value": f"t{i}"}] for i in range(1, 4)],
        )
        store_id = f"store-{n}"
        executions.append(dataclasses.replace(execution, run_id=f"run-{n}", store_id=store_id))
        # Each run's own carrier span: evidence is kept per span, first copy winning.
        transitions += [
            t._replace(store_id=store_id, span_id=f"{n + 1:016x}", event_index=i)
            for i, t in enumerate(steps)
        ]
    return executions, transitions


def _write(store: Store, count: int, first: int = 0) -> WriteResult:
    executions, transitions = _runs(count, first)
    return store.write([IngestBatch(spans=[], evidence=Evidence(executions, transitions, {}))])


def _layout(store: Store) -> IndexLayout:
    with store._cursor() as cursor:
        return field_layout.layout(cursor)


def _index_rows(store: Store) -> int:
    with store._cursor() as cursor:
        counted = cursor.execute("SELECT count(*) FROM field_values").fetchone()
    assert counted is not None
    return int(counted[0])


def _matching(store: Store, where: str) -> set[str]:
    query = ExecutionQuery(where=parse_query(where), limit=1000)
    return {row.run_id for row in store.search(query)}


def test_the_idle_replayer_rewrites_the_index_once_enough_was_appended(tmp_path: Path) -> None:
    store = Store(tmp_path / "layout.duckdb")
    replayer = Replayer(store, compaction=EVERY_APPEND)
    try:
        replayer.notify(_write(store, 40))
        assert replayer.wait_idle(30)
        wait_until(
            lambda: _layout(store), until=lambda layout: not layout.appended_rows, timeout=30,
            what="the appended rows to be sorted in",
        )  # fmt: skip
        rows = _index_rows(store)
        assert rows > 40 * 3  # every run indexed its start, its writes and its end
        assert _layout(store) == IndexLayout(sorted_rows=rows, appended_rows=0)
        assert _matching(store, "n = 3") == {f"run-{n}" for n in range(40)}
        assert _matching(store, 'tags contains "t2"') == {f"run-{n}" for n in range(40)}
    finally:
        replayer.close()
        store.close()


def test_appended_rows_are_counted_and_a_rewrite_waits_until_due(tmp_path: Path) -> None:
    store = Store(tmp_path / "layout.duckdb")
    replayer = Replayer(store)  # the default policy: far from due on five runs
    try:
        replayer.notify(_write(store, 5))
        assert replayer.wait_idle(30)
        rows = _index_rows(store)
        assert _layout(store) == IndexLayout(sorted_rows=0, appended_rows=rows)
        # A replay again (late evidence) appends the run's rows anew: counted too.
        replayer.notify(_write(store, 1))
        assert replayer.wait_idle(30)
        again = rows + rows // 5  # run-0 once more
        assert _layout(store) == IndexLayout(sorted_rows=0, appended_rows=again)
        assert not store.compact_field_index_if_due()
        assert store.compact_field_index_if_due(EVERY_APPEND)
        assert _layout(store) == IndexLayout(sorted_rows=rows, appended_rows=0)
        assert not store.compact_field_index_if_due(EVERY_APPEND)  # nothing appended since
    finally:
        replayer.close()
        store.close()


def _ballast(store: Store, rows: int, run_keys: int = 1) -> None:
    """Enough index rows that a rewrite takes a while, as run-0's (which stays untouched).

    Their path keys are random, so no filter on a real path reads them. With
    `run_keys`, they are spread over that many run keys (run-0's and keys no
    run has, so no filter finds them), in arrival order: the first pass cuts
    them into pieces as it would real runs' rows.
    """
    with store._cursor() as cursor:
        cursor.execute(
            "INSERT INTO field_values (run_key, parent_shape_key, parent_key, path_key, kind,"
            " num, str_key, str, bool_val, is_final, path)"
            " SELECT (SELECT run_key FROM executions WHERE run_id = 'run-0')"
            " + (i * ? // ?) * 1000000,"
            " i % 1000, i % 1000, (hash(i) >> 1)::BIGINT, 'number', i, NULL, NULL, NULL, false,"
            " '/n'"
            " FROM range(?) r(i)",
            [run_keys, rows, rows],
        )
        cursor.execute("UPDATE field_index_layout SET appended_rows = appended_rows + ?", [rows])


@pytest.mark.slow
def test_a_rewrite_step_that_runs_out_at_the_burst_limit_is_run_at_the_configured_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The replayer rewrites at the burst's lower limit (BurstMemory.held); found by
    # bench_ingest: a piece's sort ran out there, and the rewrite stopped for good.
    store = Store(tmp_path / "layout.duckdb", memory_limit="128MB")
    _write(store, 1)
    _ballast(store, 1_000_000)
    store.checkpoint()  # else DuckDB cannot evict enough to lower its limit that far
    replayer = Replayer(store, burst=BurstMemory(store, "16MB"), compaction=EVERY_APPEND)
    try:
        with caplog.at_level(logging.INFO, logger="collector.jobs.replayer"):
            replayer.notify(_write(store, 1, first=1))
            # (Watched in the log: a read beside the rewrite would run out at 16 MB too.)
            wait_until(
                lambda: "finished sorting" in caplog.text, timeout=60,
                what='"finished sorting" in the log',
            )  # fmt: skip
        assert "rewrite ran out of memory at the lower limit" in caplog.text
        assert not [record for record in caplog.records if record.levelno >= logging.ERROR]
        assert _layout(store) == IndexLayout(sorted_rows=_index_rows(store), appended_rows=0)
        assert store.memory_limit() == "122.0 MiB"  # the configured limit once done
    finally:
        replayer.close()
        store.close()


@pytest.mark.slow
def test_an_interrupted_rewrite_rolls_back_its_step_and_resumes_later(tmp_path: Path) -> None:
    store = Store(tmp_path / "layout.duckdb")
    _write(store, 1)
    _ballast(store, 1_000_000)
    before = (_index_rows(store), _layout(store))
    failed: list[BaseException] = []

    def rewrite() -> None:
        try:
            store.compact_field_index_if_due(EVERY_APPEND)
        except StoreError as exc:
            failed.append(exc)

    worker = threading.Thread(target=rewrite)
    worker.start()
    wait_until(
        lambda: store._rewriter._step_cursor is not None, timeout=30, interval=0.001,
        what="the rewrite to begin",
    )  # fmt: skip

    def stopped() -> bool:
        # Until it stops: an interrupt lands only while one of its statements runs.
        if worker.is_alive():
            store.interrupt_maintenance()
            return False
        return True

    wait_until(stopped, timeout=30, interval=0.01, what="the interrupted rewrite to stop")
    worker.join(60)
    try:
        assert failed and "sort the field index" in str(failed[0])
        assert (_index_rows(store), _layout(store)) == before
        assert store.rewriting_field_index
        assert store.compact_field_index_if_due(EVERY_APPEND)  # the rest is done later
        assert _layout(store) == IndexLayout(before[0], 0)
        assert not store.rewriting_field_index
    finally:
        store.close()


# --- the rewrite while the store is in use ---------------------------------------

QUERIES = ("k = 2", "k > 2", "not k = 1", "ever n <= 1", 'tags contains "t2"', "k missing")


def _stored_and_replayed(store: Store, count: int, first: int) -> None:
    replay_stores(store, sorted(_write(store, count, first).store_ids))


def _rows_per_run(store: Store) -> dict[str, int]:
    """Index rows by run id (a run no longer stored: "key:<run key>"; ranges: "ranges:...")."""
    run = "coalesce(e.run_id, 'key:' || t.run_key)"
    with store._cursor() as cursor:
        rows = cursor.execute(
            f"SELECT {run}, count(*) FROM field_values t"
            f" LEFT JOIN executions e USING (run_key) GROUP BY {run}"
            f" UNION ALL SELECT 'ranges:' || {run}, count(*) FROM field_ranges t"
            f" LEFT JOIN executions e USING (run_key) GROUP BY {run}"
        ).fetchall()
    return {str(run): int(count) for run, count in rows}


def _forget_execution(store: Store, run_id: str) -> None:
    with store._cursor() as cursor:
        cursor.execute("DELETE FROM executions WHERE run_id = ?", [run_id])


def _answers(store: Store) -> dict[str, set[str]]:
    return {where: _matching(store, where) for where in QUERIES}


def _rewriting(store: Store, pause: Callable[[], bool] = lambda: False) -> threading.Thread:
    """The rewrite on a thread of its own (as the replayer runs it); failures make it raise."""
    failed: list[BaseException] = []

    def rewrite() -> None:
        try:
            assert store.compact_field_index_if_due(EVERY_APPEND, pause)
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=rewrite, name="rewrite")
    thread.start()
    thread.failed = failed  # type: ignore[attr-defined]
    return thread


def _finished(thread: threading.Thread) -> None:
    thread.join(120)
    assert not thread.is_alive()
    assert not thread.failed, thread.failed  # type: ignore[attr-defined]


@pytest.mark.slow
def test_an_export_committed_during_a_rewrite_is_visible_before_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(field_layout, "CHUNK_ROWS", 250_000)  # several pieces
    store = Store(tmp_path / "layout.duckdb")
    try:
        _stored_and_replayed(store, 5, first=0)
        _ballast(store, 1_000_000)
        seen_during_the_rewrite = 0
        exported = threading.Event()

        def between_steps() -> bool:
            # Until three exports were seen during steps, give this thread its turn
            # between two: on a fast machine the rewrite ended after only two.
            if seen_during_the_rewrite < 3:
                exported.wait(2)
                exported.clear()
            return False

        rewrite = _rewriting(store, between_steps)
        n = 100
        deadline = time.monotonic() + 60
        while rewrite.is_alive() and seen_during_the_rewrite < 3 and time.monotonic() < deadline:
            if store._rewriter._step_cursor is None:  # between two steps
                time.sleep(0.001)
                continue
            # Sent while a step runs: stored (preempting the step, if it is a piece),
            # replayed and found by its field while the rewrite goes on.
            _stored_and_replayed(store, 1, first=n)
            found = _matching(store, f"k = {n % 5}")
            if rewrite.is_alive() and store.rewriting_field_index:
                assert store.execution_row(f"run-{n}") is not None
                assert f"run-{n}" in found
                seen_during_the_rewrite += 1
                exported.set()
            n += 1
        assert seen_during_the_rewrite == 3
        _finished(rewrite)
        assert _layout(store).sorted_rows > 1_000_000
        assert _matching(store, "n = 3") == {f"run-{i}" for i in [*range(5), *range(100, n)]}
    finally:
        store.close()


@pytest.mark.slow
@pytest.mark.parametrize("sorted_before", [False, True])
def test_filters_answer_the_same_before_during_and_after_a_rewrite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sorted_before: bool
) -> None:
    # sorted_before: a later rewrite, of an index mostly sorted already (no staging).
    monkeypatch.setattr(field_layout, "CHUNK_ROWS", 100_000)
    store = Store(tmp_path / "layout.duckdb")
    try:
        _stored_and_replayed(store, 30, first=0)
        _ballast(store, 600_000)
        if sorted_before:
            assert store.compact_field_index_if_due(EVERY_APPEND)
            replay_stores(store, [f"store-{n}" for n in range(1, 30, 3)])  # appended again
            layout = _layout(store)
            assert 0 < layout.appended_rows < layout.sorted_rows
        before, rows_before = _answers(store), _rows_per_run(store)
        assert all(before[where] for where in QUERIES[:-1])  # each query finds some runs
        during: list[dict[str, set[str]]] = []

        def between_steps() -> bool:
            during.append(_answers(store))
            return False

        rewrite = _rewriting(store, between_steps)
        # And a reader on a thread of its own, asking while steps run.
        while rewrite.is_alive():
            during.append(_answers(store))
        _finished(rewrite)
        assert len(during) > 5
        assert all(answers == before for answers in during)
        assert _answers(store) == before
        assert _rows_per_run(store) == rows_before
        assert _layout(store) == IndexLayout(sum(
            count for run, count in rows_before.items() if not run.startswith("ranges:")
        ), 0)
    finally:
        store.close()


@pytest.mark.slow
@pytest.mark.parametrize("swap_runs", [rewrite_module.SWAP_REFRESH_RUNS, 0])
def test_runs_changed_during_a_rewrite_keep_exactly_their_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, swap_runs: int
) -> None:
    # swap_runs 0: every change goes through the catch-ups before the swap.
    monkeypatch.setattr(field_layout, "CHUNK_ROWS", 100_000)
    monkeypatch.setattr(rewrite_module, "SWAP_REFRESH_RUNS", swap_runs)
    store = Store(tmp_path / "layout.duckdb")
    try:
        _stored_and_replayed(store, 20, first=0)
        _ballast(store, 300_000)
        rows_before = _rows_per_run(store)
        changes: list[Callable[[], object]] = [
            # New runs, first replays: rows appended to the live table only.
            lambda: _stored_and_replayed(store, 5, first=20),
            # Replayed again (late evidence): deleted and appended again.
            lambda: replay_stores(store, [f"store-{i}" for i in range(1, 10)]),
            # Gone (its trace pruned while its replay was saved): swept.
            lambda: _forget_execution(store, "run-7"),
            store.prune_orphans,
            lambda: _stored_and_replayed(store, 1, first=25),
        ]

        def between_steps() -> bool:
            if changes:
                changes.pop(0)()
            return False

        rewrite = _rewriting(store, between_steps)
        _finished(rewrite)
        assert not changes  # each change came between two steps
        rows_after = _rows_per_run(store)
        expected = {
            run: count for run, count in rows_before.items() if not run.endswith("run-7")
        }
        one_run = {run: count for run, count in rows_before.items() if run.endswith("run-1")}
        for n in range(20, 26):  # the new runs, indexed like the others
            expected |= {run.replace("run-1", f"run-{n}"): count for run, count in one_run.items()}
        assert rows_after == expected
        runs = {f"run-{n}" for n in [*range(26)] if n != 7}
        assert _matching(store, "n = 3") == runs
        assert _matching(store, "k = 2") == {run for run in runs if int(run[4:]) % 5 == 2}
    finally:
        store.close()


@pytest.mark.slow
def test_a_rewrite_completes_under_a_steady_trickle_of_exports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(field_layout, "CHUNK_ROWS", 100_000)
    store = Store(tmp_path / "layout.duckdb")
    _write(store, 1)
    _ballast(store, 1_000_000)  # due by the default policy
    replayer = Replayer(store)
    stop = threading.Event()
    sent: list[int] = []
    found_while_rewriting: list[bool] = []

    def trickle() -> None:
        n = 1
        while not stop.is_set():
            replayer.notify(_write(store, 1, first=n))
            sent.append(n)
            if n > 1 and store.rewriting_field_index:
                # The run before this one was replayed and indexed by now, or soon.
                found_while_rewriting.append(f"run-{n - 1}" in _matching(store, "n = 3"))
            n += 1
            stop.wait(0.05)

    exporter = threading.Thread(target=trickle)
    exporter.start()
    try:
        wait_until(lambda: _layout(store).sorted_rows, timeout=120, what="a sorted index")
        assert _layout(store).sorted_rows > 1_000_000
        assert exporter.is_alive()  # it finished while exports kept coming
        assert any(found_while_rewriting)  # and replays went on meanwhile
    finally:
        stop.set()
        exporter.join()
    try:
        assert replayer.wait_idle(30)
        assert _matching(store, "n = 3") == {"run-0"} | {f"run-{n}" for n in sent}
        assert len(sent) > 10
    finally:
        replayer.close()
        store.close()


@pytest.mark.slow
def test_an_export_that_interrupts_a_piece_takes_the_write_lock_before_the_piece_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Many short pieces; an export always gets the lock first, however slow the machine.
    monkeypatch.setattr(field_layout, "CHUNK_ROWS", 50_000)
    monkeypatch.setattr(rewrite_module, "EXPORTS_FIRST_SECONDS", 60.0)
    store = Store(tmp_path / "layout.duckdb")
    try:
        _write(store, 1)
        _ballast(store, 1_000_000, run_keys=200)
        rewriter = store._rewriter
        rewrite = _rewriting(store)
        interrupting, n = 0, 1
        deadline = time.monotonic() + 60
        while rewrite.is_alive() and interrupting < 5 and time.monotonic() < deadline:
            if rewriter._preemptible is None:  # no piece that an export may interrupt
                time.sleep(0.001)
                continue
            before = rewriter.preemptions
            _write(store, 1, first=n)
            n += 1
            # Let go by the piece it interrupted, the lock went to this export: the
            # piece, tried again at once, was not interrupted again (or copied through).
            assert rewriter.preemptions - before <= 1
            interrupting += rewriter.preemptions - before
        assert interrupting == 5
        _finished(rewrite)
        assert all(store.execution_row(f"run-{i}") is not None for i in range(n))
    finally:
        store.close()


@pytest.mark.slow
def test_each_piece_is_checkpointed_before_the_next_is_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # So that the checkpoint after the swap, which holds the write lock, has
    # only the last changes to write, not every piece's rows.
    monkeypatch.setattr(field_layout, "CHUNK_ROWS", 100_000)
    store = Store(tmp_path / "layout.duckdb")
    try:
        _write(store, 1)
        _ballast(store, 600_000, run_keys=100)
        copied, wal_after_pieces = 0, []

        def between_steps() -> bool:
            nonlocal copied
            rewrite = store._rewriter._rewrite
            if rewrite is not None and rewrite.copied > copied:
                copied = rewrite.copied
                wal_after_pieces.append(store.wal_bytes())
            return False

        _finished(_rewriting(store, between_steps))
        assert len(wal_after_pieces) > 10  # staged, then merged: several pieces each
        assert wal_after_pieces == [0] * len(wal_after_pieces)
    finally:
        store.close()

