"""Compiled filters run against a real DuckDB holding hand-made executions."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from collector.fieldindex import ABSENT, JsonValue, index_rows
from collector.query import parse_query
from collector.store import Store
from collector.store.filters import (
    FIELD_INDEX_DDL,
    compact_field_index,
    compile_filter,
    delete_field_rows,
    insert_field_rows,
)
from studio.params import encode_cursor, execution_query

# run_id -> (start state, touched (pointer, value after) in order, final state)
_HISTORIES: dict[str, tuple[JsonValue, list[tuple[str, JsonValue]], JsonValue]] = {
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
    connection = duckdb.connect(":memory:")
    for ddl in FIELD_INDEX_DDL:
        connection.execute(ddl)
    # The columns of the store's executions table that the field index joins on.
    connection.execute("CREATE SEQUENCE run_keys START 1")
    connection.execute(
        "CREATE TABLE executions (run_id VARCHAR PRIMARY KEY,"
        " run_key BIGINT DEFAULT nextval('run_keys'))"
    )
    connection.executemany("INSERT INTO executions (run_id) VALUES (?)", [[r] for r in _HISTORIES])
    insert_field_rows(
        connection,
        [
            index_rows(run_id, start, final, touched)
            for run_id, (start, touched, final) in _HISTORIES.items()
        ],
    )
    yield connection
    connection.close()


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


def test_delete_field_rows_removes_only_that_execution(conn: duckdb.DuckDBPyConnection) -> None:
    delete_field_rows(conn, ["approved"])
    assert _matches(conn, "tags exists") == {"denied", "pending"}


def test_compact_field_index_keeps_rows_and_answers(conn: duckdb.DuckDBPyConnection) -> None:
    conn.execute("INSERT INTO executions (run_id) VALUES ('late')")
    insert_field_rows(conn, [index_rows("late", ABSENT, {"attempts": 9})])
    (before,) = conn.execute("SELECT count(*) FROM field_values").fetchall()[0]
    compact_field_index(conn)
    (after,) = conn.execute("SELECT count(*) FROM field_values").fetchall()[0]
    assert after == before
    assert _matches(conn, "attempts > 2") == {"approved", "late"}


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

    seen: list[str] = []
    params = {"where": "n >= 5", "limit": "3"}
    while True:
        rows = store.search(execution_query(params))
        seen += [row.run_id for row in rows[:3]]
        if len(rows) <= 3:
            break
        last = rows[2]
        params["cursor"] = encode_cursor(last.start_unix_nano, last.run_id)
    store.close()
    assert seen == expected
