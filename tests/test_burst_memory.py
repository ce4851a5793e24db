"""DuckDB's cache is held smaller through a burst and restored after, on a real file."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import pytest
from support.history_records import scenario
from support.otlp_craft import new_span_id, new_trace_id, plain_request
from support.polling import wait_until
from test_field_layout import _layout

from collector.encode.exports import batch_from_export
from collector.jobs import burst_memory
from collector.jobs.burst_memory import BurstMemory
from collector.jobs.replayer import Replayer, replay_stores
from collector.model import Evidence
from collector.store import IngestBatch, Store, StoreOutOfMemory, WriteResult
from collector.store.field_layout import CompactionPolicy, IndexLayout

CONFIGURED = "128MB"
BURST = "64MB"
# How DuckDB prints them back (it counts in MiB).
CONFIGURED_SHOWN = "122.0 MiB"
BURST_SHOWN = "61.0 MiB"


def _store(tmp_path: Path) -> Store:
    return Store(tmp_path / "burst.duckdb", memory_limit=CONFIGURED)


def _until_limit(store: Store, shown: str) -> None:
    wait_until(
        store.memory_limit, until=lambda limit: limit == shown, timeout=10, interval=0.02,
        what=f"DuckDB's memory limit to be {shown}",
    )  # fmt: skip


def test_a_burst_lowers_the_limit_once_and_settling_restores_the_configured_one(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path)
    try:
        burst = BurstMemory(store, BURST)
        burst.enter()
        burst.enter()
        assert burst.lowered and store.memory_limit() == BURST_SHOWN
        burst.leave()
        assert not burst.lowered and store.memory_limit() == CONFIGURED_SHOWN
        burst.leave()  # settling twice is harmless
        assert store.memory_limit() == CONFIGURED_SHOWN
    finally:
        store.close()


def _export_with_a_big_attribute(
    mebibytes: int, trace_id: bytes | None = None, fill: str = "x"
) -> IngestBatch:
    request = plain_request(
        trace_id or new_trace_id(), [new_span_id()], start_unix_nano=1, end_unix_nano=2
    )
    attribute = request.resource_spans[0].resource.attributes.add(key="big")
    attribute.value.string_value = fill * (mebibytes * 1024 * 1024)
    return batch_from_export(request.SerializeToString())


def test_a_write_that_runs_out_of_memory_in_a_burst_is_stored_at_the_configured_limit(
    tmp_path: Path,
) -> None:
    # A 4 MiB attribute fits in 128 MB, not in 16 MB.
    store = _store(tmp_path)
    try:
        store.limit_memory("16MB")  # a limit set as the configured one would be
        with pytest.raises(StoreOutOfMemory):
            store.write([_export_with_a_big_attribute(4)])
        store.limit_memory()
        burst = BurstMemory(store, "16MB")
        burst.enter()
        assert store.memory_limit() != CONFIGURED_SHOWN
        store.write([_export_with_a_big_attribute(4)])
        assert store.counts()["spans"] == 1
        # The configured limit holds for the rest of the burst, and after it.
        assert store.memory_limit() == CONFIGURED_SHOWN
        burst.enter()
        assert store.memory_limit() == CONFIGURED_SHOWN
        burst.leave()
        assert store.memory_limit() == CONFIGURED_SHOWN
    finally:
        store.close()


def test_a_read_that_runs_out_of_memory_in_a_burst_is_answered_at_the_configured_limit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Found by bench_ingest: /healthz answered 503 because its counts ran out of
    # memory at a burst's lowered limit. Three 2 MiB resources fit in 128 MB, not 4 MB.
    store = _store(tmp_path)
    try:
        trace_id = new_trace_id()
        for marker in "abc":
            store.write([_export_with_a_big_attribute(2, trace_id, marker)])
        store.limit_memory("4MB")  # a limit set as the configured one would be
        with pytest.raises(StoreOutOfMemory):
            store.spans_of_trace(trace_id.hex())
        store.limit_memory()
        burst = BurstMemory(store, "4MB")
        burst.enter()
        assert burst.lowered
        with caplog.at_level(logging.INFO, logger="collector.store"):
            assert len(store.spans_of_trace(trace_id.hex())) == 3
        # The log names the read that needed more.
        assert "Store.spans_of_trace ran out of memory at the lowered limit" in caplog.text
        # Raised for that read only: the burst goes on at its own limit.
        assert store.memory_limit() == "3.8 MiB"
        assert store.counts()["spans"] == 3
        burst.leave()
        assert store.memory_limit() == CONFIGURED_SHOWN
    finally:
        store.close()


def test_a_replay_save_that_runs_out_of_memory_in_a_burst_is_saved_at_the_configured_limit(
    tmp_path: Path,
) -> None:
    # Found by bench_ingest: once the WAL passed the checkpoint threshold, every
    # replay save's COMMIT (which then checkpoints) ran out at the burst's limit.
    # Here an end state of 4 MiB is read at 8 MB, and its save is not.
    store = _store(tmp_path)
    try:
        _stored_run(store, "s", state_end=json.dumps({"n": 5, "padding": "x" * (4 * 2**20)}))
        store.checkpoint()
        assert store.lower_memory("8MB")
        assert replay_stores(store, ["store-s"]) == 1
        row = store.execution_row("run-s")
        assert row is not None and row.verdict == "failed"  # its end state is not replay's
        assert store.memory_limit() == "7.6 MiB"  # raised for the save alone
    finally:
        store.close()


def test_without_a_burst_limit_nothing_changes(tmp_path: Path) -> None:
    store = _store(tmp_path)
    try:
        burst = BurstMemory(store, None)
        burst.enter()
        assert not burst.lowered and store.memory_limit() == CONFIGURED_SHOWN
    finally:
        store.close()


def test_a_limit_duckdb_refuses_leaves_the_limit_as_it_was(tmp_path: Path) -> None:
    store = _store(tmp_path)
    try:
        burst = BurstMemory(store, "a lot")
        burst.enter()
        assert not burst.lowered and store.memory_limit() == CONFIGURED_SHOWN
    finally:
        store.close()


def _stored_run(store: Store, name: str = "b", state_end: str | None = None) -> WriteResult:
    """Run `run-<name>` on store `store-<name>`, five steps; `state_end` replaces its end."""
    execution, transitions, _ = scenario(
        {"n": 0}, [[{"op": "replace", "path": "/n", "value": i}] for i in range(1, 6)]
    )
    execution = dataclasses.replace(execution, run_id=f"run-{name}", store_id=f"store-{name}")
    if state_end is not None:
        execution = dataclasses.replace(execution, state_end=state_end)
    placed = [
        t._replace(store_id=f"store-{name}", event_index=i) for i, t in enumerate(transitions)
    ]
    return store.write([IngestBatch(spans=[], evidence=Evidence([execution], placed, {}))])


def test_the_replayer_holds_the_lower_limit_until_the_burst_is_stored_and_replayed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Any WAL is worth folding here, so the settling checkpoint is visible.
    monkeypatch.setattr(burst_memory, "MIN_SETTLE_CHECKPOINT_BYTES", 0)
    store = _store(tmp_path)
    replayer = Replayer(store, burst=BurstMemory(store, BURST))
    try:
        result = _stored_run(store)
        assert store.wal_bytes() > 0
        replayer.notify(result, more_to_store=True)  # exports still wait in the spool
        _until_limit(store, BURST_SHOWN)
        assert not replayer.wait_idle(0.3)

        replayer.notify(WriteResult(frozenset(), frozenset()), more_to_store=False)
        assert replayer.wait_idle(10)
        # Idle means settled: the limit is back and the burst's WAL is in the file.
        assert store.memory_limit() == CONFIGURED_SHOWN
        assert store.wal_bytes() == 0
        row = store.execution_row("run-b")
        assert row is not None and row.verdict == "verified"
    finally:
        replayer.close()
        store.close()


def test_the_field_index_rewrite_after_a_burst_runs_at_the_lower_limit(tmp_path: Path) -> None:
    # The rewrite's sorts fill whatever pool they get: at the configured limit they
    # set the server's peak after a burst (docs/memory.md).
    store = _store(tmp_path)
    limits: list[str] = []
    rewrites = [True]

    class Recording(CompactionPolicy):
        """Due on any appended row while `rewrites` says so; notes DuckDB's limit
        whenever it is asked."""

        def due(self, layout: IndexLayout) -> bool:
            limits.append(store.memory_limit())
            return rewrites[0] and super().due(layout)

    replayer = Replayer(
        store,
        burst=BurstMemory(store, BURST),
        compaction=Recording(min_appended_rows=1, appended_share=0.0),
    )
    try:
        replayer.notify(_stored_run(store))
        wait_until(
            lambda: _layout(store).sorted_rows, timeout=10, interval=0.02,
            what="the field index rewrite to sort rows",
        )  # fmt: skip
        assert _layout(store).appended_rows == 0
        # Asked at the configured limit whether to lower it; begun at the lower one.
        assert limits[-2:] == [CONFIGURED_SHOWN, BURST_SHOWN], limits
        _until_limit(store, CONFIGURED_SHOWN)
        # Once nothing is due, an idle moment leaves the limit (and the cache) alone.
        rewrites[0] = False
        limits.clear()
        replayer.notify(_stored_run(store, "c"))
        assert replayer.wait_idle(10)
        wait_until(
            lambda: limits, timeout=10, interval=0.02, what="the policy to be asked again"
        )
        assert set(limits) == {CONFIGURED_SHOWN}
    finally:
        replayer.close()
        store.close()


def test_closing_during_a_burst_still_folds_the_wal_in(tmp_path: Path) -> None:
    store = _store(tmp_path)
    _stored_run(store)
    assert store.limit_memory(BURST)
    store.close()
    # The final checkpoint folded everything in: reopening finds no WAL to replay.
    assert store.wal_bytes() == 0
    reopened = Store(tmp_path / "burst.duckdb", read_only=True)
    try:
        assert reopened.get_execution("run-b") is not None
    finally:
        reopened.close()
