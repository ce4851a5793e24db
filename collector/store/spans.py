"""SQL for reading a trace's stored spans back, for the pages that draw them.

Only the queryable columns and the span's own bytes (out of its chunk's pieces, or the
old `raw` column) are returned; the caller decodes only what it shows. A span's
resource and scope are read one span at a time (`resource_of_span`): only the span
page shows them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import groupby
from operator import itemgetter

import duckdb

from collector.encode import span_bytes


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
    # The run a Junjo span is (`junjo_runtime_id`), as extraction stored it:
    # bounded, so it matches the stored run ids.
    runtime_id: str | None
    raw: bytes


@dataclass(frozen=True, slots=True)
class ResourceRow:
    """The resource and instrumentation scope a span was sent under, as stored.

    `resource_raw` and `scope_raw` are their own protobuf bytes (collector/decode/otlp.py,
    ResourceRecord). They and the schema URLs are None for rows stored before
    they were kept (migration m015), which have only the columns decoded at ingest.
    """

    service_name: str
    scope_name: str
    scope_version: str
    attributes_json: str
    resource_raw: bytes | None
    resource_schema_url: str | None
    scope_raw: bytes | None
    scope_schema_url: str | None


def resource_of_span(
    cursor: duckdb.DuckDBPyConnection, trace_id: str, span_id: str
) -> ResourceRow | None:
    """The resource row of one stored span; None if there is no such span."""
    row = cursor.execute(
        """
        SELECT r.service_name, r.scope_name, r.scope_version, r.attributes,
               r.resource_raw, r.resource_schema_url, r.scope_raw, r.scope_schema_url
        FROM spans s JOIN resources r ON r.resource_key = s.resource_key
        WHERE s.trace_id = ? AND s.span_id = ?
        """,
        [trace_id, span_id],
    ).fetchone()
    return None if row is None else ResourceRow(*row)


def spans_of_trace(cursor: duckdb.DuckDBPyConnection, trace_id: str) -> list[SpanRow]:
    """Every span of a trace, earliest first (ties by span id, so the order is stable).

    Raises span_bytes.ChunkError if a chunk the trace needs cannot be read.
    """
    rows = cursor.execute(
        """
        SELECT trace_id, span_id, parent_span_id, name, kind, start_unix_nano, end_unix_nano,
               status_code, status_message, service_name, scope_name, span_type,
               junjo_runtime_id, raw,
               chunk_id, chunk_offset, chunk_length
        FROM spans
        WHERE trace_id = ?
        ORDER BY start_unix_nano, span_id
        """,
        [trace_id],
    ).fetchall()
    wanted: dict[int, list[tuple[int, int]]] = {}
    for *_, chunk_id, offset, length in rows:
        if chunk_id is not None:
            wanted.setdefault(chunk_id, []).append((offset, length))
    cut = _cut_from_chunks(cursor, wanted)
    spans = []
    for *columns, chunk_id, offset, length in rows:
        span = SpanRow(*columns)
        if chunk_id is not None:
            span = replace(span, raw=cut[(chunk_id, offset, length)])
        spans.append(span)
    return spans


def _cut_from_chunks(
    cursor: duckdb.DuckDBPyConnection, wanted: dict[int, list[tuple[int, int]]]
) -> dict[tuple[int, int, int], bytes]:
    """The (offset, length) slices wanted of each chunk, keyed (chunk id, offset, length).

    Chunks are decompressed one at a time and let go once cut: a long-running
    trace's spans can sit in many exports, each ~1 MB uncompressed.
    """
    if not wanted:
        return {}
    # The range lets zone maps skip row groups: ids grow with arrival.
    rows = cursor.execute(
        "SELECT chunk_id, piece, codec, raw_size, body FROM span_chunk_pieces"
        " WHERE chunk_id BETWEEN ? AND ? AND list_contains(?, chunk_id)"
        " ORDER BY chunk_id, piece",
        [min(wanted), max(wanted), sorted(wanted)],
    ).fetchall()
    missing = wanted.keys() - {row[0] for row in rows}
    if missing:
        raise span_bytes.ChunkError(f"span chunk {min(missing)} is missing from the store")
    cut: dict[tuple[int, int, int], bytes] = {}
    for chunk_id, pieces in groupby(rows, key=itemgetter(0)):
        codec, size, body = _joined(chunk_id, list(pieces))
        joined = span_bytes.unpack(codec, size, body)
        for offset, length in wanted[chunk_id]:
            cut[(chunk_id, offset, length)] = joined[offset : offset + length]
    return cut


def _joined(
    chunk_id: int, pieces: list[tuple[int, int, str, int, bytes]]
) -> tuple[str, int, bytes]:
    """One chunk's codec, raw size and body, from its pieces in order. Raises ChunkError."""
    numbers = [number for _, number, *_ in pieces]
    if numbers != list(range(len(pieces))):
        raise span_bytes.ChunkError(f"span chunk {chunk_id} is missing pieces")
    _, _, codec, size, _ = pieces[0]
    return codec, size, b"".join(body for *_, body in pieces)


def next_chunk_id(cursor: duckdb.DuckDBPyConnection) -> int:
    """The first chunk id not used yet."""
    row = cursor.execute(
        "SELECT coalesce(max(chunk_id), 0) + 1 FROM span_chunk_pieces"
    ).fetchone()
    assert row is not None
    return int(row[0])
