"""The two ways the store brackets statements: a write transaction and a read snapshot.

Invariant: a block that fails leaves no transaction open, and the error it
failed with is the one raised. The ROLLBACK after a failure is quiet: DuckDB
has often ended the transaction already (a failed COMMIT does), and "cannot
rollback - no transaction is active" would otherwise replace the real cause,
such as the disk refusing the write-ahead log.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import duckdb

from collector.store.errors import StoreError, StoreOutOfMemory


@contextmanager
def transaction(cursor: duckdb.DuckDBPyConnection, failure: str) -> Iterator[None]:
    """The block in one transaction: BEGIN before it, COMMIT after it.

    If DuckDB fails at BEGIN, in the block or at COMMIT, `failure_of` its error
    is raised instead. Any other exception propagates unchanged. Either way the
    transaction is rolled back, and code after the `with` runs only once the
    block is committed.
    """
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
    """The block's reads see one snapshot of the database; nothing is committed.

    For reads that take more than one statement, so that a write committing
    between them (a prune, an ingest) cannot make them disagree. DuckDB's
    errors propagate unchanged; the store's cursor maps them to StoreError.
    """
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


# How DuckDB's buffer manager says it could not allocate. At COMMIT it comes
# wrapped in a TransactionException ("Failed to commit: failed to pin block of
# size 256.0 KiB (60.9 MiB/61.0 MiB used)", or "... could not allocate block of
# size ..."), seen while a burst ran at a lowered limit; it is still running
# out of memory.
_OUT_OF_MEMORY_TEXTS = ("failed to pin block", "could not allocate block")


def failure_of(exc: duckdb.Error, failure: str) -> StoreError:
    """StoreError("<failure>: <DuckDB's message>"), StoreOutOfMemory when DuckDB
    ran out of its memory limit (the store tries that again at its configured
    limit, and the extractor sets aside an export that keeps running out)."""
    ran_out = isinstance(exc, duckdb.OutOfMemoryException) or (
        isinstance(exc, duckdb.TransactionException)
        and any(text in str(exc) for text in _OUT_OF_MEMORY_TEXTS)
    )
    return (StoreOutOfMemory if ran_out else StoreError)(f"{failure}: {exc}")
