"""SQL for reading a trace's stored spans back, for the pages that draw them.

Only the queryable columns and the span's own protobuf bytes are returned; the
attributes and events inside `raw` are decoded by the caller, and only for what
it shows (collector/decode.py explains why spans are kept whole). The bytes
come out of their compressed chunk (collector/store/span_bytes.py), or, for a
span stored before chunks existed, out of its own `raw` column.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import duckdb

from collector.store import span_bytes


@dataclass(frozen=True, slots=True)
class SpanRow:
    """One stored span: ids as lowercase hex, times as integer nanoseconds."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: int
    start: int
    end: int
    status_code: int
    status_message: str
    service_name: str
    scope_name: str
    span_type: str | None
    raw: bytes


def spans_of_trace(cursor: duckdb.DuckDBPyConnection, trace_id: str) -> list[SpanRow]:
    """Every span of a trace, earliest first (ties by span id, so the order is stable).

    Raises span_bytes.ChunkError if a chunk the trace needs cannot be read.
    """
    rows = cursor.execute(
        """
        SELECT trace_id, span_id, parent_span_id, name, kind, start_unix_nano, end_unix_nano,
               status_code, status_message, service_name, scope_name, span_type, raw,
               chunk_id, chunk_offset, chunk_length
        FROM spans
        WHERE trace_id = ?
        ORDER BY start_unix_nano, span_id
        """,
        [trace_id],
    ).fetchall()
    chunks = _chunks(cursor, {row[13] for row in rows if row[13] is not None})
    spans = []
    for *columns, chunk_id, offset, length in rows:
        span = SpanRow(*columns)
        if chunk_id is not None:
            span = replace(span, raw=chunks[chunk_id][offset : offset + length])
        spans.append(span)
    return spans


def _chunks(cursor: duckdb.DuckDBPyConnection, chunk_ids: set[int]) -> dict[int, bytes]:
    """These chunks' uncompressed bytes, each decompressed once."""
    if not chunk_ids:
        return {}
    # The range lets zone maps skip row groups: ids grow with arrival.
    rows = cursor.execute(
        "SELECT chunk_id, codec, raw_size, body FROM span_chunks"
        " WHERE chunk_id BETWEEN ? AND ? AND list_contains(?, chunk_id)",
        [min(chunk_ids), max(chunk_ids), sorted(chunk_ids)],
    ).fetchall()
    found = {chunk_id: span_bytes.unpack(codec, size, body) for chunk_id, codec, size, body in rows}
    missing = chunk_ids - found.keys()
    if missing:
        raise span_bytes.ChunkError(f"span chunk {min(missing)} is missing from the store")
    return found


def next_chunk_id(cursor: duckdb.DuckDBPyConnection) -> int:
    """The first chunk id not used yet."""
    row = cursor.execute("SELECT coalesce(max(chunk_id), 0) + 1 FROM span_chunks").fetchone()
    assert row is not None
    return int(row[0])
