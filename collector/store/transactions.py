"""The two ways the store brackets statements: a write transaction and a read snapshot.

Invariant: a block that fails leaves no transaction open, and the error it failed with
is the one raised: the ROLLBACK after it is quiet, since DuckDB often ended the
transaction already and its refusal would hide the real cause.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import duckdb

from collector.store.errors import StoreError, StoreOutOfMemory


@contextmanager
def transaction(cursor: duckdb.DuckDBPyConnection, failure: str) -> Iterator[None]:
    """The block in one transaction; DuckDB's errors at BEGIN, inside or at COMMIT are
    raised as `failure_of` them, others unchanged, after a rollback."""
    try:
        cursor.execute("BEGIN TRANSACTION")
    except duckdb.Error as exc:
        raise failure_of(exc, failure) from exc
    committed = False
    try:
        yield
        cursor.execute("COMMIT")
        committed = True
    except duckdb.Error as exc:
        raise failure_of(exc, failure) from exc
    finally:
        if not committed:
            _rollback_quietly(cursor)


@contextmanager
def read_snapshot(cursor: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """The block's reads see one snapshot, so a write committing between two statements
    cannot make them disagree; nothing is committed."""
    cursor.execute("BEGIN TRANSACTION")
    try:
        yield
    finally:
        _rollback_quietly(cursor)


def _rollback_quietly(cursor: duckdb.DuckDBPyConnection) -> None:
    """ROLLBACK, ignoring DuckDB's refusal: the error that led here is the one to report."""
    try:
        cursor.execute("ROLLBACK")
    except duckdb.Error:
        return


# How DuckDB's buffer manager says it could not allocate, also when wrapped in a
# TransactionException at COMMIT ("Failed to commit: failed to pin block of ...").
_OUT_OF_MEMORY_TEXTS = ("failed to pin block", "could not allocate block")


def failure_of(exc: duckdb.Error, failure: str) -> StoreError:
    """StoreError("<failure>: <DuckDB's message>"), or StoreOutOfMemory past DuckDB's
    memory limit (which callers may retry at a higher one)."""
    ran_out = isinstance(exc, duckdb.OutOfMemoryException) or (
        isinstance(exc, duckdb.TransactionException)
        and any(text in str(exc) for text in _OUT_OF_MEMORY_TEXTS)
    )
    return (StoreOutOfMemory if ran_out else StoreError)(f"{failure}: {exc}")
