"""SQL for the extractor's position in the intake spool (collector/intake/spool.py).

One row, rewritten in every ingest transaction, so the rows stored and the
position they were stored up to can never disagree.
"""

from __future__ import annotations

import duckdb


def read(cursor: duckdb.DuckDBPyConnection) -> tuple[int, int]:
    row = cursor.execute("SELECT segment, byte_offset FROM spool_position").fetchone()
    assert row is not None, "migration m008 inserts the row"
    return int(row[0]), int(row[1])


def save(cursor: duckdb.DuckDBPyConnection, segment: int, byte_offset: int) -> None:
    cursor.execute("UPDATE spool_position SET segment = ?, byte_offset = ?", [segment, byte_offset])
