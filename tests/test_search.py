"""Free-text search: the parser, its routing beside the filter language, and its SQL
against a real DuckDB file holding hand-made executions, spans and end states."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from collector.index.fields import JsonValue, index_rows
from collector.index.query import QueryError
from collector.index.query_ast import Compare
from collector.index.search import SearchTerm, parse_search
from collector.store import listing
from collector.store.filters import insert_field_rows
from collector.store.migrations import apply_migrations
from collector.store.text_search import compile_search, search_window
from studio.params import BadParameter, execution_query

# --- the parser ------------------------------------------------------------------


def test_parse_search_splits_words_and_keeps_quoted_phrases_whole() -> None:
    terms = parse_search('T-1007  "timed out" Ada').terms
    assert terms == (SearchTerm("T-1007"), SearchTerm("timed out"), SearchTerm("Ada"))


def test_parse_search_reads_known_keys_and_state_paths() -> None:
    terms = parse_search('Status:failed error:"timed out" customer.name:ada').terms
    assert terms == (
        SearchTerm("failed", "status"),
        SearchTerm("timed out", "error"),
        SearchTerm("ada", "customer.name", "/customer/name"),
    )


def test_parse_search_takes_a_colon_that_follows_no_name_as_text() -> None:
    assert parse_search("12:30 http://x").terms == (SearchTerm("12:30"), SearchTerm("http://x"))


@pytest.mark.parametrize(
    ("text", "message", "position"),
    [
        ('"timed out', "never closed", 0),
        ('node:"x', "never closed", 5),
        ("status:", "needs a value", 7),
        ('a "" b', "empty phrase", 2),
        ('ab"cd"', "quote inside a word", 2),
        ('title == "x"', "is a comparison", 6),
    ],
)
def test_parse_search_says_why_text_is_not_a_search(
    text: str, message: str, position: int
) -> None:
    with pytest.raises(QueryError) as caught:
        parse_search(text)
    assert message in caught.value.message
    assert caught.value.position == position


def test_q_is_a_filter_when_it_parses_as_one() -> None:
    query = execution_query({"q": "refund.eligible = true"})
    assert isinstance(query.where, Compare)
    assert query.text is None


def test_q_is_a_search_when_it_is_not_a_filter() -> None:
    query = execution_query({"q": "T-1007"})
    assert query.where is None
    assert query.text is not None and query.text.terms == (SearchTerm("T-1007"),)


def test_where_stays_the_filter_language_only() -> None:
    with pytest.raises(BadParameter) as caught:
        execution_query({"where": "T-1007"})
    assert caught.value.name == "where"
    assert "not a search" not in caught.value.message


def test_text_that_is_neither_says_what_it_tried() -> None:
    with pytest.raises(BadParameter) as caught:
        execution_query({"q": 'error:"timed out'})
    message = caught.value.message
    assert message.startswith("not a filter: ")
    assert "not a search: this quote is never closed (at character 6)" in message
    assert caught.value.position is not None


# --- the store -------------------------------------------------------------------

RUNS: dict[str, tuple[str, str, str, str, JsonValue, list[str]]] = {
    # run id: (workflow, status, status message, trace id, end state, node names)
    "Refund0001abc": (
        "Refund Workflow", "ok", "", "aa" * 16,
        {"ticket": "T-1007", "customer": {"name": "Ada Lovelace"}, "amount": 12.5},
        ["check_eligibility", "approve"],
    ),
    "Refund0002xyz": (
        "Refund Workflow", "error", "upstream call timed out after 30 s", "bb" * 16,
        {"ticket": "T-2001", "customer": {"name": "Grace Hopper"}, "eligible": True},
        ["check_eligibility"],
    ),
    "Triage0003pqr": (
        "Triage Workflow", "ok", "", "cc" * 16,
        {"note": "100% done_well", "customer": {"name": "Ada Byron"}},
        ["route_ticket"],
    ),
}  # fmt: skip


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    connection = duckdb.connect(str(tmp_path / "search.duckdb"))
    apply_migrations(connection)
    for index, (run_id, (name, status, message, trace, _, nodes)) in enumerate(RUNS.items()):
        connection.execute(
            "INSERT INTO executions (run_id, kind, name, service, trace_id, span_id,"
            " parent_span_id, status, status_message, start_unix_nano, end_unix_nano,"
            " received_unix_nano) VALUES (?, 'workflow', ?, 'shop', ?, 's', '', ?, ?, ?, ?, 0)",
            [run_id, name, trace, status, message, index, index + 1],
        )
        for node in nodes:
            connection.execute(
                "INSERT INTO spans (trace_id, span_id, parent_span_id, name, kind,"
                " start_unix_nano, end_unix_nano, status_code, status_message, resource_key,"
                " service_name, scope_name, span_type, junjo_runtime_id,"
                " junjo_parent_runtime_id, dropped_attributes_count, dropped_events_count,"
                " dropped_links_count, event_count, received_unix_nano, raw) VALUES"
                " (?, ?, 's', ?, 1, ?, ?, 0, '', 'r', 'shop', 'junjo', 'node', ?, ?,"
                " 0, 0, 0, 0, 0, ''::BLOB)",
                [trace, f"{run_id}-{node}", node, index, index + 1, f"{run_id}-{node}", run_id],
            )
    insert_field_rows(
        connection,
        [index_rows(run_id, {}, final, []) for run_id, (*_, final, _) in RUNS.items()],
    )
    yield connection
    connection.close()


def _found(conn: duckdb.DuckDBPyConnection, text: str) -> set[str]:
    query = listing.ExecutionQuery(text=parse_search(text), limit=50)
    return {row.run_id for row in listing.search(conn, query)}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("T-1007", {"Refund0001abc"}),  # an end-state string
        ("ada", {"Refund0001abc", "Triage0003pqr"}),  # a substring, any case
        ('"timed out"', {"Refund0002xyz"}),  # the error message
        ("CHECK_ELIG", {"Refund0001abc", "Refund0002xyz"}),  # a node's name
        ("route_ticket", {"Triage0003pqr"}),
        ("Refund0002", {"Refund0002xyz"}),  # a run id's start
        ("bbbbbbbb", {"Refund0002xyz"}),  # a trace id's start
        ("triage", {"Triage0003pqr"}),  # the workflow
        ("ada refund", {"Refund0001abc"}),  # every term must match
        ("status:failed", {"Refund0002xyz"}),
        ("status:ok workflow:refund", {"Refund0001abc"}),
        ("node:approve", {"Refund0001abc"}),
        ('error:"timed out"', {"Refund0002xyz"}),
        ("error:ada", set()),  # keyed terms look in one place only
        ("customer.name:grace", {"Refund0002xyz"}),
        ("amount:12.5", {"Refund0001abc"}),
        ("eligible:true", {"Refund0002xyz"}),
        ("id:Triage", {"Triage0003pqr"}),
        ("verdict:PENDING workflow:triage", {"Triage0003pqr"}),  # none replayed here
        ("100%", {"Triage0003pqr"}),  # wildcards are text, not patterns
        ("done_well", {"Triage0003pqr"}),
        ("i_g", set()),  # as a pattern, it would match "Triage"
        ("nobody-has-this", set()),
    ],
)
def test_search_matches_what_users_know_of_a_run(
    conn: duckdb.DuckDBPyConnection, text: str, expected: set[str]
) -> None:
    assert _found(conn, text) == expected


def test_search_counts_its_matches_in_the_facets(conn: duckdb.DuckDBPyConnection) -> None:
    query = listing.ExecutionQuery(text=parse_search("ada"))
    assert listing.facets(conn, query, ["workflow"])["workflow"] == [
        ("Refund Workflow", 1), ("Triage Workflow", 1)
    ]  # fmt: skip


def test_search_reads_only_end_states(conn: duckdb.DuckDBPyConnection) -> None:
    insert_field_rows(conn, [index_rows("Triage0003pqr", {"was": "T-9999"}, {}, [])])
    assert _found(conn, "T-9999") == set()


def test_older_runs_match_end_state_strings_and_nodes_whole(
    conn: duckdb.DuckDBPyConnection,
) -> None:
    # A window of the one latest run (Triage0003pqr): substrings there, whole values before.
    window = search_window(conn, runs=1)

    def matching(text: str) -> set[str]:
        sql, params = compile_search(parse_search(text), window)
        rows = conn.execute(f"SELECT e.run_id FROM executions e WHERE {sql}", params)
        return {run_id for (run_id,) in rows.fetchall()}

    assert matching("ada") == {"Triage0003pqr"}
    assert matching("ada lovelace") == set()  # two terms, neither a whole value
    assert matching('"ada lovelace"') == {"Refund0001abc"}  # whole, in any case
    assert matching("t-2001") == {"Refund0002xyz"}
    assert matching("eligib") == set()
    assert matching("check_eligibility") == {"Refund0001abc", "Refund0002xyz"}
    assert matching("route") == {"Triage0003pqr"}
    # The other sources are read whole at every age.
    assert matching('"timed out"') == {"Refund0002xyz"}
    assert matching("customer.name:grace") == {"Refund0002xyz"}
