"""What the store does to a prepared write's Arrow tables around inserting them.

Server side only, and the store's one use of Arrow compute: collector/encode/rows.py
builds the tables in the extraction worker without it, so the worker never loads
pyarrow.compute (~6 MB of its private memory). No SQL here.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc

from collector.encode.rows import PreparedWrite


@dataclass(frozen=True, slots=True)
class WriteResult:
    """What a committed write touched: the replay stage re-reads these stores.

    `storeless_run_ids` are the runs written that name no store (their owner
    span lost its store id, or recorded none): no store's replay finds them,
    so they are replayed by run id.
    """

    store_ids: frozenset[str]
    run_ids: frozenset[str]
    storeless_run_ids: frozenset[str] = frozenset()


def numbered_from(write: PreparedWrite, first_chunk_id: int) -> PreparedWrite:
    """The same write with its chunks (and the spans' references) numbered from here."""
    if write.span_chunks.num_rows == 0:
        return write
    return replace(
        write,
        spans=_shifted(write.spans, "chunk_id", first_chunk_id),
        span_chunks=_shifted(write.span_chunks, "chunk_id", first_chunk_id),
    )


def keeping_spans(write: PreparedWrite, stored: Mapping[tuple[str, str], int]) -> PreparedWrite:
    """The same write with only the evidence and chunks of the spans it stored.

    `stored` maps each stored span's (trace id, span id) to its chunk id:
    a chunk of an export delivered again is not kept twice.
    """
    kept_chunks = pa.array(list(set(stored.values())), pa.int64())
    return replace(
        write,
        span_chunks=write.span_chunks.filter(
            pc.is_in(write.span_chunks.column("chunk_id"), value_set=kept_chunks)
        ),
        executions=_rows_of_spans(write.executions, stored),
        transitions=_rows_of_spans(write.transitions, stored),
    )


def result_of(write: PreparedWrite) -> WriteResult:
    """The stores and runs a committed write touched."""
    executions = write.executions
    return WriteResult(
        store_ids=frozenset(
            _distinct(write.transitions, "store_id") | _distinct(executions, "store_id")
        ),
        run_ids=frozenset(_distinct(executions, "run_id")),
        storeless_run_ids=frozenset(
            _distinct(executions.filter(_storeless(executions)), "run_id")
        ),
    )


def _rows_of_spans(table: pa.Table, stored: Collection[tuple[str, str]]) -> pa.Table:
    trace_ids, span_ids = table.column("trace_id").to_pylist(), table.column("span_id").to_pylist()
    keys = zip(trace_ids, span_ids, strict=True)
    return table.filter(pa.array([key in stored for key in keys], pa.bool_()))


def _shifted(table: pa.Table, column: str, by: int) -> pa.Table:
    index = table.column_names.index(column)
    return table.set_column(index, column, pc.add(table.column(column), by))


def _storeless(executions: pa.Table) -> pa.ChunkedArray:
    # An empty store id names no store either (`_distinct` leaves it out).
    return pc.fill_null(pc.equal(executions.column("store_id"), ""), True)


def _distinct(table: pa.Table, column: str) -> set[str]:
    return {value for value in table.column(column).unique().to_pylist() if value}
