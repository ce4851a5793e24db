"""SQL for the field index: bulk writes and the filter compiler.

Stage: storage. This is the only module that writes SQL for field filters.

Invariants:
- Every value from a query or a state is bound as a `?` parameter; the only
  text spliced into SQL is constant identifiers and operators drawn from the
  allow-lists below.
- `compile_filter` returns a boolean expression over a table aliased `e` with
  a non-null `e.run_key` (the executions table's integer key, copied onto every
  index row when it is written; joining on it is faster than on the run id
  string). Each comparison compiles to
  `e.run_key IN (subquery)` whose subquery never yields NULL, so `NOT` and
  `missing` are plain two-valued logic, with none of SQL's `NOT IN`-with-NULL
  surprises.

Layout, chosen for DuckDB's zone maps (per-row-group min/max): rows are
written sorted by (parent_shape_key, parent_key, path_key, kind, num,
str_key), where the keys are 64-bit BLAKE2b hashes computed here, in Python,
of the parent pointer's shape (`query_ast.shape_of`: its index tokens
written `~*`), the parent pointer, the pointer and the string value. A path
with `[*]` names one parent shape, so it reads the slice of every element's
rows and matches each row's path against a regular expression; a concrete
path reads its own slice within that one. Integer min/max are exact, whereas
DuckDB keeps only an 8-byte prefix of string min/max, which cannot tell
`/refund/amount` from `/refund/eligible`. An equality filter therefore
touches one row group or two; a numeric range on one path reads only that
path's slice. The exact `path` and `str` columns are still compared, so
a hash collision can cost time but never a wrong answer. Rows appended in
small batches lose the global order; collector/store/field_layout.py restores it.

`field_ranges` holds, per execution and numeric path, the least and greatest
number the path held in any indexed state, written and deleted with the
execution's `field_values` rows. An `ever` numeric range reads it (one row per
run) instead of every historical value: `ever p >= x` holds exactly when the
greatest is >= x, `ever p <= x` when the least is <= x. A counter bumped on
every transition otherwise puts one row per step in the range's semi-join.
DuckDB orders NaN above every number in both `max` and comparisons, so the
two tables answer alike even then.

Semantics of comparisons (scope `final`: rows of the end state; `ever`: rows
of any state the history passed through):
- `=`: a row at the path has that JSON value. Numbers compare numerically
  (1 = 1.0), strings exactly, `null` matches JSON null, true/false booleans.
- `!=`: the path exists (in scope) with a different value or type. A missing
  path matches neither `= x` nor `!= x`; use `missing` for that.
- `< <= > >=`: numbers numerically, strings by code point; other types never match.
- `contains`: a string value at the path contains the text, or an array at the
  path has an element equal to the value. With `ever`, "some state had the
  element and some state had an array there" (not necessarily the same state).
- `exists` / `missing`: a row at the path exists / does not (in scope);
  `ever p missing` means the path never appeared in any state.
- `[*]` in a path: some element satisfies the comparison (every operator is
  "some row at a path the pattern matches"), so `items[*].sku != "x"` is
  "some item's sku is not x" and `not items[*].sku = "x"` is "no item's is";
  `items[*].sku missing` is "no item has a sku". `[-1]` reads the rows the
  index keeps for each array's last element (collector/index/fields.py), one
  concrete path like any other.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Final, Literal, TypeAlias, assert_never

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from collector.index.fields import FieldIndex, NodeKey
from collector.index.query_ast import (
    ANY,
    And,
    Compare,
    Expr,
    Not,
    Or,
    Path,
    Presence,
    Scalar,
    Scope,
    Wildcard,
    shape_of,
)
from collector.replay.jsondoc import escape_token
from collector.store.run_keys import StoredRun, insert_with_run_keys, stored_runs

TABLE: Final = "field_values"
SORT_COLUMNS: Final = ("parent_shape_key", "parent_key", "path_key", "kind", "num", "str_key")
SORT_KEY: Final = ", ".join(SORT_COLUMNS)
RANGES: Final = "field_ranges"
# `hi` last: most `ever` ranges are lower bounds (`>=`, `>`), which zone maps
# on `hi` then prune within the path's slice.
RANGES_SORT_COLUMNS: Final = ("parent_key", "path_key", "hi")
RANGES_SORT_KEY: Final = ", ".join(RANGES_SORT_COLUMNS)


_BATCH_SCHEMA: Final = pa.schema(
    [
        ("run_id", pa.string()),
        ("parent_shape_key", pa.int64()),
        ("parent_key", pa.int64()),
        ("path_key", pa.int64()),
        ("kind", pa.string()),
        ("num", pa.float64()),
        ("str_key", pa.int64()),
        ("str", pa.string()),
        ("bool_val", pa.bool_()),
        ("is_final", pa.bool_()),
        ("path", pa.string()),
        ("parent", pa.string()),
    ]
)
# A FieldIndex node (fieldindex.NodeKey) as Arrow sees it, field for field.
_NODE: Final = pa.struct(
    [_BATCH_SCHEMA.field(name) for name in ("path", "parent", "kind", "num", "str", "bool_val")]
)
Ordering: TypeAlias = Literal["<", "<=", ">", ">="]
_ORDERING_SQL: Final[dict[Ordering, str]] = {"<": "<", "<=": "<=", ">": ">", ">=": ">="}


@lru_cache(maxsize=1 << 16)
def key64(text: str) -> int:
    """A stable signed 64-bit hash of `text` (paths repeat across runs; hence the cache).

    Stable across processes and DuckDB versions, unlike `hash()` in either,
    because stored rows and later queries must agree on it.
    """
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


# --- writes ------------------------------------------------------------------


def insert_field_rows(
    conn: duckdb.DuckDBPyConnection,
    indexes: Iterable[FieldIndex],
    runs: Mapping[str, StoredRun] | None = None,
) -> int:
    """Append the rows of one or many executions in one sorted bulk insert.

    Returns the number of rows written. `runs` are the stored runs the rows
    may belong to (`run_keys.stored_runs`), looked up here if not given; rows
    of other runs are not written. Re-indexing an execution is
    `delete_field_rows` then this, in one transaction owned by the caller.
    """
    listed = list(indexes)
    if runs is None:
        runs = stored_runs(conn, {index.run_id for index in listed})
    batch = _arrow_batch(listed)
    # The parent pointer only made its key: the stored path implies it (`_children_of`).
    rows = batch.drop_columns(["parent"])
    insert_with_run_keys(conn, TABLE, rows, runs, sort_by=SORT_COLUMNS, keep_run_id=False)
    insert_with_run_keys(
        conn, RANGES, _ranges(batch), runs, sort_by=RANGES_SORT_COLUMNS, keep_run_id=False
    )
    written: int = batch.num_rows
    return written


def _ranges(batch: pa.Table) -> pa.Table:
    """The least and greatest number per (run, path) among the batch's rows."""
    numbers = batch.filter(pc.equal(batch["kind"], "number"))
    grouped = numbers.group_by(["run_id", "parent_key", "path_key", "path"]).aggregate(
        [("num", "min"), ("num", "max")]
    )
    return grouped.rename_columns(["run_id", "parent_key", "path_key", "path", "lo", "hi"])


def _arrow_batch(indexes: Iterable[FieldIndex]) -> pa.Table:
    # The nodes go to Arrow in one conversion, as structs, and are split into
    # columns there: a replay batch writes tens of thousands of rows.
    nodes: list[NodeKey] = []
    run_ids: list[str] = []
    finals: list[bool] = []
    for index in indexes:
        count = len(index.nodes)
        nodes.extend(index.nodes)
        run_ids.extend([index.run_id] * count)
        finals.extend([True] * index.final_count + [False] * (count - index.final_count))
    arrays = dict(zip(_NODE.names, pa.array(nodes, _NODE).flatten(), strict=True))
    arrays["run_id"] = pa.array(run_ids, pa.string())
    arrays["is_final"] = pa.array(finals, pa.bool_())
    arrays["parent_shape_key"] = _keys(arrays["parent"], shape_of)
    arrays["parent_key"] = _keys(arrays["parent"])
    arrays["path_key"] = _keys(arrays["path"])
    arrays["str_key"] = _keys(arrays["str"])
    return pa.table([arrays[name] for name in _BATCH_SCHEMA.names], schema=_BATCH_SCHEMA)


def _keys(texts: pa.Array, transform: Callable[[str], str] = str) -> pa.Array:
    """`key64` of each (transformed) text (null for null), hashing each distinct text once.

    A batch's rows repeat a few hundred paths and values: hashing the distinct
    ones and spreading them with Arrow cost a fraction of one call per row.
    """
    encoded = texts.dictionary_encode()
    distinct = pa.array(
        [key64(transform(text)) for text in encoded.dictionary.to_pylist()], pa.int64()
    )
    return pc.take(distinct, encoded.indices)


def delete_field_rows(
    conn: duckdb.DuckDBPyConnection, run_keys: Iterable[int]
) -> tuple[int, int]:
    """Remove every row of the executions with these run keys; return (values, ranges) deleted.

    No keys, no statements: a batch of pruned traces may hold no execution.
    Keys grow with arrival, so the bounds let zone maps skip the row groups
    appended before the oldest of them (a rewritten index is ordered by path,
    and is scanned).
    """
    keys = sorted(run_keys)
    if not keys:
        return 0, 0
    return _delete_runs(conn, TABLE, keys), _delete_runs(conn, RANGES, keys)


def _delete_runs(conn: duckdb.DuckDBPyConnection, table: str, keys: list[int]) -> int:
    conn.execute(
        f"DELETE FROM {table} WHERE run_key BETWEEN ? AND ?"
        " AND run_key IN (SELECT unnest(?::BIGINT[]))",
        [keys[0], keys[-1], keys],
    )
    # DuckDB answers a DELETE with one row holding the number of rows deleted.
    row = conn.fetchone()
    return int(row[0]) if row else 0


def without_execution(table: str) -> str:
    """SQL true for a row of `table` (the field index or a twin of it) whose run is not stored."""
    return f"NOT EXISTS (SELECT 1 FROM executions e WHERE e.run_key = {table}.run_key)"


# --- filter compiler -----------------------------------------------------------


def compile_filter(expr: Expr) -> tuple[str, list[object]]:
    """Compile a parsed query into `(sql, params)` for `WHERE <sql>` over `e`.

    The SQL references `e.run_key` and the field index table only; params are
    in placeholder order.
    """
    params: list[object] = []
    return _compile(expr, params), params


def _compile(expr: Expr, params: list[object]) -> str:
    match expr:
        case And(operands=operands):
            return "(" + " AND ".join(_compile(o, params) for o in operands) + ")"
        case Or(operands=operands):
            return "(" + " OR ".join(_compile(o, params) for o in operands) + ")"
        case Not(operand=operand):
            return f"(NOT {_compile(operand, params)})"
        case Presence(scope=scope, path=path, present=present):
            found = _rows_at(path, scope, "TRUE", [], params)
            return found if present else f"(NOT {found})"
        case Compare():
            return _compare(expr, params)
        case _:
            assert_never(expr)


def _compare(compare: Compare, params: list[object]) -> str:
    path, scope, value = compare.path, compare.scope, compare.value
    match compare.op:
        case "=":
            condition, values = _equals(value)
            return _rows_at(path, scope, condition, values, params)
        case "!=":
            condition, values = _equals(value)
            return _rows_at(path, scope, f"NOT ({condition})", values, params)
        case "<" | "<=" | ">" | ">=" if _reads_ranges(compare):
            return _ever_in_range(path, compare.op, _as_float(value), params)
        case "<" | "<=" | ">" | ">=":
            column, kind = ("v.str", "string") if isinstance(value, str) else ("v.num", "number")
            condition = f"v.kind = '{kind}' AND {column} {_ORDERING_SQL[compare.op]} ?"
            bound = value if isinstance(value, str) else _as_float(value)
            return _rows_at(path, scope, condition, [bound], params)
        case "contains":
            return _contains(path, scope, value, params)
        case _:
            assert_never(compare.op)


def _reads_ranges(compare: Compare) -> bool:
    """Whether an ordering is answered from `field_ranges`, which keys concrete paths only
    (an `ever` range on a `[*]` path reads the values of the paths it matches)."""
    return compare.scope == "ever" and _is_number(compare.value) and not compare.path.is_pattern


def _ever_in_range(path: Path, op: Ordering, bound: float, params: list[object]) -> str:
    """`e` had a number at `path`, in some state, that is `op` `bound`.

    Some value is >= bound exactly when the greatest is, and some value is
    <= bound exactly when the least is; likewise for the strict orderings.
    """
    column = "r.hi" if op in (">", ">=") else "r.lo"
    pointer, parent = path.pointer, path.parent.pointer
    params.extend([key64(parent), key64(pointer), pointer, bound])
    return (
        f"e.run_key IN (SELECT r.run_key FROM {RANGES} r WHERE r.parent_key = ? "
        f"AND r.path_key = ? AND r.path = ? AND {column} {_ORDERING_SQL[op]} ?)"
    )


def _contains(path: Path, scope: Scope, value: Scalar, params: list[object]) -> str:
    # Built in SQL text order: placeholders are positional.
    substring = (
        _rows_at(path, scope, "v.kind = 'string' AND contains(v.str, ?)", [value], params)
        if isinstance(value, str)
        else None
    )
    condition, values = _equals(value)
    has_element = _rows_under(path, scope, condition, values, params)
    is_array = _rows_at(path, scope, "v.kind = 'array'", [], params)
    element = f"({has_element} AND {is_array})"
    return element if substring is None else f"({substring} OR {element})"


def _equals(value: Scalar) -> tuple[str, list[object]]:
    """Condition on `v` that the row holds exactly this JSON value."""
    # bool before number: True is an int in Python but a JSON boolean.
    if value is None:
        return "v.kind = 'null'", []
    if isinstance(value, bool):
        return "v.kind = 'bool' AND v.bool_val = ?", [value]
    if isinstance(value, int | float):
        return "v.kind = 'number' AND v.num = ?", [_as_float(value)]
    return "v.kind = 'string' AND v.str_key = ? AND v.str = ?", [key64(value), value]


def _rows_at(
    path: Path, scope: Scope, condition: str, values: list[object], params: list[object]
) -> str:
    """`e` has a row at `path` (any path it matches), in scope, satisfying `condition`."""
    at, at_params = at_path(path)
    params.extend([*at_params, *values])
    return (
        f"e.run_key IN (SELECT v.run_key FROM {TABLE} v WHERE {at}"
        f"{_scope_sql(scope)} AND ({condition}))"
    )


def _rows_under(
    path: Path, scope: Scope, condition: str, values: list[object], params: list[object]
) -> str:
    """`e` has a direct child of `path` (an element, of any path it matches), in scope,
    satisfying `condition`.

    For a pattern only elements count: `items[*].tags contains "eu"` must not take an
    object's member "eu" in one item for the element of another item's array.
    """
    under, under_params = _children_of(path, _INDEX_REGEX)
    params.extend([*under_params, *values])
    return (
        f"e.run_key IN (SELECT v.run_key FROM {TABLE} v WHERE {under}"
        f"{_scope_sql(scope)} AND ({condition}))"
    )


def at_path(path: Path) -> tuple[str, list[object]]:
    """SQL over `v` true exactly where the row is at `path`, or at a path it matches.

    Led by the parent's shape key, the sort key's first column, so zone maps
    read only that slice; the exact path (or the pattern) makes the answer exact.
    """
    pointer, parent = path.pointer, path.parent.pointer
    if path.is_pattern:
        return (
            "v.parent_shape_key = ? AND regexp_full_match(v.path, ?)",
            [key64(shape_of(parent)), _path_regex(path.tokens)],
        )
    return (
        "v.parent_shape_key = ? AND v.parent_key = ? AND v.path_key = ? AND v.path = ?",
        [key64(shape_of(parent)), key64(parent), key64(pointer), pointer],
    )


def _children_of(parent: Path, child_regex: str = "[^/]*") -> tuple[str, list[object]]:
    """SQL over `v` true exactly where the row's path is a direct child of `parent`
    (of a path it matches, and then whose last token `child_regex` matches).

    A node's parent is its pointer up to the last "/" (RFC 6901 writes a "/"
    inside a key as "~1"), so the index stores no parent column: the hashed
    keys find the rows, and the prefix test (or the pattern) makes the answer exact.
    """
    pointer = parent.pointer
    if parent.is_pattern:
        return (
            "v.parent_shape_key = ? AND regexp_full_match(v.path, ?)",
            [key64(shape_of(pointer)), f"{_path_regex(parent.tokens)}/{child_regex}"],
        )
    prefix = pointer + "/"
    return (
        "v.parent_shape_key = ? AND v.parent_key = ? AND starts_with(v.path, ?) "
        "AND NOT contains(substr(v.path, ?), '/')",
        [key64(shape_of(pointer)), key64(pointer), prefix, len(prefix) + 1],
    )


_INDEX_REGEX: Final = "(?:0|[1-9][0-9]*)"
_PLAIN: Final = re.compile(r"[A-Za-z0-9_]")


def _regex_char(c: str) -> str:
    # Every character but a plain one as a hex escape: no metacharacter reaches RE2.
    return c if _PLAIN.match(c) else f"\\x{{{ord(c):x}}}"


def _path_regex(tokens: tuple[str | Wildcard, ...]) -> str:
    """An RE2 expression matching the pointers a path pattern names, whole."""
    parts: list[str] = []
    for token in tokens:
        if token is ANY:
            parts.append(_INDEX_REGEX)
        else:
            spelled = token.value if isinstance(token, Wildcard) else escape_token(token)
            parts.append("".join(_regex_char(c) for c in spelled))
    return "".join("/" + part for part in parts)


def _scope_sql(scope: Scope) -> str:
    # `ever` includes the final rows: the end state is one of the states.
    return " AND v.is_final" if scope == "final" else ""


def _is_number(value: Scalar) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _as_float(value: Scalar) -> float:
    assert isinstance(value, int | float) and not isinstance(value, bool)
    return float(value)


# --- reads: the list's value columns and the hints for an empty result --------

FieldValue: TypeAlias = tuple[str, float | str | bool | None]
"""A final value from the index: its kind and its scalar (None for null and containers)."""


def final_values(
    conn: duckdb.DuckDBPyConnection, run_ids: Sequence[str], paths: Sequence[Path]
) -> dict[tuple[str, str], FieldValue]:
    """The end-state value of each path in each run, keyed by (run id, pointer).

    A run whose end state lacks a path has no entry for it. The runs' keys are
    looked up first and bound as constants, and each path is its own branch on
    the sort key (parent_key, path_key), so zone maps read only that path's
    slice (a semi-join over an OR of paths scanned the whole index, and ran out of
    memory on a large store).
    """
    if not run_ids or not paths:
        return {}
    runs = ", ".join("?" for _ in run_ids)
    run_ids_by_key = {
        int(key): run_id
        for run_id, key in conn.execute(
            f"SELECT run_id, run_key FROM executions WHERE run_id IN ({runs})", list(run_ids)
        ).fetchall()
        if key is not None
    }
    if not run_ids_by_key:
        return {}
    keys = list(run_ids_by_key)
    in_keys = ", ".join("?" for _ in keys)
    branch = (
        f"SELECT v.run_key, v.path, v.kind, v.num, v.str, v.bool_val FROM {TABLE} v "
        f"WHERE v.parent_shape_key = ? AND v.parent_key = ? AND v.path_key = ? AND v.path = ? "
        f"AND v.is_final AND v.run_key IN ({in_keys})"
    )
    params: list[object] = []
    for path in paths:
        params.extend([*at_path(path)[1], *keys])
    rows = conn.execute(" UNION ALL ".join(branch for _ in paths), params).fetchall()
    found: dict[tuple[str, str], FieldValue] = {}
    for run_key, pointer, kind, num, text, flag in rows:
        scalar = num if kind == "number" else text if kind == "string" else flag
        found[(run_ids_by_key[run_key], pointer)] = (kind, scalar)
    return found


def kinds_at(conn: duckdb.DuckDBPyConnection, path: Path) -> set[str]:
    """The JSON kinds `path` (or a path it matches) held in any indexed state of any run
    (empty: never seen)."""
    at, params = at_path(path)
    rows = conn.execute(f"SELECT DISTINCT kind FROM {TABLE} v WHERE {at}", params).fetchall()
    return {row[0] for row in rows}


def child_paths(conn: duckdb.DuckDBPyConnection, parent: Path, limit: int) -> list[str]:
    """Up to `limit` distinct pointers directly under `parent` (or a path it matches), in
    any run and state; the index's second rows of last elements (`~-1`) left out."""
    under, params = _children_of(parent)
    rows = conn.execute(
        f"SELECT DISTINCT v.path FROM {TABLE} v WHERE {under} AND NOT ends_with(v.path, ?) "
        "ORDER BY v.path LIMIT ?",
        [*params, f"/{Wildcard.LAST.value}", limit],
    ).fetchall()
    return [row[0] for row in rows]


@dataclass(frozen=True, slots=True)
class Matches:
    """A run's end values at the paths a pattern matches: the first few, and how many."""

    first: tuple[FieldValue, ...]
    count: int


def final_matches(
    conn: duckdb.DuckDBPyConnection, run_ids: Sequence[str], pattern: Path, first: int
) -> dict[str, Matches]:
    """Per run, the end values at the paths `pattern` matches (the first `first`, in
    element order, and their number); a run with none has no entry.

    An array's own preview is the pattern of its elements (`items[*]`).
    """
    if not run_ids:
        return {}
    at, at_params = at_path(pattern)
    runs = ", ".join("?" for _ in run_ids)
    # Shorter pointers first, then by text: elements in index order for one `[*]`.
    rows = conn.execute(
        f"""
        SELECT e.run_id, m.kind, m.num, m.str, m.bool_val, m.n FROM (
            SELECT v.run_key, v.kind, v.num, v.str, v.bool_val, count(*) OVER w AS n,
                   row_number() OVER (PARTITION BY v.run_key ORDER BY length(v.path), v.path)
                       AS k
            FROM {TABLE} v
            WHERE {at} AND v.is_final
              AND v.run_key IN (SELECT run_key FROM executions WHERE run_id IN ({runs}))
            WINDOW w AS (PARTITION BY v.run_key)
        ) m JOIN executions e ON e.run_key = m.run_key
        WHERE m.k <= ? ORDER BY e.run_id, m.k
        """,
        [*at_params, *run_ids, first],
    ).fetchall()
    found: dict[str, Matches] = {}
    for run_id, kind, num, text, flag, count in rows:
        scalar = num if kind == "number" else text if kind == "string" else flag
        previous = found.get(run_id, Matches((), int(count)))
        found[run_id] = Matches((*previous.first, (kind, scalar)), int(count))
    return found
