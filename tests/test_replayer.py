"""The background replayer against a real DuckDB file: storing exports comes first."""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support.history_records import Patch, scenario

from collector.foreground import Foreground
from collector.jobs import replayer as replayer_module
from collector.jobs.replayer import Replayer
from collector.model import Evidence, Execution, Transition
from collector.store import IngestBatch, Store, WriteResult
from collector.store.retention import delete_traces

NOTHING_WRITTEN = WriteResult(store_ids=frozenset(), run_ids=frozenset())
# A bound on waits for the replayer's thread, generous for a busy machine: the
# tests wait for what it does, never for a time.
WAIT_SECONDS = 60.0


def _run() -> tuple[Execution, list[Transition]]:
    execution, transitions, _ = scenario(
        {"n": 0}, [[{"op": "replace", "path": "/n", "value": i}] for i in range(1, 6)]
    )
    execution = dataclasses.replace(execution, run_id="run-r", store_id="store-r")
    placed = [t._replace(store_id="store-r", event_index=i) for i, t in enumerate(transitions)]
    return execution, placed


def _odd_run(name: str, trace_id: str, start: Any, patches: list[Patch]) -> Evidence:
    """One execution of its own store and trace, so several can be stored side by side."""
    execution, transitions, _ = scenario(start, patches)
    execution = dataclasses.replace(
        execution, run_id=f"run-{name}", store_id=f"store-{name}", trace_id=trace_id
    )
    placed = [
        t._replace(store_id=f"store-{name}", trace_id=trace_id, event_index=i)
        for i, t in enumerate(transitions)
    ]
    return Evidence([execution], placed, {})


def _verdict(store: Store, run_id: str) -> str | None:
    row = store.execution_row(run_id)
    assert row is not None
    return row.verdict


def _write_after_start(tmp_path: Path) -> tuple[Store, Replayer, WriteResult]:
    store = Store(tmp_path / "replayer.duckdb")
    replayer = Replayer(store)  # started on an empty file: nothing stale to replay
    execution, transitions = _run()
    result = store.write([IngestBatch(spans=[], evidence=Evidence([execution], transitions, {}))])
    return store, replayer, result


def test_replays_wait_until_the_exports_behind_a_commit_are_stored(tmp_path: Path) -> None:
    store, replayer, result = _write_after_start(tmp_path)
    try:
        replayer.notify(result, more_to_store=True)
        assert not replayer.wait_idle(0.5)
        assert _verdict(store, "run-r") is None

        replayer.notify(NOTHING_WRITTEN, more_to_store=False)  # the extractor caught up
        assert replayer.wait_idle(10)
        assert _verdict(store, "run-r") == "verified"
    finally:
        replayer.close()
        store.close()


def test_replays_wait_a_bounded_time_when_storing_stays_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replayer_module, "MAX_DEFER_SECONDS", 0.3)
    store, replayer, result = _write_after_start(tmp_path)
    try:
        began = time.monotonic()
        replayer.notify(result, more_to_store=True)
        assert replayer.wait_idle(10)
        assert time.monotonic() - began >= 0.3
        assert _verdict(store, "run-r") == "verified"
    finally:
        replayer.close()
        store.close()


class _ParkOnRefusal(logging.Handler):
    """Holds the replayer's thread where it reports a refused replay, until released.

    While it is held, no replay runs: the test reads and changes the store
    with nothing else querying DuckDB, and the try again comes only after.
    """

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.refused = threading.Event()
        self.resume = threading.Event()
        self.refusals: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if not record.getMessage().startswith("replay failed"):
            return
        self.refusals.append(record.getMessage())
        if not self.refused.is_set():
            self.refused.set()
            self.resume.wait(WAIT_SECONDS)


def test_a_replay_the_database_could_not_do_is_tried_again_until_it_is(
    tmp_path: Path,
) -> None:
    # Seen in bench_ingest: DuckDB ran out of memory reading a batch's evidence,
    # and those runs kept no verdict until some later commit touched their stores.
    # Only the replay runs at the starved limit: a read of this thread's there
    # would compete with the replayer's (and DuckDB's threads) for the same
    # 4 MB, and whether it fit depended on what else ran at that moment.
    store = Store(tmp_path / "replayer.duckdb", memory_limit="128MB")
    parked = _ParkOnRefusal()
    replayer_log = logging.getLogger(replayer_module.__name__)
    replayer_log.addHandler(parked)
    # Held, this keeps the replayer from starting a replay until the limit is low.
    studio = Foreground(max_yield_seconds=WAIT_SECONDS)
    replayer = None
    try:
        execution, transitions = _run()
        big_end = json.dumps({"n": 5, "padding": "x" * (4 * 2**20)})
        execution = dataclasses.replace(execution, state_end=big_end)
        store.write([IngestBatch(spans=[], evidence=Evidence([execution], transitions, {}))])
        store.checkpoint()  # so that DuckDB can evict the rows to this limit
        with studio.serving():
            replayer = Replayer(store, studio)  # the run is stale: replayed once let go
            assert store.limit_memory("4MB")
        assert parked.refused.wait(WAIT_SECONDS), "the replay was never refused"
        assert "Out of Memory" in parked.refusals[0]
        assert not replayer.wait_idle(0)  # the run waits to be tried again
        assert store.limit_memory()
        assert _verdict(store, "run-r") is None  # the refused replay saved nothing
        parked.resume.set()

        assert replayer.wait_idle(WAIT_SECONDS)
        assert _verdict(store, "run-r") == "failed"  # its end state is not what replay made
        assert len(parked.refusals) == 1
    finally:
        parked.resume.set()
        replayer_log.removeHandler(parked)
        if replayer is not None:
            replayer.close()
        store.close()


def test_a_run_naming_no_store_is_replayed_by_its_run_id_once(tmp_path: Path) -> None:
    # An owner span that lost junjo.workflow.store.id (the SDK's attribute
    # limit) is an execution no store's replay finds.
    store = Store(tmp_path / "replayer.duckdb")
    execution, transitions = _run()
    storeless = dataclasses.replace(
        execution, run_id="run-n", span_id="1" * 16, store_id=None, state_start=None
    )
    result = store.write(
        [IngestBatch(spans=[], evidence=Evidence([execution, storeless], transitions, {}))]
    )
    assert result.store_ids == {"store-r"}
    assert result.storeless_run_ids == {"run-n"}
    # Never replayed (as after a crash before the replay): each is stale once,
    # by its store or by its run id, never both.
    assert store.stale_store_ids() == ["store-r"]
    assert store.stale_storeless_run_ids() == ["run-n"]
    replayer = Replayer(store)
    try:
        assert replayer.wait_idle(10)
        assert (_verdict(store, "run-r"), _verdict(store, "run-n")) == (
            "verified", "not_applicable"
        )
        assert store.stale_store_ids() == store.stale_storeless_run_ids() == []
        # A later commit of a run naming no store is replayed as it arrives.
        late = dataclasses.replace(storeless, run_id="run-late", span_id="2" * 16)
        replayer.notify(store.write([IngestBatch(spans=[], evidence=Evidence([late], [], {}))]))
        assert replayer.wait_idle(10)
        assert _verdict(store, "run-late") == "not_applicable"
    finally:
        replayer.close()
        store.close()


def test_odd_but_valid_pointers_get_a_verdict_and_are_not_stale_again(tmp_path: Path) -> None:
    # A member named by a lone surrogate (valid JSON, not UTF-8), and a token of
    # Unicode digits that names a member, never an array index.
    member: Patch = [{"op": "add", "path": "/\ud800", "value": 1}]
    surrogate = _odd_run("s", "1" * 32, {"a": 1}, [member])
    squared: Patch = [
        {"op": "add", "path": "/x/\u00b2", "value": 1},
        {"op": "replace", "path": "/x", "value": [0]},
    ]
    digits = _odd_run("d", "2" * 32, {"x": {}}, [squared])
    store = Store(tmp_path / "replayer.duckdb")
    store.write([IngestBatch(spans=[], evidence=surrogate), IngestBatch(spans=[], evidence=digits)])
    assert sorted(store.stale_store_ids()) == ["store-d", "store-s"]
    replayer = Replayer(store)  # replays what is stale at start-up, both in one batch
    try:
        assert replayer.wait_idle(10)
        assert (_verdict(store, "run-s"), _verdict(store, "run-d")) == ("verified", "verified")
        assert store.stale_store_ids() == []
    finally:
        replayer.close()
        store.close()


def _stored_rows(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    """Replay and index rows, each index row named by its run's id ("orphan": none)."""
    run = "coalesce(e.run_id, 'orphan')"
    with store._cursor() as cursor:
        replays = cursor.execute(
            "SELECT * EXCLUDE (replayed_unix_nano) FROM execution_replays ORDER BY ALL"
        )
        stored = {"execution_replays": replays.fetchall()}
        for table in ("field_values", "field_ranges"):
            stored[table] = cursor.execute(
                f"SELECT {run}, t.* EXCLUDE (run_key) FROM {table} t"
                " LEFT JOIN executions e USING (run_key) ORDER BY ALL"
            ).fetchall()
        return stored


def test_replays_saved_a_few_at_a_time_store_what_one_save_stores(tmp_path: Path) -> None:
    """One read of many stores, saved in groups: the same rows, each with its own run key."""
    evidence = [
        _odd_run(str(n), f"{n:032x}", {"n": 0, "tags": []}, [
            [{"op": "replace", "path": "/n", "value": n * i}] for i in range(1, 4)
        ] + [[{"op": "add", "path": "/tags/-", "value": f"t{n}"}]])
        for n in range(1, 8)
    ]  # fmt: skip
    stored = {}
    for save_every in (64, 3):
        store = Store(tmp_path / f"every-{save_every}.duckdb")
        store.write([IngestBatch(spans=[], evidence=e) for e in evidence])
        stores = sorted(store.stale_store_ids())
        assert replayer_module.replay_stores(store, stores, save_every=save_every) == 7
        assert store.stale_store_ids() == []
        with store._cursor() as cursor:
            mismatched = cursor.execute(
                "SELECT count(*) FROM field_values v"
                " WHERE NOT EXISTS (SELECT 1 FROM executions e WHERE e.run_key = v.run_key)"
            ).fetchall()
        assert mismatched == [(0,)]
        stored[save_every] = _stored_rows(store)
        store.close()
    assert stored[3] == stored[64]
    assert len(stored[3]["execution_replays"]) == 7


def test_a_run_pruned_between_its_read_and_its_save_gets_no_replay_rows(tmp_path: Path) -> None:
    """The save finds its runs again: what a prune deleted meanwhile stays deleted."""
    store = Store(tmp_path / "pruned.duckdb")
    kept = _odd_run("kept", "a" * 32, {"n": 0}, [[{"op": "replace", "path": "/n", "value": 1}]])
    gone = _odd_run("gone", "b" * 32, {"n": 0}, [[{"op": "replace", "path": "/n", "value": 2}]])
    store.write([IngestBatch(spans=[], evidence=kept), IngestBatch(spans=[], evidence=gone)])
    read = store.replay_batch

    def read_then_prune(*args: Any, **kwargs: Any) -> Any:
        batch = read(*args, **kwargs)
        with store._cursor() as cursor:
            delete_traces(cursor, ["b" * 32])
        return batch

    store.replay_batch = read_then_prune  # type: ignore[method-assign]
    assert replayer_module.replay_stores(store, ["store-gone", "store-kept"]) == 2
    rows = _stored_rows(store)
    assert [row[0] for row in rows["execution_replays"]] == ["run-kept"]
    assert {row[0] for row in rows["field_values"]} == {"run-kept"}
    assert {row[0] for row in rows["field_ranges"]} == {"run-kept"}
    store.close()
