"""The background replayer against a real DuckDB file: storing exports comes first."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
from history_records import scenario

from collector import replayer as replayer_module
from collector.model import Evidence, Execution, Transition
from collector.replayer import Replayer
from collector.store import IngestBatch, Store, WriteResult

NOTHING_WRITTEN = WriteResult(store_ids=frozenset(), run_ids=frozenset())


def _run() -> tuple[Execution, list[Transition]]:
    execution, transitions, _ = scenario(
        {"n": 0}, [[{"op": "replace", "path": "/n", "value": i}] for i in range(1, 6)]
    )
    execution = dataclasses.replace(execution, run_id="run-r", store_id="store-r")
    placed = [t._replace(store_id="store-r", event_index=i) for i, t in enumerate(transitions)]
    return execution, placed


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
