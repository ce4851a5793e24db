"""SQL for retention: deleting whole traces that ended before a cutoff.

A trace goes with everything derived from it (spans, transitions, the executions it
owns, their replays and field-index rows), never half of one, so no trace is shown
with holes and no execution without its owner span; a span chunk goes once no span
names it (`delete_orphans`). Each batch is bounded (about `max_spans` spans) and its
own transaction, so ingestion commits between batches.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import duckdb

from collector.store.filters import RANGES, TABLE, delete_field_rows, without_execution

DEFAULT_BATCH_SPANS = 5_000


@dataclass(frozen=True, slots=True)
class PruneCounts:
    """Rows deleted, per table (traces counts distinct trace ids)."""

    traces: int = 0
    spans: int = 0
    executions: int = 0
    transitions: int = 0
    replays: int = 0
    field_values: int = 0
    field_ranges: int = 0

    def __add__(self, other: PruneCounts) -> PruneCounts:
        return PruneCounts(
            *(getattr(self, f.name) + getattr(other, f.name) for f in fields(PruneCounts))
        )

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(PruneCounts)}


def old_traces(
    cursor: duckdb.DuckDBPyConnection, cutoff_unix_nano: int, max_spans: int
) -> list[str]:
    """Trace ids whose newest span ended before the cutoff, about `max_spans` spans' worth.

    Oldest first, so an interrupted prune has removed the oldest data. At least
    one trace is returned when any is due, whatever its size.
    """
    rows = cursor.execute(
        """
        WITH due AS (
            SELECT trace_id, count(*) AS spans, max(end_unix_nano) AS newest
            FROM spans
            GROUP BY trace_id
            HAVING max(end_unix_nano) < ?
        ), running AS (
            SELECT trace_id,
                   sum(spans) OVER (ORDER BY newest, trace_id) - spans AS before
            FROM due
        )
        SELECT trace_id FROM running WHERE before < ? ORDER BY trace_id
        """,
        [cutoff_unix_nano, max_spans],
    ).fetchall()
    return [row[0] for row in rows]


def delete_traces(cursor: duckdb.DuckDBPyConnection, trace_ids: list[str]) -> PruneCounts:
    """Delete these traces and what derives from them (the caller owns the transaction)."""
    if not trace_ids:
        return PruneCounts()
    runs = runs_of_traces(cursor, trace_ids)
    run_ids = list(runs)
    field_values, field_ranges = delete_field_rows(cursor, runs.values())
    replays = _delete(cursor, "DELETE FROM execution_replays WHERE list_contains(?, run_id)",
                      run_ids)
    _delete(cursor, "DELETE FROM replay_snapshots WHERE list_contains(?, run_id)", run_ids)
    executions = _delete(cursor, "DELETE FROM executions WHERE list_contains(?, run_id)",
                         run_ids)
    transitions = _delete(cursor, "DELETE FROM transitions WHERE list_contains(?, trace_id)",
                          trace_ids)
    # A convention run's start event, carried by a span of the trace (docs/convention.md 2.2).
    _delete(cursor, "DELETE FROM run_starts WHERE list_contains(?, trace_id)", trace_ids)
    spans = _delete(cursor, "DELETE FROM spans WHERE list_contains(?, trace_id)", trace_ids)
    return PruneCounts(
        traces=len(trace_ids),
        spans=spans,
        executions=executions,
        transitions=transitions,
        replays=replays,
        field_values=field_values,
        field_ranges=field_ranges,
    )


def runs_of_traces(cursor: duckdb.DuckDBPyConnection, trace_ids: list[str]) -> dict[str, int]:
    """The executions in these traces: their run keys by run id."""
    if not trace_ids:
        return {}
    rows = cursor.execute(
        "SELECT run_id, run_key FROM executions WHERE list_contains(?, trace_id)", [trace_ids]
    ).fetchall()
    return {run_id: int(run_key) for run_id, run_key in rows}


def delete_orphans(cursor: duckdb.DuckDBPyConnection) -> PruneCounts:
    """Replay rows of executions that no longer exist, and unreferenced resources.

    A replay that read an execution just before its trace was pruned may save
    its result just after; this sweeps such leftovers once a prune pass ends.
    """
    field_values = _count(
        cursor.execute(f"DELETE FROM {TABLE} WHERE {without_execution(TABLE)}")
    )
    field_ranges = _count(
        cursor.execute(f"DELETE FROM {RANGES} WHERE {without_execution(RANGES)}")
    )
    replays = _count(cursor.execute(
        "DELETE FROM execution_replays WHERE run_id NOT IN (SELECT run_id FROM executions)"
    ))
    cursor.execute(
        "DELETE FROM replay_snapshots WHERE run_id NOT IN (SELECT run_id FROM executions)"
    )
    cursor.execute(
        "DELETE FROM resources WHERE resource_key NOT IN (SELECT resource_key FROM spans)"
    )
    # A chunk holds one export's spans, of many traces: it goes with the last.
    cursor.execute(
        "DELETE FROM span_chunk_pieces WHERE chunk_id NOT IN"
        " (SELECT chunk_id FROM spans WHERE chunk_id IS NOT NULL)"
    )
    return PruneCounts(replays=replays, field_values=field_values, field_ranges=field_ranges)


def _delete(cursor: duckdb.DuckDBPyConnection, statement: str, keys: list[str]) -> int:
    if not keys:
        return 0
    return _count(cursor.execute(statement, [keys]))


def _count(cursor: duckdb.DuckDBPyConnection) -> int:
    # DuckDB answers a DELETE with one row holding the number of rows deleted.
    row = cursor.fetchone()
    return int(row[0]) if row else 0
