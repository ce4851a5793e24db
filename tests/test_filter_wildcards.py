"""`[*]` (any element) and `[-1]` (the last) in filters, run against a real DuckDB store.

The histories are hand-made (start, the values written, end) and indexed as
replay indexes them; the queries go through the parser and the SQL compiler.
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pytest
from test_filters_sql import _History, _index_connection, _matches

from collector.index.query import parse_query
from collector.index.query_ast import ANY, Path, shape_of
from collector.store import field_catalog
from collector.store.filters import child_paths, compile_filter, final_matches, key64, kinds_at

_HISTORIES: dict[str, _History] = {
    # Items are objects; the last message was a tool's in one state, never at the end.
    "objects": (
        {"items": [], "messages": []},
        [
            ("/items", [{"sku": "laser", "qty": 2}]),
            ("/messages", [{"role": "user"}]),
            ("/messages", [{"role": "user"}, {"role": "tool"}]),
        ],
        {
            "items": [{"sku": "laser", "qty": 2}, {"sku": "toner", "qty": 1}],
            "messages": [{"role": "user"}, {"role": "tool"}, {"role": "assistant"}],
        },
    ),
    # Items are strings; a tool message was never the last one.
    "strings": (
        {"items": [], "messages": []},
        [("/messages", [{"role": "tool"}, {"role": "user"}])],
        {"items": ["laser", "paper"], "messages": [{"role": "tool"}, {"role": "user"}]},
    ),
    # Arrays in arrays; `items` an object whose key is spelled like an index.
    "nested": (
        {},
        [],
        {
            "orders": [{"lines": [{"sku": "a"}, {"sku": "laser"}]}, {"lines": []}],
            "boxes": [{"tags": {"x": "eu"}}, {"tags": ["us"]}],
            "items": {"0": {"sku": "laser"}},
        },
    ),
    "empty": ({}, [], {"items": [], "messages": []}),
    # Keys full of what RE2 and RFC 6901 treat specially, one spelled like `[-1]`'s token.
    "hostile": (
        {},
        [],
        {"rows": [{"a.b(c)*": 1, "aXb(c)": 2}], "k": {"~-1": 5}, "y": [1, 5]},
    ),
}


@pytest.fixture(scope="module")
def conn() -> Iterator[duckdb.DuckDBPyConnection]:
    connection = _index_connection(_HISTORIES)
    yield connection
    connection.close()


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        # The complaint: `contains` sees only scalar elements.
        ('items contains "laser"', {"strings"}),
        ('items[*].sku = "laser"', {"objects", "nested"}),  # "0" is read as an index too
        ('items[*] = "laser"', {"strings"}),
        ('items[*] contains "ase"', {"strings"}),
        # `!=`: some element differs; `not ... =`: no element equals.
        ('items[*].sku != "laser"', {"objects"}),
        ('not items[*].sku = "laser"', {"strings", "empty", "hostile"}),
        ("items[*].sku exists", {"objects", "nested"}),
        ("items[*].sku missing", {"strings", "empty", "hostile"}),
        ("items[*].qty >= 2", {"objects"}),
        ("items[*].qty < 2", {"objects"}),
        ("items[*].qty > 2", set()),
        ('items[*].sku < "m"', {"objects", "nested"}),
        ('orders[*].lines[*].sku = "laser"', {"nested"}),
        ('orders[*].lines[-1].sku = "laser"', {"nested"}),
        ('orders[*].lines[-1].sku = "a"', set()),
        ("orders[-1].lines[*] exists", set()),
        ("orders[-1].lines exists", {"nested"}),
        ('orders[*].lines contains "laser"', set()),
        # The element of one item's array, never another item's member.
        ('boxes[*].tags contains "us"', {"nested"}),
        ('boxes[*].tags contains "eu"', set()),
        ('messages[-1].role = "assistant"', {"objects"}),
        ('messages[-1].role = "tool"', set()),
        ('messages[-1].role != "user"', {"objects"}),
        ("messages[-1] exists", {"objects", "strings"}),
        ("messages[-1] missing", {"nested", "empty", "hostile"}),
        ('items[-1] = "paper"', {"strings"}),
        ('rows[*]."a.b(c)*" = 1', {"hostile"}),
        ('rows[*]."a.b(c)*" = 2', set()),
        ('k."~-1" = 5', {"hostile"}),
        ("y[-1] = 5", {"hostile"}),
        ("y[*] = 1 and y[-1] != 1", {"hostile"}),
    ],
)
def test_wildcards_match_in_the_end_state(
    conn: duckdb.DuckDBPyConnection, query: str, expected: set[str]
) -> None:
    assert _matches(conn, query) == expected


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        # The last element of each state the run passed through, not any element.
        ('ever messages[-1].role = "tool"', {"objects"}),
        ('ever messages[*].role = "tool"', {"objects", "strings"}),
        ('ever messages[-1].role = "user"', {"objects", "strings"}),
        ("ever items[*].qty >= 2", {"objects"}),
        ("ever items[*].qty > 2", set()),
        ('ever items[*].sku missing', {"strings", "empty", "hostile"}),
        ('ever messages[-1].role = "tool" and not messages[-1].role = "tool"', {"objects"}),
    ],
)
def test_wildcards_in_ever_see_every_state(
    conn: duckdb.DuckDBPyConnection, query: str, expected: set[str]
) -> None:
    assert _matches(conn, query) == expected


def test_a_wildcard_filter_reads_its_parents_shape_slice_first() -> None:
    """The parent's shape key leads the index's sort key: `[*]` binds it first, so zone
    maps skip every other path's rows; concrete paths bind it too."""
    for text, parent in (('items[*].sku = "x"', "/items/~*"), ('items[3].sku = "x"', "/items/~*"),
                         ('messages[-1].role = "x"', "/messages/~-1")):
        sql, params = compile_filter(parse_query(text))
        assert "v.parent_shape_key = ?" in sql
        assert params[0] == key64(parent)
        assert shape_of("/items/3") == "/items/~*"


def test_a_pattern_answers_kinds_children_and_previews(
    conn: duckdb.DuckDBPyConnection,
) -> None:
    assert kinds_at(conn, Path(("items", ANY))) == {"object", "string"}
    assert kinds_at(conn, Path(("items", ANY, "sku"))) == {"string"}
    # The second row of a last element is no child anyone typed.
    assert child_paths(conn, Path(("messages",)), 10) == [
        "/messages/0", "/messages/1", "/messages/2"
    ]
    assert child_paths(conn, Path(("orders", ANY)), 10) == ["/orders/0/lines", "/orders/1/lines"]
    previews = final_matches(conn, ["objects", "strings", "empty"], Path(("items", ANY)), 1)
    assert set(previews) == {"objects", "strings"}
    assert previews["strings"].first == (("string", "laser"),)
    assert previews["strings"].count == 2


def test_suggestions_collapse_indices_and_leave_out_last_element_rows(
    conn: duckdb.DuckDBPyConnection,
) -> None:
    keys = [row[0] for row in conn.execute("SELECT run_key FROM executions").fetchall()]
    paths = {p.pointer: p for p in field_catalog.paths_in(conn, keys)}
    assert paths["/items/~*/sku"].runs == 2  # objects and nested
    assert paths["/orders/~*/lines/~*/sku"].kinds == ("string",)
    assert not [pointer for pointer in paths if "/0" in pointer or "/1" in pointer]
    assert not [pointer for pointer in paths if "~-1" in pointer and pointer != "/k/~0-1"]
    values = field_catalog.values_at(conn, Path(("items", ANY, "sku")), keys)
    assert [(v.value, v.runs) for v in values] == [
        (("string", "laser"), 2), (("string", "toner"), 1)
    ]
