"""SQL for reading a trace's stored spans back, for the pages that draw them.

Only the queryable columns and the span's own protobuf bytes are returned; the
attributes and events inside `raw` are decoded by the caller, and only for what
it shows (collector/decode.py explains why spans are kept whole).
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb


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
    """Every span of a trace, earliest first (ties by span id, so the order is stable)."""
    rows = cursor.execute(
        """
        SELECT trace_id, span_id, parent_span_id, name, kind, start_unix_nano, end_unix_nano,
               status_code, status_message, service_name, scope_name, span_type, raw
        FROM spans
        WHERE trace_id = ?
        ORDER BY start_unix_nano, span_id
        """,
        [trace_id],
    ).fetchall()
    return [SpanRow(*row) for row in rows]
