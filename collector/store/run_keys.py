"""Inserting rows that belong to an execution, with its integer run key.

Field-index and replay rows are written by run id, but lists and filters join
them on `executions.run_key` (migration m005), so every insert copies the key
from the executions table. Only stored executions are replayed and indexed, so
every row finds its key.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa


def insert_with_run_keys(
    cursor: duckdb.DuckDBPyConnection, table: str, batch: pa.Table, *, order_by: str = ""
) -> None:
    """Insert `batch` (which has a `run_id` column) into `table`, adding each row's run key."""
    if batch.num_rows == 0:
        return
    view = f"_{table}_batch"
    columns = ", ".join(batch.column_names)
    from_batch = ", ".join(f"b.{name}" for name in batch.column_names)
    cursor.register(view, batch)
    try:
        cursor.execute(
            f"INSERT INTO {table} (run_key, {columns}) SELECT e.run_key, {from_batch}"
            f" FROM {view} b JOIN executions e ON e.run_id = b.run_id"
            + (f" ORDER BY {order_by}" if order_by else "")
        )
    finally:
        cursor.unregister(view)
