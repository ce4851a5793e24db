"""Opening the file again lets go of memory DuckDB pins for as long as it is open."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest
from support.polling import wait_until
from test_burst_memory import BURST, BURST_SHOWN, CONFIGURED_SHOWN, _stored_run

import collector.store as store_module
from collector.jobs import burst_memory
from collector.jobs import replayer as replayer_module
from collector.jobs.burst_memory import BurstMemory
from collector.jobs.replayer import Replayer
from collector.store import Store
from collector.store.listing import ExecutionQuery

# What DuckDB pins below: ~16 KiB of version information for each vector of
# 2,048 rows that a delete touched, 24 MiB for these rows.
ROWS = 3_000_000
PINNED_BELOW = "12MB"


def _pin_memory(store: Store) -> None:
    """Store ROWS rows of ballast, then delete one in every vector of them, as
    re-replays and retention delete rows here and there.

    Rows appended in commits smaller than a vector pin memory the same way
    (bench_ingest's burst, ~2 bytes a row); deletes pin more with less work.
    """
    with store._cursor() as cursor:
        cursor.execute("CREATE TABLE ballast AS SELECT range AS i FROM range(?)", [ROWS])
        cursor.execute("CHECKPOINT")
        cursor.execute("DELETE FROM ballast WHERE i % 2048 = 7")
        cursor.execute("CHECKPOINT")


def test_opening_the_file_again_lets_go_of_what_duckdb_pinned(tmp_path: Path) -> None:
    store = Store(tmp_path / "pinned.duckdb", memory_limit="128MB")
    try:
        _stored_run(store)
        _pin_memory(store)
        # Neither a checkpoint nor a lower limit frees it: DuckDB refuses the limit.
        assert not store.limit_memory(PINNED_BELOW)

        assert store.release_memory()
        assert store.limit_memory(PINNED_BELOW)
        assert store.limit_memory()
        # Everything committed is still there, and the store goes on as before.
        assert store.counts()["executions"] == 1
        _stored_run(store, "c")
        assert store.counts()["executions"] == 2
        with store._cursor() as cursor:
            row = cursor.execute("SELECT count(*) FROM ballast").fetchone()
        assert row is not None and row[0] == ROWS - ROWS // 2048 - 1
    finally:
        store.close()


def test_a_reopen_waits_for_the_cursors_in_use_and_holds_back_new_ones(tmp_path: Path) -> None:
    store = Store(tmp_path / "readers.duckdb", memory_limit="128MB")
    _stored_run(store)
    reading = threading.Event()
    finished: list[object] = []

    def long_read() -> None:
        with store._cursor() as cursor:
            reading.set()
            time.sleep(0.5)  # a query in progress when the reopen is asked for
            finished.append(cursor.execute("SELECT count(*) FROM executions").fetchone())

    reader = threading.Thread(target=long_read)
    try:
        reader.start()
        assert reading.wait(5)
        started = time.monotonic()
        assert store.release_memory()
        # It waited for the read, which finished on the connection it began on.
        assert time.monotonic() - started >= 0.4
        reader.join(5)
        assert finished == [(1,)]
        assert store.counts()["executions"] == 1
    finally:
        reader.join(5)
        store.close()


def test_a_reopen_gives_up_while_a_cursor_stays_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The thread holding the cursor asks, as a caller holding one by mistake
    # would: it must not wait for itself for ever.
    monkeypatch.setattr(store_module, "REOPEN_WAIT_SECONDS", 0.2)
    store = Store(tmp_path / "held.duckdb", memory_limit="128MB")
    try:
        _stored_run(store)
        with store._cursor() as cursor:
            assert not store.release_memory()
            row = cursor.execute("SELECT count(*) FROM executions").fetchone()
            assert row == (1,)
        # The gate is open again for everyone.
        assert store.counts()["executions"] == 1
    finally:
        store.close()


def test_a_reopen_within_a_burst_keeps_the_bursts_limit(tmp_path: Path) -> None:
    store = Store(tmp_path / "lowered.duckdb", memory_limit="128MB")
    try:
        assert store.lower_memory(BURST)
        _stored_run(store)
        _pin_memory(store)
        assert not store.limit_memory(PINNED_BELOW)

        assert store.release_memory()
        assert store.memory_limit() == BURST_SHOWN
        assert store.counts()["executions"] == 1
        # Still a burst: the configured limit comes back when it ends.
        assert store.limit_memory()
        assert store.memory_limit() == CONFIGURED_SHOWN
    finally:
        store.close()


def test_no_reopen_while_a_call_runs_at_the_configured_limit(tmp_path: Path) -> None:
    # A read that ran out of memory at the burst's limit runs again at the
    # configured one (collector/store/memory.py); a new connection would lose that.
    store = Store(tmp_path / "raised.duckdb", memory_limit="128MB")
    try:
        assert store.lower_memory(BURST)
        with store._memory.configured_for_a_call():
            assert not store.release_memory()
            assert store.memory_limit() == CONFIGURED_SHOWN
        assert store.memory_limit() == BURST_SHOWN
        assert store.release_memory()
    finally:
        store.close()


def test_a_settled_burst_opens_the_file_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(burst_memory, "MIN_SETTLE_CHECKPOINT_BYTES", 0)
    store = Store(tmp_path / "settled.duckdb", memory_limit="128MB")
    try:
        burst = BurstMemory(store, BURST)
        burst.enter()
        _stored_run(store)
        _pin_memory(store)
        assert not store.limit_memory(PINNED_BELOW)  # (refused: the burst's limit stays)
        with caplog.at_level(logging.INFO, logger="collector.store"):
            burst.leave()
        assert "opened" in caplog.text and "again to release" in caplog.text
        assert store.limit_memory(PINNED_BELOW)
    finally:
        store.close()


def test_an_idle_server_reopens_once_enough_rows_were_appended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A trickle never lowers the limit, so no burst settles to reopen the file.
    store = Store(tmp_path / "trickle.duckdb", memory_limit="128MB")
    replayer = Replayer(store, burst=BurstMemory(store, BURST))
    try:
        with caplog.at_level(logging.INFO, logger="collector.store"):
            replayer.notify(_stored_run(store))
            assert replayer.wait_idle(10)
            assert "again to release" not in caplog.text  # far fewer than RELEASE_AFTER_ROWS

            monkeypatch.setattr(store_module, "RELEASE_AFTER_ROWS", 2)
            replayer.notify(_stored_run(store, "c"))
            assert replayer.wait_idle(10)
            wait_until(
                lambda: "again to release" in caplog.text, timeout=10, interval=0.02,
                what='"again to release" in the log',
            )  # fmt: skip
            # Counted again from the reopen.
            assert not store.release_memory_if_grown()
        assert {"run-b", "run-c"} <= {row.run_id for row in store.search(ExecutionQuery())}
    finally:
        replayer.close()
        store.close()


def test_a_long_burst_opens_the_file_again_as_it_goes_at_the_bursts_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Three stores, replayed one a batch: a burst (more wait than a save takes),
    # with a reopen due after every batch, and the burst settled after the last.
    monkeypatch.setattr(replayer_module, "READ_BATCH_STORES", 1)
    monkeypatch.setattr(replayer_module, "REPLAY_BATCH_STORES", 1)
    monkeypatch.setattr(store_module, "RELEASE_AFTER_ROWS", 2)
    store = Store(tmp_path / "long-burst.duckdb", memory_limit="128MB")
    limits_at_reopen: list[str] = []
    open_again = store._open_again

    def recording_open_again() -> bool:
        opened = open_again()
        # On the new connection itself: every cursor waits until this returns.
        row = store._connection.execute("SELECT current_setting('memory_limit')").fetchone()
        assert row is not None
        limits_at_reopen.append(row[0])
        return opened

    monkeypatch.setattr(store, "_open_again", recording_open_again)
    for name in "bcd":
        _stored_run(store, name)
    # The replayer finds the three unreplayed stores when it starts. (Notifying it of
    # them too would race its first batch: a store replayed already could be queued
    # again, and replayed in a fourth batch.)
    replayer = Replayer(store, burst=BurstMemory(store, BURST))
    try:
        assert replayer.wait_idle(10)
        # Two within the burst, at its limit, then the one once it settled.
        assert limits_at_reopen == [BURST_SHOWN, BURST_SHOWN, CONFIGURED_SHOWN], limits_at_reopen
        assert store.memory_limit() == CONFIGURED_SHOWN
        rows = {row.run_id: row.verdict for row in store.search(ExecutionQuery())}
        assert rows == {"run-b": "verified", "run-c": "verified", "run-d": "verified"}
    finally:
        replayer.close()
        store.close()
