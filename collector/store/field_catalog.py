"""SQL for the filter box's suggestions: which field paths runs have, and what values.

Read-only; every value is a bound parameter. A `DISTINCT path` over the whole field
index would read every row, so both questions are asked of the newest `SAMPLE_RUNS`
runs only (of one workflow when the list is narrowed to one), looked up first and
bound as constants. Once the index is sorted by path those rows sit in every row
group, so the studio caches the answers (studio/render/suggestions.py). A path only
older runs have is not suggested, but filters as any other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import duckdb

from collector.index.query_ast import Path
from collector.store.filters import TABLE, FieldValue, key64

# The newest runs asked.
SAMPLE_RUNS: Final = 200
# How far below the greatest run key the newest runs are looked for first.
KEY_WINDOW: Final = 20
MAX_PATHS: Final = 500
MAX_VALUES: Final = 8
# Longer strings make poor examples and hostile telemetry can be megabytes long.
MAX_VALUE_CHARS: Final = 120


# The sampled runs' rows: their key range first, a plain comparison DuckDB checks
# fast, then the keys themselves (a workflow's sampled keys are not contiguous, and
# the IN list alone is slow on an index sorted by path).
_IN_SAMPLE: Final = "v.run_key BETWEEN ? AND ? AND v.run_key IN ({keys})"


@dataclass(frozen=True, slots=True)
class PathCount:
    """A path some sampled end state has: its JSON kinds and in how many of those runs."""

    pointer: str
    kinds: tuple[str, ...]
    runs: int


@dataclass(frozen=True, slots=True)
class ValueCount:
    """One scalar end value of a path, and how many sampled runs ended with it."""

    value: FieldValue
    runs: int


def sample_run_keys(
    cursor: duckdb.DuckDBPyConnection, workflow: str | None, limit: int = SAMPLE_RUNS
) -> list[int]:
    """The keys of the `limit` runs stored last, of `workflow` if given.

    Run keys follow arrival, so the newest are just below the greatest, which DuckDB
    knows from the column's statistics: the last KEY_WINDOW times `limit` keys are
    looked at first, and a top-N of the whole column only if a workflow is too rare
    among those (or pruning thinned them).
    """
    condition = " AND name = ?" if workflow is not None else ""
    params: list[object] = [workflow] if workflow is not None else []
    recent = cursor.execute(
        "SELECT run_key FROM executions "
        f"WHERE run_key > (SELECT max(run_key) FROM executions) - ?{condition} "
        "ORDER BY run_key DESC LIMIT ?",
        [KEY_WINDOW * limit, *params, limit],
    ).fetchall()
    if len(recent) < limit:
        recent = cursor.execute(
            f"SELECT run_key FROM executions WHERE run_key IS NOT NULL{condition} "
            "ORDER BY run_key DESC LIMIT ?",
            [*params, limit],
        ).fetchall()
    return [int(row[0]) for row in recent]


def paths_in(
    cursor: duckdb.DuckDBPyConnection, run_keys: list[int], limit: int = MAX_PATHS
) -> list[PathCount]:
    """The end-state paths of these runs (the root left out), most common first.

    Up to `limit` + 1 are returned, so a caller can tell there were more.
    """
    if not run_keys:
        return []
    keys = ", ".join("?" for _ in run_keys)
    rows = cursor.execute(
        f"SELECT v.path, list(DISTINCT v.kind ORDER BY v.kind), count(DISTINCT v.run_key) AS n "
        f"FROM {TABLE} v WHERE {_IN_SAMPLE.format(keys=keys)} AND v.is_final AND v.path <> '' "
        "GROUP BY v.path ORDER BY n DESC, v.path LIMIT ?",
        [min(run_keys), max(run_keys), *run_keys, limit + 1],
    ).fetchall()
    return [PathCount(row[0], tuple(row[1]), int(row[2])) for row in rows]


def values_at(
    cursor: duckdb.DuckDBPyConnection, path: Path, run_keys: list[int], limit: int = MAX_VALUES
) -> list[ValueCount]:
    """The commonest scalar end values of `path` in these runs.

    Strings longer than MAX_VALUE_CHARS and numbers JSON cannot write (NaN) are left out.

    The path's own slice is found by its keys first (the index's sort order),
    then the sampled runs within it.
    """
    if not run_keys:
        return []
    keys = ", ".join("?" for _ in run_keys)
    rows = cursor.execute(
        f"SELECT v.kind, v.num, v.str, v.bool_val, count(*) AS n FROM {TABLE} v "
        "WHERE v.parent_key = ? AND v.path_key = ? AND v.path = ? AND v.is_final "
        "AND v.kind IN ('string', 'number', 'bool', 'null') "
        "AND (v.str IS NULL OR length(v.str) <= ?) AND (v.num IS NULL OR isfinite(v.num)) "
        f"AND {_IN_SAMPLE.format(keys=keys)} "
        "GROUP BY ALL ORDER BY n DESC, v.kind, v.num, v.str LIMIT ?",
        [key64(path.parent.pointer), key64(path.pointer), path.pointer, MAX_VALUE_CHARS,
         min(run_keys), max(run_keys), *run_keys, limit],
    ).fetchall()
    found: list[ValueCount] = []
    for kind, num, text, flag, count in rows:
        scalar = num if kind == "number" else text if kind == "string" else flag
        found.append(ValueCount((kind, scalar), int(count)))
    return found
