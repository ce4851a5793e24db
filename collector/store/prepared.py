"""What the store does to a prepared write's Arrow tables around inserting them.

Server side only, and the store's one use of Arrow compute: collector/encode/rows.py
builds the tables in the extraction worker without it, so the worker never loads
pyarrow.compute. No SQL here.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc

from collector.encode.rows import PreparedWrite


@dataclass(frozen=True, slots=True)
class WriteResult:
    """What a committed write touched, for the replayer; `storeless_run_ids` name no store
    and are replayed by run id."""

    store_ids: frozenset[str]
    run_ids: frozenset[str]
    storeless_run_ids: frozenset[str] = frozenset()


def chunk_count(write: PreparedWrite) -> int:
    """How many chunk ids the write numbers (from 0 within it)."""
    pieces = write.span_chunk_pieces
    return 0 if pieces.num_rows == 0 else int(pc.max(pieces.column("chunk_id")).as_py()) + 1


def numbered_from(write: PreparedWrite, first_chunk_id: int) -> PreparedWrite:
    """The same write with its chunks (and the spans' references) numbered from here."""
    if write.span_chunk_pieces.num_rows == 0:
        return write
    return replace(
        write,
        spans=_shifted(write.spans, "chunk_id", first_chunk_id),
        span_chunk_pieces=_shifted(write.span_chunk_pieces, "chunk_id", first_chunk_id),
    )


def without_spans(write: PreparedWrite, repeated: Collection[tuple[str, str]]) -> PreparedWrite:
    """The same write without these spans (trace id, span id), nor their chunks and evidence.

    A chunk stays while any span it holds stays: a chunk of an export
    delivered again is not kept twice.
    """
    spans = write.spans
    kept = spans.filter(_of_spans(spans, repeated, keep=False))
    chunk_ids = pa.array(kept.column("chunk_id").unique().to_pylist(), pa.int64())
    stored = set(zip(kept.column("trace_id").to_pylist(), kept.column("span_id").to_pylist(),
                     strict=True))
    return replace(
        write,
        spans=kept,
        span_chunk_pieces=write.span_chunk_pieces.filter(
            pc.is_in(write.span_chunk_pieces.column("chunk_id"), value_set=chunk_ids)
        ),
        executions=write.executions.filter(_of_spans(write.executions, stored)),
        transitions=write.transitions.filter(_of_spans(write.transitions, stored)),
        run_starts=write.run_starts.filter(_of_spans(write.run_starts, stored)),
    )


def start_ranges(spans: pa.Table, most: int, min_gap: int) -> list[tuple[int, int]]:
    """At most `most` ranges (first, last) holding every start time of `spans`, split at
    the widest gaps of at least `min_gap`, so an old span redelivered beside new ones
    reads its own row groups, not every one since."""
    starts = sorted(pc.unique(spans.column("start_unix_nano")).to_pylist())
    if not starts:
        return []
    gaps = sorted(
        (i for i in range(1, len(starts)) if starts[i] - starts[i - 1] >= min_gap),
        key=lambda i: starts[i] - starts[i - 1],
    )
    cuts = sorted(gaps[max(len(gaps) - (most - 1), 0):]) if most > 1 else []
    firsts = [0, *cuts]
    lasts = [cut - 1 for cut in cuts] + [len(starts) - 1]
    return [(starts[first], starts[last]) for first, last in zip(firsts, lasts, strict=True)]


def row_count(write: PreparedWrite) -> int:
    """Rows of every table that the write appends."""
    tables = (
        write.resources, write.spans, write.span_chunk_pieces, write.executions,
        write.transitions, write.run_starts,
    )
    return sum(table.num_rows for table in tables)


def result_of(write: PreparedWrite) -> WriteResult:
    """The stores and runs a committed write touched."""
    executions = write.executions
    # A start event arriving after its owner changes that run's start state.
    starts = write.run_starts
    return WriteResult(
        store_ids=frozenset(
            _distinct(write.transitions, "store_id") | _distinct(executions, "store_id")
            | _distinct(starts, "store_id")
        ),
        run_ids=frozenset(_distinct(executions, "run_id") | _distinct(starts, "run_id")),
        storeless_run_ids=frozenset(
            _distinct(executions.filter(_storeless(executions)), "run_id")
        ),
    )


def _of_spans(
    table: pa.Table, spans: Collection[tuple[str, str]], *, keep: bool = True
) -> pa.Array:
    """Which rows of `table` belong to these spans (or, with keep=False, to others)."""
    trace_ids, span_ids = table.column("trace_id").to_pylist(), table.column("span_id").to_pylist()
    keys = zip(trace_ids, span_ids, strict=True)
    return pa.array([(key in spans) is keep for key in keys], pa.bool_())


def _shifted(table: pa.Table, column: str, by: int) -> pa.Table:
    index = table.column_names.index(column)
    return table.set_column(index, column, pc.add(table.column(column), by))


def _storeless(executions: pa.Table) -> pa.ChunkedArray:
    # An empty store id names no store either (`_distinct` leaves it out).
    return pc.fill_null(pc.equal(executions.column("store_id"), ""), True)


def _distinct(table: pa.Table, column: str) -> set[str]:
    return {value for value in table.column(column).unique().to_pylist() if value}
