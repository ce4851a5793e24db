"""The store's transactions: a failed block leaves nothing behind, and says why it failed.

The faults are real: DuckDB's write-ahead log path taken by a directory makes
every COMMIT fail (as a full or read-only disk would), and exceptions are
raised inside real DuckDB transactions.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from collector.store import Store, StoreError, StoreOutOfMemory
from collector.store.transactions import read_snapshot, transaction


def _count(connection: duckdb.DuckDBPyConnection) -> int:
    row = connection.execute("SELECT count(*) FROM t").fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def connection(tmp_path: Path) -> duckdb.DuckDBPyConnection:
    connection = duckdb.connect(str(tmp_path / "t.duckdb"))
    connection.execute("CREATE TABLE t (x INTEGER)")
    return connection


def test_transaction_rolls_back_on_any_exception_and_raises_it_unchanged(
    connection: duckdb.DuckDBPyConnection,
) -> None:
    failure = ValueError("a bug in the block")
    with pytest.raises(ValueError) as raised, transaction(connection, "could not insert"):
        connection.execute("INSERT INTO t VALUES (1)")
        raise failure
    assert raised.value is failure
    # Rolled back on this very connection, which can start the next one at once.
    assert _count(connection) == 0
    with transaction(connection, "could not insert"):
        connection.execute("INSERT INTO t VALUES (2)")
    assert _count(connection) == 1


def test_transaction_maps_duckdb_errors_to_store_errors_with_the_cause(
    connection: duckdb.DuckDBPyConnection,
) -> None:
    with (
        pytest.raises(StoreError, match=r"^could not insert: .*nope") as raised,
        transaction(connection, "could not insert"),
    ):
        connection.execute("INSERT INTO t VALUES (1)")
        connection.execute("SELECT * FROM nope")
    assert type(raised.value) is StoreError  # not out of memory
    assert isinstance(raised.value.__cause__, duckdb.CatalogException)
    assert _count(connection) == 0


def test_a_commit_that_could_not_pin_a_block_ran_out_of_memory(
    connection: duckdb.DuckDBPyConnection,
) -> None:
    # DuckDB's own words when COMMIT could not allocate (seen at a 64 MB limit).
    refused = duckdb.TransactionException(
        "Failed to commit: failed to pin block of size 256.0 KiB (60.9 MiB/61.0 MiB used)"
    )
    with (
        pytest.raises(StoreOutOfMemory, match="pin block"),
        transaction(connection, "could not insert"),
    ):
        connection.execute("INSERT INTO t VALUES (1)")
        raise refused
    assert _count(connection) == 0
    # And the buffer manager's other words for it.
    with (
        pytest.raises(StoreOutOfMemory, match="allocate block"),
        transaction(connection, "could not insert"),
    ):
        raise duckdb.TransactionException(
            "Failed to commit: could not allocate block of size 256.0 KiB (91.3 MiB/91.5 MiB used)"
        )
    with (
        pytest.raises(StoreError) as other,
        transaction(connection, "could not insert"),
    ):
        raise duckdb.TransactionException("Failed to commit: conflict on tuple")
    assert type(other.value) is StoreError


def test_read_snapshot_commits_nothing_and_survives_a_failed_read(
    connection: duckdb.DuckDBPyConnection,
) -> None:
    with read_snapshot(connection):
        connection.execute("INSERT INTO t VALUES (1)")
    assert _count(connection) == 0
    with pytest.raises(duckdb.CatalogException), read_snapshot(connection):
        connection.execute("SELECT * FROM nope")
    with read_snapshot(connection):
        assert _count(connection) == 0


def test_a_key_that_cannot_be_committed_says_why_not_that_rollback_failed(
    tmp_path: Path,
) -> None:
    """A failed COMMIT ends DuckDB's transaction; the ROLLBACK after it must not
    replace the real cause with "cannot rollback - no transaction is active"."""
    db = tmp_path / "k.duckdb"
    store = Store(db)
    wal = db.with_name(db.name + ".wal")
    wal.mkdir()
    with pytest.raises(StoreError, match=r"could not record the key: .*commit") as raised:
        store.create_api_key("ci", "digest")
    assert "rollback" not in str(raised.value)
    wal.rmdir()
    assert store.list_api_keys() == []
    assert store.create_api_key("ci", "digest").name == "ci"
    store.close()
