"""SQL of an ingest write: the Arrow tables of a PreparedWrite, bulk inserted.

Call inside a transaction (Store.commit holds it). Duplicated deliveries are
normal in OTLP, and a span delivered again is stored once. One INSERT per
table, whatever the number of rows: the rows stay in Arrow and DuckDB reads
them from there, with no Python work per row.

`spans` has no key index: DuckDB never evicts an ART index, and random ids would pull
all of it into memory (docs/memory.md, "No key index on spans"). Instead a write first
looks for its spans among the stored ones (`stored_copies`): a redelivered span has
the same ids and start time, so zone maps on `start_unix_nano` confine the lookup to
the row groups written around then. Not bounded: stored spans sharing the write's
start times (a producer with a stuck clock), which the lookup reads all of.
"""

from __future__ import annotations

from collections.abc import Collection

import duckdb
import pyarrow as pa

from collector.encode.rows import PreparedWrite
from collector.store import prepared, spool_position

# A write's lookup of its spans names at most this many ranges of start times,
# split where no span of the write started for at least a minute.
START_RANGES = 8
START_GAP_NANOS = 60 * 1_000_000_000


def insert_write(
    cursor: duckdb.DuckDBPyConnection,
    write: PreparedWrite,
    progress: tuple[int, int] | None,
    stored_resources: Collection[str] = (),
) -> PreparedWrite:
    """Insert a write's rows, and the spool position after them when given.

    Returns the write as stored: without the spans a redelivery repeated, and
    their chunks and evidence (evidence is keyed by its span, so each
    transition is stored once without a key index on the much larger
    transitions table). `stored_resources` are resource keys known to be stored: a
    write naming only those skips the statement.
    """
    repeated = stored_copies(cursor, write.spans)
    if repeated:
        write = prepared.without_spans(write, repeated)
    if not all(key in stored_resources for key in resource_keys(write)):
        insert(cursor, "resources", write.resources, skip_existing=True)
    insert(cursor, "spans", write.spans)
    # A run id is stored already only when its owner span is, with another
    # start time or span id (a producer's mistake): the first copy stays.
    insert(cursor, "executions", write.executions, skip_existing=True)
    insert(cursor, "span_chunk_pieces", write.span_chunk_pieces)
    insert(cursor, "transitions", write.transitions)
    insert(cursor, "run_starts", write.run_starts)
    join_run_starts(cursor, write)
    if progress is not None:
        spool_position.save(cursor, *progress)
    return write


# A convention run's owner span carries no start state or graph: its start event
# did, earlier, on a span of its own (docs/convention.md 2.2). Whichever of the
# two a write brings, the owner's row takes them from the first start stored.
_JOIN_RUN_STARTS = """
    UPDATE executions SET
        state_start = s.state_start, state_start_mode = s.state_start_mode,
        state_start_policy = s.state_start_policy,
        graph_snapshot = coalesce(executions.graph_snapshot, s.graph_snapshot),
        state_start_digest = coalesce(executions.state_start_digest, s.state_start_digest)
    FROM (
        SELECT run_id, arg_min(state_start, received_unix_nano) AS state_start,
               arg_min(state_start_mode, received_unix_nano) AS state_start_mode,
               arg_min(state_start_policy, received_unix_nano) AS state_start_policy,
               arg_min(graph_snapshot, received_unix_nano) AS graph_snapshot,
               arg_min(state_start_digest, received_unix_nano) AS state_start_digest
        FROM run_starts WHERE run_id IN (SELECT unnest($run_ids))
        GROUP BY run_id
    ) s
    WHERE executions.run_id = s.run_id AND executions.state_start IS NULL
      AND executions.convention_version IS NOT NULL
"""


def join_run_starts(cursor: duckdb.DuckDBPyConnection, write: PreparedWrite) -> None:
    """Give the convention runs this write touches their start state, once both parts are in."""
    starts = write.run_starts.column("run_id").to_pylist()
    versions = write.executions.column("convention_version").to_pylist()
    owners = [
        run_id
        for run_id, version in zip(
            write.executions.column("run_id").to_pylist(), versions, strict=True
        )
        if version is not None
    ]
    run_ids = sorted(set(starts) | set(owners))
    if run_ids:
        cursor.execute(_JOIN_RUN_STARTS, {"run_ids": run_ids})


def stored_copies(cursor: duckdb.DuckDBPyConnection, spans: pa.Table) -> set[tuple[str, str]]:
    """(trace id, span id) of the spans in `spans` stored already with the same start time."""
    if spans.num_rows == 0:
        return set()
    ranges = prepared.start_ranges(spans, START_RANGES, START_GAP_NANOS)
    batch = spans.select(["trace_id", "span_id", "start_unix_nano"])  # noqa: F841 (read by name)
    # The explicit ranges, not only the join, are what let DuckDB skip the row
    # groups whose zone maps lie outside this write's start times.
    within = " OR ".join(["start_unix_nano BETWEEN ? AND ?"] * len(ranges))
    rows = cursor.execute(
        "SELECT b.trace_id, b.span_id FROM batch b SEMI JOIN ("
        f"  SELECT trace_id, span_id, start_unix_nano FROM spans WHERE {within}"
        ") s USING (trace_id, span_id, start_unix_nano)",
        [bound for start_range in ranges for bound in start_range],
    ).fetchall()
    return {(trace_id, span_id) for trace_id, span_id in rows}


def resource_keys(write: PreparedWrite) -> list[str]:
    """The keys of the resources a write names."""
    keys: list[str] = write.resources.column("resource_key").to_pylist()
    return keys


def insert(
    cursor: duckdb.DuckDBPyConnection,
    table: str,
    batch: pa.Table,
    *,
    skip_existing: bool = False,
) -> None:
    """Bulk insert an Arrow table; with `skip_existing`, rows whose key exists are ignored.

    `table` comes from code only, never from input.
    """
    if batch.num_rows == 0:
        return
    columns = ", ".join(batch.column_names)
    verb = "INSERT OR IGNORE" if skip_existing else "INSERT"
    # `FROM batch` reads this function's argument: DuckDB finds a Python
    # variable by its name (a replacement scan) when no table has that name.
    # Registering a view instead cost measurably more on every commit.
    cursor.execute(f"{verb} INTO {table} ({columns}) SELECT {columns} FROM batch")
