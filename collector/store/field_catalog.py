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

from collector.index.query_ast import ANY, LAST, Path
from collector.store.filters import TABLE, FieldValue, at_path

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


# A pointer with each index token written `~*` (query_ast.shape_of), in SQL:
# two passes, as one leaves every other token of a run like `/0/1/2`.
_SHAPE_ONCE: Final = "regexp_replace({}, '/(0|[1-9][0-9]*)(/|$)', '/{any}\\2', 'g')"
_SHAPE_SQL: Final = _SHAPE_ONCE.format(_SHAPE_ONCE.format("v.path", any=ANY.value), any=ANY.value)


@dataclass(frozen=True, slots=True)
class PathCount:
    """A path some sampled end state has (index tokens collapsed to `~*`, as `[*]`
    writes them): its JSON kinds, in how many of those runs, and of which workflows."""

    pointer: str
    kinds: tuple[str, ...]
    runs: int
    workflows: tuple[str, ...]


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
    cursor: duckdb.DuckDBPyConnection,
    run_keys: list[int],
    limit: int = MAX_PATHS,
    workflow: str | None = None,
) -> list[PathCount]:
    """The end-state paths of these runs (the root left out), most common first, each
    array index collapsed to `~*` (`items[0].sku` and `items[1].sku` are `items[*].sku`),
    and the second rows of last elements (`~-1`) left out.

    Each names the workflows of the runs that have it: `workflow` alone when the
    runs are that workflow's (the join that finds them doubled this query's time).
    Up to `limit` + 1 are returned, so a caller can tell there were more.
    """
    if not run_keys:
        return []
    keys = ", ".join("?" for _ in run_keys)
    sample = _IN_SAMPLE.format(keys=keys)
    bounds: list[object] = [min(run_keys), max(run_keys), *run_keys]
    named, join = "[?]", ""
    join_params: list[object] = [workflow or ""]
    if workflow is None:
        named = "list(DISTINCT e.name ORDER BY e.name)"
        join = (
            "JOIN (SELECT run_key, coalesce(name, '') AS name FROM executions v "
            f"WHERE {sample}) e ON e.run_key = v.run_key "
        )
        join_params = bounds
    rows = cursor.execute(
        f"SELECT {_SHAPE_SQL} AS shape, list(DISTINCT v.kind ORDER BY v.kind),"
        f" count(DISTINCT v.run_key) AS n, {named} FROM {TABLE} v {join}"
        f"WHERE {sample} AND v.is_final AND v.path <> '' "
        "AND NOT contains(v.path, ?) GROUP BY shape ORDER BY n DESC, shape LIMIT ?",
        [*join_params, *bounds, f"/{LAST.value}", limit + 1],
    ).fetchall()
    return [PathCount(row[0], tuple(row[1]), int(row[2]), tuple(row[3])) for row in rows]


def values_at(
    cursor: duckdb.DuckDBPyConnection, path: Path, run_keys: list[int], limit: int = MAX_VALUES
) -> list[ValueCount]:
    """The commonest scalar end values of `path` (of the paths it matches) in these runs,
    each with the number of runs that ended with it there.

    Strings longer than MAX_VALUE_CHARS and numbers JSON cannot write (NaN) are left out.

    The path's own slice is found by its keys first (the index's sort order),
    then the sampled runs within it.
    """
    if not run_keys:
        return []
    keys = ", ".join("?" for _ in run_keys)
    at, at_params = at_path(path)
    rows = cursor.execute(
        f"SELECT v.kind, v.num, v.str, v.bool_val, count(DISTINCT v.run_key) AS n FROM {TABLE} v "
        f"WHERE {at} AND v.is_final "
        "AND v.kind IN ('string', 'number', 'bool', 'null') "
        "AND (v.str IS NULL OR length(v.str) <= ?) AND (v.num IS NULL OR isfinite(v.num)) "
        f"AND {_IN_SAMPLE.format(keys=keys)} "
        "GROUP BY ALL ORDER BY n DESC, v.kind, v.num, v.str LIMIT ?",
        [*at_params, MAX_VALUE_CHARS, min(run_keys), max(run_keys), *run_keys, limit],
    ).fetchall()
    found: list[ValueCount] = []
    for kind, num, text, flag, count in rows:
        scalar = num if kind == "number" else text if kind == "string" else flag
        found.append(ValueCount((kind, scalar), int(count)))
    return found
