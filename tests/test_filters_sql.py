"""Compiled filters run against a real DuckDB holding hand-made executions."""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pytest

from collector.fieldindex import ABSENT, JsonValue, index_rows
from collector.query import parse_query
from collector.store.filters import (
    FIELD_INDEX_DDL,
    compact_field_index,
    compile_filter,
    delete_field_rows,
    insert_field_rows,
)

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
    connection.execute("CREATE TABLE executions (run_id VARCHAR PRIMARY KEY)")
    connection.executemany("INSERT INTO executions VALUES (?)", [[r] for r in _HISTORIES])
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
    insert_field_rows(conn, [index_rows("late", ABSENT, {"attempts": 9})])
    conn.execute("INSERT INTO executions VALUES ('late')")
    (before,) = conn.execute("SELECT count(*) FROM field_values").fetchall()[0]
    compact_field_index(conn)
    (after,) = conn.execute("SELECT count(*) FROM field_values").fetchall()[0]
    assert after == before
    assert _matches(conn, "attempts > 2") == {"approved", "late"}
