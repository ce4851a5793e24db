"""The background replayer against a real DuckDB file: storing exports comes first."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest
from history_records import Patch, scenario

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
