"""SQL for free-text search (collector/index/search.py parses it).

`compile_search` returns a boolean expression over a table aliased `e` (executions),
every value bound. A bare term matches a run when it is, ignoring case, a part of
its workflow name, service, correlation id, error message or type, a node's name
(its spans: `junjo_parent_runtime_id` is the run), or a string of its end state (the
field index's `is_final` rows), or the start of its run id or trace id. A `key:value`
term looks in one of those only; a state path key in that path's end value. Terms
are ANDed. Each subquery yields keys, never NULL, as in collector/store/filters.py.

End-state strings and span names are the two sources too large to read whole for a
substring: a bare term is looked for inside them only among the SUBSTRING_RUNS
latest-arrived runs (`SearchWindow`, bound as constants, so zone maps skip the rest);
in older runs it must equal a whole string (as typed, or in lower, upper, title or
sentence case), which the
index's hashed `str_key` answers without reading the strings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import duckdb

from collector.index.query import parse_path
from collector.index.search import Search, SearchTerm
from collector.store.filters import TABLE, at_path, key64

Sql = tuple[str, list[object]]
SUBSTRING_RUNS: Final = 20_000
"""How many latest-arrived runs a bare term is looked for inside end-state strings of."""


@dataclass(frozen=True, slots=True)
class SearchWindow:
    """The latest-arrived runs: the first run key among them, and their earliest start
    (a node's span starts after its run does)."""

    first_run_key: int
    first_start_unix_nano: int


EVERYWHERE: Final = SearchWindow(-(2**63), -(2**63))


def search_window(cursor: duckdb.DuckDBPyConnection, runs: int = SUBSTRING_RUNS) -> SearchWindow:
    """The window of the `runs` latest-arrived runs, as stored now."""
    found = cursor.execute("SELECT max(run_key) FROM executions").fetchone()
    newest = found[0] if found and found[0] is not None else 0
    first_key = newest - runs + 1
    found = cursor.execute(
        "SELECT min(start_unix_nano) FROM executions WHERE run_key >= ?", [first_key]
    ).fetchone()
    first_start = found[0] if found and found[0] is not None else EVERYWHERE.first_start_unix_nano
    return SearchWindow(first_key, first_start)
# Words users say for a status, as the executions table spells it.
STATUS_WORDS: Final = {"failed": "error", "failure": "error", "fail": "error", "ok": "ok",
                       "success": "ok", "succeeded": "ok", "error": "error",
                       "cancelled": "cancelled", "canceled": "cancelled"}  # fmt: skip


def compile_search(search: Search, window: SearchWindow = EVERYWHERE) -> Sql:
    """All terms ANDed, as SQL over `e`."""
    parts = [compile_term(term, window) for term in search.terms]
    sql = " AND ".join(f"({part})" for part, _ in parts)
    return sql, [value for _, values in parts for value in values]


def reads_verdict(search: Search) -> bool:
    """Whether the SQL reads `r` (execution_replays joined on the run key)."""
    return any(term.key == "verdict" for term in search.terms)


def compile_term(term: SearchTerm, window: SearchWindow = EVERYWHERE) -> Sql:
    if term.pointer is not None:
        return _state_path(term.key or "", term.value)
    if term.key is None:
        return _any_of(term.value, window, _ANYWHERE)
    return _any_of(term.value, window, _KEYED[term.key])


def like_pattern(value: str) -> str:
    """An ILIKE pattern for "contains `value`", its wildcards escaped."""
    escaped = value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


Matcher = Callable[[str, SearchWindow], Sql]


def _any_of(value: str, window: SearchWindow, matchers: tuple[Matcher, ...]) -> Sql:
    parts = [matcher(value, window) for matcher in matchers]
    return " OR ".join(sql for sql, _ in parts), [v for _, values in parts for v in values]


def _column_contains(column: str) -> Matcher:
    return lambda value, _: (f"{column} ILIKE ? ESCAPE '\\'", [like_pattern(value)])


def _run_id_prefix(value: str, _: SearchWindow) -> Sql:
    return "starts_with(e.run_id, ?)", [value]


def _trace_id_prefix(value: str, _: SearchWindow) -> Sql:
    # Trace ids are stored as lowercase hex.
    return "starts_with(e.trace_id, ?)", [value.lower()]


def _equals_ignoring_case(column: str) -> Matcher:
    return lambda value, _: (f"lower({column}) = ?", [value.lower()])


def _status(value: str, _: SearchWindow) -> Sql:
    return "e.status = ?", [STATUS_WORDS.get(value.lower(), value.lower())]


def _node(value: str, window: SearchWindow) -> Sql:
    """A span of the run named so: containing the value in the window, else equal to it."""
    pattern = like_pattern(value)
    return (
        "e.run_id IN (SELECT s.junjo_parent_runtime_id FROM spans s"
        " WHERE s.junjo_parent_runtime_id IS NOT NULL AND (s.start_unix_nano >= ?"
        " AND s.name ILIKE ? ESCAPE '\\' OR s.name = ?))"
        " OR coalesce(e.error_action ILIKE ? ESCAPE '\\', false)",
        [window.first_start_unix_nano, pattern, value, pattern],
    )


def _error(value: str, _: SearchWindow) -> Sql:
    pattern = like_pattern(value)
    return (
        "e.status_message ILIKE ? ESCAPE '\\' OR coalesce(e.error_type ILIKE ? ESCAPE '\\', false)",
        [pattern, pattern],
    )


def _end_state_string(value: str, window: SearchWindow) -> Sql:
    """A string of the end state: containing the value in the window, else equal to it."""
    whole = sorted({value, value.lower(), value.upper(), value.title(), value.capitalize()})
    # Two scans, not one with OR, which DuckDB filters row by row with both sides; the
    # hashes as a list, so only their rows' strings are read.
    strings = f"SELECT v.run_key FROM {TABLE} v WHERE v.is_final AND v.kind = 'string'"
    return (
        f"e.run_key IN ({strings} AND v.run_key >= ? AND v.str ILIKE ? ESCAPE '\\'"
        f" UNION ALL {strings} AND list_contains(?::BIGINT[], v.str_key)"
        " AND list_contains(?::VARCHAR[], v.str))",
        [window.first_run_key, like_pattern(value), [key64(w) for w in whole], whole],
    )


def _state_path(key: str, value: str) -> Sql:
    """The end value at `key`'s path: a string containing `value`, or a scalar equal to it."""
    path_sql, path_params = at_path(parse_path(key))
    scalar = "v.kind = 'string' AND v.str ILIKE ? ESCAPE '\\'"
    params: list[object] = [like_pattern(value)]
    lowered = value.lower()
    if lowered in ("true", "false"):
        scalar += " OR v.kind = 'bool' AND v.bool_val = ?"
        params.append(lowered == "true")
    number = _number(value)
    if number is not None:
        scalar += " OR v.kind = 'number' AND v.num = ?"
        params.append(number)
    if lowered == "null":
        scalar += " OR v.kind = 'null'"
    return (
        f"e.run_key IN (SELECT v.run_key FROM {TABLE} v"
        f" WHERE {path_sql} AND v.is_final AND ({scalar}))",
        [*path_params, *params],
    )


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


_ANYWHERE: Final[tuple[Matcher, ...]] = (
    _run_id_prefix,
    _trace_id_prefix,
    _column_contains("e.name"),
    _column_contains("e.service"),
    _column_contains("coalesce(e.correlation_id, '')"),
    _error,
    _node,
    _end_state_string,
)
_KEYED: Final[dict[str, tuple[Matcher, ...]]] = {
    "id": (_run_id_prefix, _trace_id_prefix),
    "trace": (_trace_id_prefix,),
    "workflow": (_column_contains("e.name"),),
    "service": (_column_contains("e.service"),),
    "status": (_status,),
    "verdict": (_equals_ignoring_case("coalesce(r.verdict, 'pending')"),),
    "kind": (_equals_ignoring_case("e.kind"),),
    "node": (_node,),
    "error": (_error,),
    "correlation": (_column_contains("coalesce(e.correlation_id, '')"),),
}
