"""SQL for finding executions: the filtered, keyset-paginated list and its facets.

Every filter value is a bound parameter. Column names in facets and sort keys
come from allow-lists. Pagination is keyset on (sort key, run id), newest start
first by default, so a page is as fast on the thousandth page as on the first
and stable while data arrives.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

import duckdb

from collector.index.query_ast import Expr
from collector.index.search import Search
from collector.store.filters import compile_filter
from collector.store.text_search import (
    EVERYWHERE,
    SearchWindow,
    compile_search,
    reads_verdict,
    search_window,
)
from collector.store.transactions import read_snapshot

FacetName = Literal["workflow", "service", "status", "verdict", "kind"]
FACET_COLUMNS: Final[dict[FacetName, str]] = {
    "workflow": "e.name",
    "service": "e.service",
    "status": "e.status",
    "verdict": "coalesce(r.verdict, 'pending')",
    "kind": "e.kind",
}

SortKey = Literal["started", "duration", "transitions"]
# What each sort orders by; never NULL, so keyset comparisons need no NULL cases.
SORT_COLUMNS: Final[dict[SortKey, str]] = {
    "started": "e.start_unix_nano",
    "duration": "(e.end_unix_nano - e.start_unix_nano)",
    "transitions": "coalesce(e.transition_count, -1)",
}


@dataclass(frozen=True, slots=True)
class ExecutionQuery:
    """What a user asked for; every field optional, all of them combined with AND."""

    where: Expr | None = None
    # Free-text terms (collector/index/search.py), ANDed with everything else.
    text: Search | None = None
    workflow: str | None = None
    service: str | None = None
    status: str | None = None
    verdict: str | None = None
    kind: str | None = None
    # The application's id for the run (`junjo.correlation.id`), matched exactly.
    correlation: str | None = None
    # Every run in one trace, or that used one store (runs lent the same store
    # sit in separate traces: SCHEMA.md 7.1).
    trace_id: str | None = None
    store_id: str | None = None
    since_unix_nano: int | None = None
    until_unix_nano: int | None = None
    limit: int = 50
    # The previous page's last (sort value, run id): this page starts after it.
    after: tuple[int, str] | None = None
    sort: SortKey = "started"
    descending: bool = True


@dataclass(frozen=True, slots=True)
class ExecutionRow:
    run_id: str
    kind: str
    name: str
    service: str
    status: str
    status_message: str
    error_type: str | None
    start_unix_nano: int
    end_unix_nano: int
    trace_id: str
    span_id: str
    store_id: str | None
    parent_run_id: str | None
    transition_count: int | None
    verdict: str | None
    received_transitions: int | None
    error_count: int | None
    warning_count: int | None
    correlation_type: str | None
    correlation_id: str | None
    # The field index holds only part of this run's states (fieldindex.MAX_ROWS):
    # field filters may wrongly match it or miss it.
    index_truncated: bool = False
    # `junjo.executable_structural_id`: which node of the parent's graph this run is
    # (a subflow), so the parent's graph links that node here without loading this run.
    structural_id: str | None = None
    # `junjo.executable_definition_id`: for a subflow, its node's runtime id in the
    # parent's own snapshot, which tells apart subflows whose graphs have one shape
    # (and so one structural id).
    definition_id: str | None = None


_ROW_SELECT: Final = """
    e.run_id, e.kind, e.name, e.service, e.status, e.status_message, e.error_type,
    e.start_unix_nano, e.end_unix_nano, e.trace_id, e.span_id, e.store_id, e.parent_run_id,
    e.transition_count, r.verdict, r.received_transitions, r.error_count, r.warning_count,
    e.correlation_type, e.correlation_id, coalesce(r.index_truncated, false), e.structural_id,
    e.definition_id
"""


def _conditions(
    query: ExecutionQuery, *, field_filter: bool = True, window: SearchWindow = EVERYWHERE
) -> tuple[list[str], list[object]]:
    """Conditions over `e` (and `r` for a verdict); `field_filter=False` leaves `where`
    and `text` out. `window`: where a search looks for substrings (text_search.py)."""
    conditions: list[str] = []
    params: list[object] = []
    if query.where is not None and field_filter:
        sql, values = compile_filter(query.where)
        conditions.append(sql)
        params.extend(values)
    if query.text is not None and field_filter:
        sql, values = compile_search(query.text, window)
        conditions.append(f"({sql})")
        params.extend(values)
    for column, value in (
        ("e.name", query.workflow),
        ("e.service", query.service),
        ("e.status", query.status),
        ("e.kind", query.kind),
        ("e.correlation_id", query.correlation),
        ("e.trace_id", query.trace_id),
        ("e.store_id", query.store_id),
        (FACET_COLUMNS["verdict"], query.verdict),
    ):
        if value is not None:
            conditions.append(f"{column} = ?")
            params.append(value)
    if query.since_unix_nano is not None:
        conditions.append("e.start_unix_nano >= ?")
        params.append(query.since_unix_nano)
    if query.until_unix_nano is not None:
        conditions.append("e.start_unix_nano < ?")
        params.append(query.until_unix_nano)
    return conditions, params


def _page_conditions(
    query: ExecutionQuery, *, field_filter: bool = True, window: SearchWindow = EVERYWHERE
) -> tuple[list[str], list[object]]:
    """`_conditions` plus the cursor: only runs after the previous page's last.

    For the newest-first pages only, so the cursor's sort value is a start time
    (studio/params.py refuses a cursor made for another order).
    """
    conditions, params = _conditions(query, field_filter=field_filter, window=window)
    if query.after is not None:
        start, run_id = query.after
        conditions.append("(e.start_unix_nano < ? OR (e.start_unix_nano = ? AND e.run_id > ?))")
        params.extend([start, start, run_id])
    return conditions, params


def _where(conditions: list[str]) -> str:
    return ("WHERE " + " AND ".join(conditions)) if conditions else ""


RECENT_RUNS: Final = 4096
"""How many of the latest-arrived runs a field-filtered page is first looked for among."""


def search(
    cursor: duckdb.DuckDBPyConnection, query: ExecutionQuery, *, recent_runs: int = RECENT_RUNS
) -> list[ExecutionRow]:
    """One page, newest first; one more row than asked says there is a next page.

    In one snapshot: the page's ids, then their rows by primary key (a join would read
    every row group the page spans). A field filter tries the recent runs first
    (`_recent_page_ids`), and every run only when they hold less than a page.
    """
    filtered = query.where is not None or query.text is not None
    replays = _REPLAYS_JOIN if _reads_verdict(query) else ""
    newest_first = query.sort == "started" and query.descending
    with read_snapshot(cursor):
        window = search_window(cursor) if query.text is not None else EVERYWHERE
        run_ids: list[str] = []
        if not newest_first:
            run_ids = _sorted_page_ids(cursor, query, replays, window)
        elif filtered and query.text is None:
            # A search's scans are of every run whatever the window, so it is not tried
            # twice.
            run_ids = _recent_page_ids(cursor, query, replays, recent_runs)
        if newest_first and len(run_ids) <= query.limit:
            conditions, params = _page_conditions(query, window=window)
            sql = _FILTERED_PAGE_IDS_SQL if filtered else _PAGE_IDS_SQL
            limits = [query.limit + 1] * (2 if filtered else 1)  # the filtered SQL limits twice
            run_ids = _ids(cursor, sql.format(where=_where(conditions), replays=replays),
                           [*params, *limits])  # fmt: skip
        return _rows(cursor, run_ids) if run_ids else []


def _reads_verdict(query: ExecutionQuery) -> bool:
    return query.verdict is not None or (query.text is not None and reads_verdict(query.text))


def _sorted_page_ids(
    cursor: duckdb.DuckDBPyConnection, query: ExecutionQuery, replays: str, window: SearchWindow
) -> list[str]:
    """A page in another order than newest first (the list's sortable columns).

    A plain top-N over the filtered runs: the tuned paths above serve the
    default order, which every first visit uses.
    """
    key = SORT_COLUMNS[query.sort]
    conditions, params = _conditions(query, window=window)
    if query.after is not None:
        value, run_id = query.after
        beyond = "<" if query.descending else ">"
        conditions.append(f"({key} {beyond} ? OR ({key} = ? AND e.run_id > ?))")
        params.extend([value, value, run_id])
    direction = "DESC" if query.descending else "ASC"
    sql = (
        f"SELECT e.run_id FROM executions e {replays} {_where(conditions)} "
        f"ORDER BY {key} {direction}, e.run_id LIMIT ?"
    )
    return _ids(cursor, sql, [*params, query.limit + 1])


def sort_value(row: ExecutionRow, sort: SortKey) -> int:
    """The row's value of a sort key, as the next page's cursor carries it."""
    if sort == "duration":
        return row.end_unix_nano - row.start_unix_nano
    if sort == "transitions":
        return row.transition_count if row.transition_count is not None else -1
    return row.start_unix_nano


def _recent_page_ids(
    cursor: duckdb.DuckDBPyConnection, query: ExecutionQuery, replays: str, recent_runs: int
) -> list[str]:
    """The filtered page among recent runs: exact if it is full, else too short.

    A wide filter's time is its semi-join's hash table, here of the window only: every
    run started at or after `since`, so a full page within it is the right page.
    `since` is the `recent_runs`-th newest start among the 2 x `recent_runs`
    latest-arrived runs, so one late run with an old start cannot widen the window;
    arrival order only decides its size, never whether the page is right.
    """
    plain, plain_params = _page_conditions(query, field_filter=False)
    latest = f"(SELECT max(e.run_key) FROM executions e {replays} {_where(plain)}) - ?"
    since_where = _where([*plain, f"e.run_key > {latest}"])
    conditions, params = _page_conditions(query)
    conditions.append("e.start_unix_nano >= w.since")
    sql = _RECENT_PAGE_IDS_SQL.format(
        since_where=since_where, where=_where(conditions), replays=replays
    )
    limits = [query.limit + 1] * 2
    recent = [*plain_params, *plain_params, 2 * recent_runs, recent_runs]
    return _ids(cursor, sql, [*recent, *params, *limits])


def _ids(cursor: duckdb.DuckDBPyConnection, sql: str, params: list[object]) -> list[str]:
    return [run_id for (run_id,) in cursor.execute(sql, params).fetchall()]


def _rows(cursor: duckdb.DuckDBPyConnection, run_ids: Sequence[str]) -> list[ExecutionRow]:
    # One placeholder per id (values stay bound): DuckDB answers a constant IN
    # list on the primary key from the index, but scans for a list parameter.
    placeholders = ", ".join("?" * len(run_ids))
    rows = cursor.execute(
        f"""
        SELECT {_ROW_SELECT}
        FROM executions e LEFT JOIN execution_replays r ON r.run_key = e.run_key
        WHERE e.run_id IN ({placeholders})
        """,
        list(run_ids),
    ).fetchall()
    # In the page's order, which the id query decided.
    position = {run_id: index for index, run_id in enumerate(run_ids)}
    return sorted((ExecutionRow(*row) for row in rows), key=lambda r: position[r.run_id])


_REPLAYS_JOIN: Final = "LEFT JOIN execution_replays r ON r.run_key = e.run_key"

# `{replays}` joins the replay table only for a verdict filter.
_PAGE_IDS_SQL: Final = """
    SELECT e.run_id FROM executions e {replays} {where}
    ORDER BY e.start_unix_nano DESC, e.run_id LIMIT ?
"""

# With a field filter, the matching runs are collected first as integers (run
# key, start time): a wide filter can match most runs, and carrying each one's
# run id string to the top-N was a large part of the query. `cutoff` is the
# page's oldest start time, so only the runs that can be on the page are sorted
# by (start, run id), as the cursor expects. Inlined instead, DuckDB pushed the
# top-N's dynamic filter into the executions scan and read every row rather
# than probing with the filter's hits.
_PAGE_FROM_HITS: Final = """
    cutoff AS MATERIALIZED (
        SELECT min(start_unix_nano) AS start_unix_nano
        FROM (SELECT start_unix_nano FROM hits ORDER BY start_unix_nano DESC LIMIT ?)
    )
    SELECT e.run_id
    FROM hits h JOIN cutoff c ON h.start_unix_nano >= c.start_unix_nano
    JOIN executions e ON e.run_key = h.run_key
    ORDER BY e.start_unix_nano DESC, e.run_id LIMIT ?
"""

_FILTERED_PAGE_IDS_SQL: Final = (
    """
    WITH hits AS MATERIALIZED (
        SELECT e.run_key, e.start_unix_nano FROM executions e {replays} {where}
    ),"""
    + _PAGE_FROM_HITS
)

# The same over the window of `_recent_page_ids`; `{where}` ends with the test
# against `w.since`.
_RECENT_PAGE_IDS_SQL: Final = (
    """
    WITH w AS MATERIALIZED (
        SELECT min(start_unix_nano) AS since FROM (
            SELECT e.start_unix_nano FROM executions e {replays} {since_where}
            ORDER BY e.start_unix_nano DESC LIMIT ?)
    ), hits AS MATERIALIZED (
        SELECT e.run_key, e.start_unix_nano FROM executions e {replays} CROSS JOIN w {where}
    ),"""
    + _PAGE_FROM_HITS
)


def facets(
    cursor: duckdb.DuckDBPyConnection,
    query: ExecutionQuery,
    names: Sequence[FacetName],
    limit: int = 20,
) -> dict[FacetName, list[tuple[str, int]]]:
    """Counts of each value of these facets within the filtered set, commonest first.

    One scan for all facets (GROUPING SETS), not one per facet: the executions
    page asks for five on every load.
    """
    window = search_window(cursor) if query.text is not None else EVERYWHERE
    conditions, params = _conditions(query, window=window)
    columns = [FACET_COLUMNS[name] for name in names]
    sets = ", ".join(f"({column})" for column in columns)
    # GROUPING(column) = 0 marks the rows grouped by that column.
    which = ", ".join(f"GROUPING({column})" for column in columns)
    rows = cursor.execute(
        f"""
        SELECT [{which}] AS grouping, {", ".join(columns)}, count(*) AS n
        FROM executions e LEFT JOIN execution_replays r ON r.run_key = e.run_key
        {_where(conditions)}
        GROUP BY GROUPING SETS ({sets})
        """,
        params,
    ).fetchall()
    found: dict[FacetName, list[tuple[str, int]]] = {name: [] for name in names}
    for row in rows:
        grouping, values, count = row[0], row[1:-1], row[-1]
        index = grouping.index(0)
        found[names[index]].append((str(values[index]), int(count)))
    return {
        name: sorted(counts, key=lambda item: (-item[1], item[0]))[:limit]
        for name, counts in found.items()
    }


def run_ids_starting(
    cursor: duckdb.DuckDBPyConnection, prefix: str, limit: int
) -> list[str]:
    """Up to `limit` stored run ids that begin with `prefix` (an id cut short in a copy)."""
    rows = cursor.execute(
        "SELECT run_id FROM executions WHERE starts_with(run_id, ?) ORDER BY run_id LIMIT ?",
        [prefix, limit],
    ).fetchall()
    return [row[0] for row in rows]


def partly_indexed(cursor: duckdb.DuckDBPyConnection, query: ExecutionQuery) -> int:
    """How many runs the query's other filters select whose field index is truncated.

    A `where` filter cannot be trusted for them either way; the list says so.
    """
    conditions, params = _conditions(query, field_filter=False)
    found = cursor.execute(
        "SELECT count(*) FROM executions e JOIN execution_replays r ON r.run_key = e.run_key "
        + _where([*conditions, "r.index_truncated"]),
        params,
    ).fetchone()
    return int(found[0]) if found else 0


def row(cursor: duckdb.DuckDBPyConnection, run_id: str) -> ExecutionRow | None:
    found = cursor.execute(
        f"""
        SELECT {_ROW_SELECT}
        FROM executions e LEFT JOIN execution_replays r ON r.run_key = e.run_key
        WHERE e.run_id = ?
        """,
        [run_id],
    ).fetchone()
    return ExecutionRow(*found) if found else None


def children(cursor: duckdb.DuckDBPyConnection, run_id: str) -> list[ExecutionRow]:
    rows = cursor.execute(
        f"""
        SELECT {_ROW_SELECT}
        FROM executions e LEFT JOIN execution_replays r ON r.run_key = e.run_key
        WHERE e.parent_run_id = ?
        ORDER BY e.start_unix_nano, e.run_id
        """,
        [run_id],
    ).fetchall()
    return [ExecutionRow(*row) for row in rows]


@dataclass(frozen=True, slots=True)
class StoreRun:
    """A run that owned a store, with its `(transition_start, transition_end]` interval."""

    run_id: str
    name: str
    transition_start: int
    transition_end: int


def store_run_before(
    cursor: duckdb.DuckDBPyConnection, store_id: str, sequence: int, exclude: Sequence[str]
) -> StoreRun | None:
    """The run of `store_id` started before `sequence` whose interval reaches closest up
    to it (ties: the longer interval, then the run id), skipping `exclude`."""
    found = cursor.execute(
        """
        SELECT e.run_id, e.name, e.transition_start, e.transition_end
        FROM executions e
        WHERE e.store_id = ? AND e.transition_start < ? AND e.transition_end IS NOT NULL
          AND NOT list_contains(?::VARCHAR[], e.run_id)
        ORDER BY least(e.transition_end, ?) DESC, e.transition_start, e.run_id
        LIMIT 1
        """,
        [store_id, sequence, list(exclude), sequence],
    ).fetchone()
    return StoreRun(*found) if found else None
