"""Keeping the field index sorted: the policy, the store's rewrite, and the idle replayer."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import pytest
from history_records import scenario

from collector.model import Evidence, Execution, Transition
from collector.query import parse_query
from collector.replayer import Replayer
from collector.store import IngestBatch, Store, StoreError, WriteResult, field_layout
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


def _runs(count: int) -> tuple[list[Execution], list[Transition]]:
    executions, transitions = [], []
    for n in range(count):
        execution, steps, _ = scenario(
            {"n": 0, "tags": []},
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


def _write(store: Store, count: int) -> WriteResult:
    executions, transitions = _runs(count)
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
        deadline = time.monotonic() + 30
        while _layout(store).appended_rows and time.monotonic() < deadline:
            time.sleep(0.05)
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


def test_an_interrupted_rewrite_rolls_back_and_loses_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "layout.duckdb")
    _write(store, 1)
    with store._cursor() as cursor:
        # Enough rows that the rewrite takes a while: copies of one indexed run's rows.
        cursor.execute(
            "INSERT INTO field_values (run_id, run_key, parent_key, path_key, kind, num, str_key,"
            " str, bool_val, is_final, path, parent)"
            " SELECT 'run-0', (SELECT run_key FROM executions), i % 1000, (hash(i) >> 1)::BIGINT,"
            " 'number', i, NULL, NULL, NULL, false, '/n', '' FROM range(3000000) r(i)"
        )
        cursor.execute("UPDATE field_index_layout SET appended_rows = 3000000")
    before = (_index_rows(store), _layout(store))
    failed: list[BaseException] = []

    def rewrite() -> None:
        try:
            store.compact_field_index_if_due(EVERY_APPEND)
        except StoreError as exc:
            failed.append(exc)

    worker = threading.Thread(target=rewrite)
    worker.start()
    deadline = time.monotonic() + 30
    while store._maintenance is None and time.monotonic() < deadline:  # the rewrite began
        time.sleep(0.001)
    # Until it stops: an interrupt lands only while one of its statements runs.
    while worker.is_alive() and time.monotonic() < deadline:
        store.interrupt_maintenance()
        time.sleep(0.01)
    worker.join(60)
    try:
        assert failed and "sort the field index" in str(failed[0])
        assert (_index_rows(store), _layout(store)) == before
        assert store.compact_field_index_if_due(EVERY_APPEND)  # and it can be done later
    finally:
        store.close()

