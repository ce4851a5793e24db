"""Inserting rows that belong to an execution, with its integer run key.

Field-index and replay rows are written by run id, but lists and filters join
them on `executions.run_key` (migration m005), so every row carries the key
of its execution. The save looks the keys up once per batch (`stored_runs`),
then each insert adds them from that map; rows of a run no longer stored (a
prune deleted it after its evidence was read) are left out, as a join with
the executions table would leave them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

import duckdb
import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True, slots=True)
class StoredRun:
    """A run still stored: its key, and whether a replay of it is stored."""

    run_key: int
    replayed: bool


def stored_runs(
    cursor: duckdb.DuckDBPyConnection,
    run_ids: Collection[str],
    known_keys: Mapping[str, int] | None = None,
) -> dict[str, StoredRun]:
    """Those of these runs that are stored, by run id.

    With `known_keys` (each run's key as read with its evidence), the runs are
    found by key within the keys' least and greatest: keys grow with arrival,
    so zone maps skip the row groups of older runs in both tables, where the
    run ids (random strings) would scan every row. Keys are never reused, so a
    key still stored is still its run's. Every replay row carries its run's
    key (it is written only with it), so the join on keys finds each one.
    """
    if not run_ids:
        return {}
    params: list[object]
    if known_keys is None:
        where, params = "e.run_id IN (SELECT unnest(?::VARCHAR[]))", [sorted(run_ids)]
    else:
        keys = sorted(known_keys[run_id] for run_id in run_ids)
        where = "e.run_key BETWEEN ? AND ? AND e.run_key IN (SELECT unnest(?::BIGINT[]))"
        params = [keys[0], keys[-1], keys]
    rows = cursor.execute(
        "SELECT e.run_id, e.run_key, r.run_key IS NOT NULL FROM executions e"
        f" LEFT JOIN execution_replays r ON r.run_key = e.run_key WHERE {where}",
        params,
    ).fetchall()
    return {run_id: StoredRun(int(key), bool(replayed)) for run_id, key, replayed in rows}


def insert_with_run_keys(
    cursor: duckdb.DuckDBPyConnection,
    table: str,
    batch: pa.Table,
    runs: Mapping[str, StoredRun],
    *,
    sort_by: tuple[str, ...] = (),
    keep_run_id: bool = True,
) -> None:
    """Insert `batch` (which has a `run_id` column) into `table` with each row's run key.

    Rows of runs not in `runs` are dropped. `sort_by` orders the rows (ascending,
    nulls last, as DuckDB's ORDER BY does) before they are written. Without
    `keep_run_id` the key alone is written (the field index has no run id column).
    """
    if batch.num_rows == 0:
        return
    # Vectorised: a replay batch writes tens of thousands of field-index rows.
    known = pa.array(list(runs), pa.string())
    positions = pc.index_in(batch["run_id"], value_set=known)
    keys = pc.take(pa.array([run.run_key for run in runs.values()], pa.int64()), positions)
    keyed = batch.append_column("run_key", keys)
    if keys.null_count:
        keyed = keyed.filter(pc.is_valid(keys))
    if keyed.num_rows == 0:
        return
    if not keep_run_id:
        keyed = keyed.drop_columns(["run_id"])
    if sort_by:
        keyed = keyed.sort_by([(name, "ascending") for name in sort_by])
    view = f"_{table}_batch"
    columns = ", ".join(keyed.column_names)
    cursor.register(view, keyed)
    try:
        cursor.execute(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {view}")
    finally:
        cursor.unregister(view)

