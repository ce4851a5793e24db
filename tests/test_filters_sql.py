"""Compiled filters run against a real DuckDB holding hand-made executions."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.index.fields import ABSENT, Absent, JsonValue, index_rows
from collector.index.query import parse_query
from collector.index.query_ast import Path as FieldPath
from collector.store import Store, field_layout, listing
from collector.store.filters import (
    SORT_KEY,
    child_paths,
    compile_filter,
    delete_field_rows,
    insert_field_rows,
    key64,
)
from collector.store.migrations import apply_migrations
from collector.store.replays import ReplayRecord
from collector.store.retention import delete_traces
from studio.params import execution_query, next_cursor

# (start state, touched (pointer, value after) in order, final state)
_History = tuple[JsonValue, list[tuple[str, JsonValue | Absent]], JsonValue]

# run_id -> its history
_HISTORIES: dict[str, _History] = {
    "approved": (
        {"refund": {"eligible": False}, "attempts": 0, "status": "queued"},
        [
            ("/attempts", 1),
            ("/attempts", 2),
            ("/attempts", 3),
            ("/refund/eligible", True),
            ("/status", "approved"),
        ],
        {
            "refund": {"eligible": True, "amount": 120.5},
            "attempts": 3,
            "status": "approved",
            "tags": ["vip", "eu"],
            "note": "refund approved after review",
            "metadata": {"extra/key~": "x'; drop table executions; --"},
        },
    ),
    "denied": (
        {"refund": {"eligible": True}, "attempts": 0, "status": "queued"},
        [("/refund/eligible", False), ("/status", "denied")],
        {
            "refund": {"eligible": False},
            "attempts": 1,
            "status": "denied",
            "tags": ["us"],
            "profile": {"address": None},
        },
    ),
    "pending": (
        {"attempts": 0, "status": "queued", "refund": None},
        [],
        {"attempts": 0, "status": "queued", "refund": None, "tags": [], "score": 1},
    ),
}


@pytest.fixture
def conn() -> Iterator[duckdb.DuckDBPyConnection]:
    connection = _index_connection(_HISTORIES)
    yield connection
    connection.close()


def _index_connection(histories: dict[str, _History]) -> duckdb.DuckDBPyConnection:
    """An in-memory database with the store's own schema, indexing these histories."""
    connection = duckdb.connect(":memory:")
    apply_migrations(connection)
    for run_id in histories:
        _add_execution(connection, run_id)
    insert_field_rows(
        connection,
        [
            index_rows(run_id, start, final, touched)
            for run_id, (start, touched, final) in histories.items()
        ],
    )
    return connection


def _add_execution(conn: duckdb.DuckDBPyConnection, run_id: str, start: int = 0) -> None:
    """An executions row with what the schema requires; the index joins on its run key."""
    conn.execute(
        "INSERT INTO executions (run_id, kind, name, service, trace_id, span_id,"
        " parent_span_id, status, status_message, start_unix_nano, end_unix_nano,"
        " received_unix_nano) VALUES (?, 'workflow', 'W', 's', 't', 's', '', 'ok', '',"
        " ?, ?, 0)",
        [run_id, start, start + 1],
    )


def _matches(conn: duckdb.DuckDBPyConnection, query: str) -> set[str]:
    where, params = compile_filter(parse_query(query))
    rows = conn.execute(f"SELECT e.run_id FROM executions e WHERE {where}", params).fetchall()
    return {run_id for (run_id,) in rows}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("refund.eligible = true", {"approved"}),
        ("/refund/eligible = false", {"denied"}),
        ("refund = null", {"pending"}),
        ("attempts = 3.0", {"approved"}),
        ('status = "queued"', {"pending"}),
        ('status = "QUEUED"', set()),
        ("attempts != 3", {"denied", "pending"}),
        ("score != 2", {"pending"}),
        ("refund.eligible != true", {"denied"}),
        ("attempts > 0", {"approved", "denied"}),
        ("attempts <= 1", {"denied", "pending"}),
        ("refund.amount >= 120.5", {"approved"}),
        ('status < "b"', {"approved"}),
        ("status > 1", set()),
        ('tags contains "eu"', {"approved"}),
        ('note contains "approved after"', {"approved"}),
        ('tags contains "e"', set()),
        ('tags[1] = "eu"', {"approved"}),
        ("profile.address exists", {"denied"}),
        ("profile.address missing", {"approved", "pending"}),
        ("tags exists", {"approved", "denied", "pending"}),
        ('metadata."extra/key~" = "x\'; drop table executions; --"', {"approved"}),
    ],
)
def test_compile_filter_final_scope_matches(
    conn: duckdb.DuckDBPyConnection, query: str, expected: set[str]
) -> None:
    assert _matches(conn, query) == expected


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("ever attempts = 2", {"approved"}),
        ("ever attempts >= 3", {"approved"}),
        ("ever refund.eligible = true", {"approved", "denied"}),
        ('ever status = "queued"', {"approved", "denied", "pending"}),
        ("final attempts = 0", {"pending"}),
        ("ever attempts = 0", {"approved", "denied", "pending"}),
        ("ever refund.eligible != false", {"approved", "denied"}),
        ("ever refund.amount missing", {"denied", "pending"}),
    ],
)
def test_compile_filter_ever_scope_matches_any_state(
    conn: duckdb.DuckDBPyConnection, query: str, expected: set[str]
) -> None:
    assert _matches(conn, query) == expected


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("refund.eligible = true and ever attempts >= 3", {"approved"}),
        ('status = "denied" or status = "queued"', {"denied", "pending"}),
        ("not attempts = 0", {"approved", "denied"}),
        ('not (attempts = 0 or tags contains "us")', {"approved"}),
        ("not refund.amount exists and ever refund.eligible = true", {"denied"}),
    ],
)
def test_compile_filter_combines_with_boolean_logic(
    conn: duckdb.DuckDBPyConnection, query: str, expected: set[str]
) -> None:
    assert _matches(conn, query) == expected


def test_compile_filter_binds_values_as_parameters() -> None:
    hostile = "x'; drop table executions; --"
    sql, params = compile_filter(parse_query(f'a."b\'c" = "{hostile}"'))
    assert hostile not in sql
    assert "b'c" not in sql
    assert hostile in params
    assert sql.count("?") == len(params)


def test_a_row_filed_under_a_colliding_parent_key_is_no_child(
    conn: duckdb.DuckDBPyConnection,
) -> None:
    """The index keeps no parent column: the path itself tells children from the rest."""
    # "collided" has an array at /tags and, under /tags's parent key as a 64-bit
    # collision would file it, a grandchild "eu". "slashed" has a true child
    # whose key holds a "/" (RFC 6901 "~1").
    _add_execution(conn, "collided")
    insert_field_rows(conn, [index_rows("collided", ABSENT, {"tags": ["us"]})])
    conn.execute(
        "INSERT INTO field_values (run_key, parent_shape_key, parent_key, path_key, kind,"
        " str_key, str, is_final, path) SELECT run_key, ?, ?, ?, 'string', ?, 'eu', TRUE,"
        " '/tags/0/x' FROM executions WHERE run_id = 'collided'",
        [key64("/tags"), key64("/tags"), key64("/tags/0/x"), key64("eu")],
    )
    _add_execution(conn, "slashed")
    insert_field_rows(conn, [index_rows("slashed", ABSENT, {"tags": {"e/u": "eu"}})])

    assert "collided" not in _matches(conn, 'tags contains "eu"')
    assert "/tags/0/x" not in child_paths(conn, FieldPath(("tags",)), 100)
    assert "/tags/e~1u" in child_paths(conn, FieldPath(("tags",)), 100)


def test_delete_field_rows_removes_only_that_execution(conn: duckdb.DuckDBPyConnection) -> None:
    approved = conn.execute("SELECT run_key FROM executions WHERE run_id = 'approved'").fetchone()
    assert approved is not None
    delete_field_rows(conn, [approved[0]])
    assert _matches(conn, "tags exists") == {"denied", "pending"}


@pytest.mark.parametrize("staged", [False, True])
@pytest.mark.parametrize("chunk_rows", [field_layout.CHUNK_ROWS, 1, 3])
def test_compact_field_index_keeps_rows_schema_and_answers(
    conn: duckdb.DuckDBPyConnection, chunk_rows: int, staged: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    # staged: an index mostly in arrival order, copied by runs first, then merged.
    conn.execute(
        "UPDATE field_index_layout SET sorted_rows = ?, appended_rows = ?",
        [0, 1] if staged else [1, 0],
    )
    # A piece at a time: a row (ties on the sort key split by run), a few, or
    # (at the default) all at once.
    monkeypatch.setattr(field_layout, "CHUNK_ROWS", chunk_rows)
    monkeypatch.setattr(field_layout, "SAMPLES_PER_PIECE", 1)
    _add_execution(conn, "late")
    insert_field_rows(conn, [index_rows("late", ABSENT, {"attempts": 9})])
    count = "SELECT (SELECT count(*) FROM field_values), (SELECT count(*) FROM field_ranges)"
    before = conn.execute(count).fetchall()
    schema = "SELECT table_name, sql FROM duckdb_tables() WHERE table_name LIKE 'field_%'"
    tables = conn.execute(schema).fetchall()
    assert field_layout.compact(conn) == before[0][0]
    assert conn.execute(count).fetchall() == before
    assert conn.execute(schema).fetchall() == tables
    assert field_layout.layout(conn) == field_layout.IndexLayout(before[0][0], 0)
    assert _matches(conn, "attempts > 2") == {"approved", "late"}
    assert _matches(conn, "ever attempts >= 2") == {"approved", "late"}
    # Sorted: each path's rows are together, in the index's sort key order.
    order = conn.execute(
        f"SELECT {SORT_KEY} FROM field_values ORDER BY rowid"
    ).fetchall()
    # (DuckDB sorts NULLs last.)
    assert order == sorted(order, key=lambda row: tuple((v is None, v or 0) for v in row))


def test_filtered_pages_follow_start_then_run_id_across_equal_start_times(
    tmp_path: Path,
) -> None:
    """The filtered page's top-N cutoff keeps every run tied on the cutoff's start time."""
    store = Store(tmp_path / "ties.duckdb")
    runs = [(f"run-{n:02d}", 1_000 * (n // 4)) for n in range(20)]  # four runs per start time
    with store._cursor() as cursor:
        for run_id, start in runs:
            cursor.execute(
                "INSERT INTO executions (run_id, kind, name, service, trace_id, span_id,"
                " parent_span_id, status, status_message, start_unix_nano, end_unix_nano,"
                " received_unix_nano) VALUES (?, 'workflow', 'W', 's', 't', 's', '', 'ok', '',"
                " ?, ?, 0)",
                [run_id, start, start + 1],
            )
        insert_field_rows(
            cursor,
            [index_rows(run_id, ABSENT, {"n": n}) for n, (run_id, _) in enumerate(runs)],
        )
    matching = [(run_id, start) for n, (run_id, start) in enumerate(runs) if n >= 5]
    expected = [run_id for run_id, _ in sorted(matching, key=lambda r: (-r[1], r[0]))]

    seen = _paged(store, "n >= 5", listing.RECENT_RUNS)
    store.close()
    assert seen == expected


# --- `ever` numeric ranges, answered from field_ranges --------------------------

# run_id -> (start state, touched, final state): values only seen mid-history.
_COUNTERS: dict[str, _History] = {
    "spiked": ({"n": 0}, [("/n", 7), ("/n", 2)], {"n": 2}),
    "dipped": ({"n": 5}, [("/n", -3), ("/n", 5)], {"n": 5}),
    "steady": ({"n": 4}, [], {"n": 4}),
    "texty": ({"n": "9"}, [("/n", "10")], {"n": "10"}),  # strings never match a number
    "dropped": ({"n": 8}, [("/n", ABSENT)], {}),  # held 8, then removed
}


@pytest.fixture
def counters() -> Iterator[duckdb.DuckDBPyConnection]:
    connection = _index_connection(_COUNTERS)
    yield connection
    connection.close()


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("ever n >= 7", {"spiked", "dropped"}),
        ("ever n > 7", {"dropped"}),
        ("ever n > 8", set()),
        ("ever n <= -3", {"dipped"}),
        ("ever n < -3", set()),
        ("ever n < 0", {"dipped"}),
        ("ever n <= 0", {"spiked", "dipped"}),
        ("ever n >= 4.0", {"spiked", "dipped", "steady", "dropped"}),
        ("ever n < 4", {"spiked", "dipped"}),
        ("final n >= 7", set()),
        ("final n < 0", set()),
        ("ever n >= 7 and ever n <= 0", {"spiked"}),
        ("ever n >= 7 and not ever n <= 0", {"dropped"}),
        ("ever n < 0 or ever n > 7", {"dipped", "dropped"}),
        ("not (ever n > 3 or ever n < 0)", {"texty"}),
        ("ever n > 3 and final n < 3", {"spiked"}),
        ('ever n >= "9"', {"texty"}),
    ],
)
def test_compile_filter_ever_ranges_see_values_held_only_mid_history(
    counters: duckdb.DuckDBPyConnection, query: str, expected: set[str]
) -> None:
    assert _matches(counters, query) == expected


def test_compile_filter_ever_numeric_ranges_read_the_ranges_table() -> None:
    sql, params = compile_filter(parse_query("ever n >= 3"))
    assert "field_ranges" in sql and "field_values" not in sql
    assert sql.count("?") == len(params)
    final_sql, _ = compile_filter(parse_query("n >= 3"))
    assert "field_ranges" not in final_sql


def test_field_ranges_hold_one_row_per_run_and_numeric_path(
    counters: duckdb.DuckDBPyConnection,
) -> None:
    rows = counters.execute(
        "SELECT e.run_id, r.path, r.lo, r.hi FROM field_ranges r JOIN executions e USING (run_key)"
        " ORDER BY e.run_id"
    )
    assert rows.fetchall() == [
        ("dipped", "/n", -3.0, 5.0),
        ("dropped", "/n", 8.0, 8.0),
        ("spiked", "/n", 0.0, 7.0),
        ("steady", "/n", 4.0, 4.0),
    ]


_BOUNDS = st.one_of(
    st.integers(min_value=-50, max_value=50),
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
)
# States may also hold what an integer beyond float range is indexed as.
_NUMBERS = st.one_of(_BOUNDS, st.sampled_from([math.inf, -math.inf, -0.0]))


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
    histories=st.lists(
        st.lists(st.one_of(_NUMBERS, st.just("s"), st.none()), min_size=1, max_size=6),
        min_size=1,
        max_size=6,
    ),
    op=st.sampled_from(["<", "<=", ">", ">="]),
    bound=_BOUNDS,
)
def test_ever_ranges_agree_with_a_scan_of_every_value(
    histories: list[list[JsonValue]], op: str, bound: int | float
) -> None:
    """The pre-aggregate answers exactly as scanning every indexed number did."""
    runs: dict[str, _History] = {
        f"run-{n}": ({"x": values[0]}, [("/x", v) for v in values[1:-1]], {"x": values[-1]})
        for n, values in enumerate(histories)
    }
    connection = _index_connection(runs)
    try:
        scanned = connection.execute(
            "SELECT DISTINCT e.run_id FROM field_values v JOIN executions e USING (run_key)"
            f" WHERE v.path = '/x' AND v.kind = 'number' AND v.num {op} ?",
            [float(bound)],
        ).fetchall()
        query = f"ever x {op} {json.dumps(bound)}"
        assert _matches(connection, query) == {run_id for (run_id,) in scanned}
        expected = {
            run_id
            for run_id, values in zip(runs, histories, strict=True)
            if any(_holds(value, op, bound) for value in values)
        }
        assert _matches(connection, query) == expected
    finally:
        connection.close()


def _holds(value: JsonValue, op: str, bound: int | float) -> bool:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    number, limit = float(value), float(bound)
    return {
        "<": number < limit,
        "<=": number <= limit,
        ">": number > limit,
        ">=": number >= limit,
    }[op]


def test_replaying_again_replaces_an_executions_ranges(tmp_path: Path) -> None:
    """Late evidence re-indexes a run: its old least and greatest must not answer."""
    store = Store(tmp_path / "late.duckdb")
    with store._cursor() as cursor:
        _insert_execution(cursor, "late", 1)
    first = index_rows("late", {"n": 0}, {"n": 1}, [("/n", 9)])
    store.save_replays([_record("late")], [first])
    assert _store_matches(store, "ever n >= 9") == ["late"]

    again = index_rows("late", {"n": 0}, {"n": 2}, [("/n", 1)])
    store.save_replays([_record("late")], [again])
    assert _store_matches(store, "ever n >= 9") == []
    assert _store_matches(store, "ever n >= 2") == ["late"]
    with store._cursor() as cursor:
        rows = cursor.execute(
            "SELECT e.run_id, r.lo, r.hi FROM field_ranges r JOIN executions e USING (run_key)"
        ).fetchall()
    assert rows == [("late", 0.0, 2.0)]
    store.close()


def _record(run_id: str) -> ReplayRecord:
    return ReplayRecord(run_id, "verified", [], 0, 0, 1, False, time.time_ns())


def _insert_execution(cursor: duckdb.DuckDBPyConnection, run_id: str, start: int) -> None:
    cursor.execute(
        "INSERT INTO executions (run_id, kind, name, service, trace_id, span_id,"
        " parent_span_id, status, status_message, start_unix_nano, end_unix_nano,"
        " received_unix_nano) VALUES (?, 'workflow', 'W', 's', 't', 's', '', 'ok', '',"
        " ?, ?, 0)",
        [run_id, start, start + 1],
    )


def _store_matches(store: Store, where: str) -> list[str]:
    return [row.run_id for row in store.search(execution_query({"where": where}))]


def test_pruning_a_trace_deletes_its_ranges(tmp_path: Path) -> None:
    store = Store(tmp_path / "prune.duckdb")
    with store._cursor() as cursor:
        _insert_execution(cursor, "gone", 1)
    store.save_replays([_record("gone")], [index_rows("gone", {"n": 0}, {"n": 5})])
    with store._cursor() as cursor:
        counts = delete_traces(cursor, ["t"])
        left = cursor.execute("SELECT count(*) FROM field_ranges").fetchall()
    assert counts.field_ranges == 1 and counts.field_values == 2  # 0, then 5
    assert left == [(0,)]
    store.close()


# --- field-filtered pages: recent runs first, every run when that falls short ----


def test_filtered_pages_are_the_same_whatever_the_recent_window(tmp_path: Path) -> None:
    """Arrival order differs from start order; every window size gives the same pages."""
    store = Store(tmp_path / "window.duckdb")
    starts = [(n * 7919) % 40 for n in range(40)]  # a permutation of 0..39, arrival order
    with store._cursor() as cursor:
        for n, start in enumerate(starts):
            _insert_execution(cursor, f"run-{n:02d}", 1_000 * start)
        insert_field_rows(
            cursor,
            [index_rows(f"run-{n:02d}", {"k": 0}, {"k": n % 5}, [("/k", n)]) for n in range(40)],
        )
    cases: tuple[tuple[str, Callable[[int], bool]], ...] = (
        ("ever k >= 30", lambda n: n >= 30),
        ("ever k >= 1 and not k = 2", lambda n: n >= 1 and n % 5 != 2),
        ("k = 4", lambda n: n % 5 == 4),
    )
    for where, wanted in cases:
        matching = [(f"run-{n:02d}", 1_000 * starts[n]) for n in range(40) if wanted(n)]
        expected = [run_id for run_id, _ in sorted(matching, key=lambda r: (-r[1], r[0]))]
        for recent_runs in (0, 1, 3, 8, 1_000):
            assert _paged(store, where, recent_runs) == expected, (where, recent_runs)
    store.close()


def _paged(store: Store, where: str, recent_runs: int) -> list[str]:
    seen: list[str] = []
    params = {"where": where, "limit": "3"}
    with store._cursor() as cursor:
        while True:
            query = execution_query(params)
            rows = listing.search(cursor, query, recent_runs=recent_runs)
            seen += [row.run_id for row in rows[:3]]
            following = next_cursor(rows, query)
            if following is None:
                return seen
            params["cursor"] = following
