"""SQL of an ingest write: the Arrow tables of a PreparedWrite, bulk inserted.

Call inside a transaction (Store.commit holds it). Duplicated deliveries are
normal in OTLP, and the keyed tables store a repeat once. One INSERT per
table, whatever the number of rows: the rows stay in Arrow and DuckDB reads
them from there, with no Python work per row.

A write is first tried as new (`insert_new`): plain INSERTs, which cost DuckDB
about half of what INSERT OR IGNORE ... RETURNING does (a 4-export commit of
bench_ingest's load: ~21 us a span against ~35). A key already stored makes
that fail with KeyStored, and the caller rolls back and stores the write again
with `insert_write`, which ignores what is stored and keeps only the evidence
of the spans it inserted. Most writes carry no repeat; a redelivery pays for
its write twice.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import duckdb
import pyarrow as pa

from collector.encode.rows import PreparedWrite
from collector.store import prepared, spool_position


class KeyStored(Exception):
    """A row of a write tried as new has a key that is stored already (a redelivery)."""


def insert_new(
    cursor: duckdb.DuckDBPyConnection,
    write: PreparedWrite,
    progress: tuple[int, int] | None,
    stored_resources: Collection[str],
) -> None:
    """Insert a write whose spans and executions are taken to be new. Raises KeyStored.

    `stored_resources` are resource keys known to be stored: each export names
    the same few resources again, and a write that names only those skips the
    statement (~2 ms of DuckDB's for one or two rows a commit).
    """
    if not all(key in stored_resources for key in resource_keys(write)):
        insert(cursor, "resources", write.resources, skip_existing=True)
    try:
        insert(cursor, "spans", write.spans)
        insert(cursor, "executions", write.executions)
    except duckdb.ConstraintException as exc:
        # The transaction is aborted; the caller rolls it back.
        raise KeyStored(str(exc)) from exc
    _insert_unkeyed(cursor, write, progress)


def resource_keys(write: PreparedWrite) -> list[str]:
    """The keys of the resources a write names."""
    keys: list[str] = write.resources.column("resource_key").to_pylist()
    return keys


def insert_write(
    cursor: duckdb.DuckDBPyConnection,
    write: PreparedWrite,
    progress: tuple[int, int] | None,
) -> PreparedWrite:
    """Insert a write's rows, and the spool position after them when given.

    Returns the write as stored: without what a redelivery repeated.
    """
    insert(cursor, "resources", write.resources, skip_existing=True)
    inserted = insert(
        cursor, "spans", write.spans, skip_existing=True, returning="trace_id, span_id, chunk_id"
    )
    if len(inserted) < write.spans.num_rows:
        # A redelivery: evidence is keyed by its span, so keeping only what the
        # new spans carry stores each transition once without paying for a key
        # index on the (much larger) transitions table.
        write = prepared.keeping_spans(
            write, {(trace_id, span_id): chunk_id for trace_id, span_id, chunk_id in inserted}
        )
    insert(cursor, "executions", write.executions, skip_existing=True)
    _insert_unkeyed(cursor, write, progress)
    return write


def _insert_unkeyed(
    cursor: duckdb.DuckDBPyConnection, write: PreparedWrite, progress: tuple[int, int] | None
) -> None:
    # Chunks and transitions come with their spans: new when the spans are.
    insert(cursor, "span_chunks", write.span_chunks)
    insert(cursor, "transitions", write.transitions)
    if progress is not None:
        spool_position.save(cursor, *progress)


def insert(
    cursor: duckdb.DuckDBPyConnection,
    table: str,
    batch: pa.Table,
    *,
    skip_existing: bool = False,
    returning: str | None = None,
) -> list[tuple[Any, ...]]:
    """Bulk insert an Arrow table; with `skip_existing`, rows whose key exists are ignored.

    `returning` (columns, from code, never from input) answers those columns
    of the rows inserted; without it the answer is empty. `table` too comes
    from code only.
    """
    if batch.num_rows == 0:
        return []
    columns = ", ".join(batch.column_names)
    verb = "INSERT OR IGNORE" if skip_existing else "INSERT"
    # `FROM batch` reads this function's argument: DuckDB finds a Python
    # variable by its name (a replacement scan) when no table has that name.
    # Registering the table as a view and dropping it again cost ~0.6 ms a
    # statement, a few us a span of every commit.
    sql = f"{verb} INTO {table} ({columns}) SELECT {columns} FROM batch"
    if returning is None:
        cursor.execute(sql)
        return []
    return cursor.execute(f"{sql} RETURNING {returning}").fetchall()
