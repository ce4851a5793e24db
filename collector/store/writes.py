"""SQL of an ingest write: the Arrow tables of a PreparedWrite, bulk inserted.

Call inside a transaction (Store.commit holds it). Duplicated deliveries are
normal in OTLP, so the keyed tables are inserted with OR IGNORE: a repeat is
stored once. One INSERT per table, whatever the number of rows: the rows stay
in Arrow and DuckDB reads them from there, with no Python work per row.
"""

from __future__ import annotations

from typing import Any

import duckdb
import pyarrow as pa

from collector.store import spool_position
from collector.store.rows import PreparedWrite

_BATCH_VIEW = "_batch"


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
        write = write.keeping_spans(
            {(trace_id, span_id): chunk_id for trace_id, span_id, chunk_id in inserted}
        )
    insert(cursor, "span_chunks", write.span_chunks)
    insert(cursor, "executions", write.executions, skip_existing=True)
    insert(cursor, "transitions", write.transitions)
    if progress is not None:
        spool_position.save(cursor, *progress)
    return write


def insert(
    cursor: duckdb.DuckDBPyConnection,
    table: str,
    data: pa.Table,
    *,
    skip_existing: bool = False,
    returning: str | None = None,
) -> list[tuple[Any, ...]]:
    """Bulk insert an Arrow table; with `skip_existing`, rows whose key exists are ignored.

    `returning` (columns, from code, never from input) answers those columns
    of the rows inserted; without it the answer is empty. `table` too comes
    from code only.
    """
    if data.num_rows == 0:
        return []
    columns = ", ".join(data.column_names)
    verb = "INSERT OR IGNORE" if skip_existing else "INSERT"
    sql = f"{verb} INTO {table} ({columns}) SELECT {columns} FROM {_BATCH_VIEW}"
    cursor.register(_BATCH_VIEW, data)
    try:
        if returning is None:
            cursor.execute(sql)
            return []
        return cursor.execute(f"{sql} RETURNING {returning}").fetchall()
    finally:
        cursor.unregister(_BATCH_VIEW)
