"""Flattening states into field-index rows: nodes, history, dedup, the row cap."""

from __future__ import annotations

from collector.index.fields import (
    ABSENT,
    Absent,
    FieldRow,
    JsonValue,
    Nodes,
    index_nodes,
    index_rows,
)


def _by_path(rows: tuple[FieldRow, ...]) -> dict[str, list[FieldRow]]:
    grouped: dict[str, list[FieldRow]] = {}
    for row in rows:
        grouped.setdefault(row.path, []).append(row)
    return grouped


def test_index_rows_flattens_every_node_of_the_final_state() -> None:
    state: JsonValue = {"refund": {"eligible": True, "amount": 12.5}, "tags": ["a", None], "n": 3}
    index = index_rows("r1", ABSENT, state)
    assert index.run_id == "r1"
    assert not index.truncated
    assert set(index.rows) == {
        FieldRow("/refund", "", "object", None, None, None, True),
        FieldRow("/refund/eligible", "/refund", "bool", None, None, True, True),
        FieldRow("/refund/amount", "/refund", "number", 12.5, None, None, True),
        FieldRow("/tags", "", "array", None, None, None, True),
        FieldRow("/tags/0", "/tags", "string", None, "a", None, True),
        FieldRow("/tags/1", "/tags", "null", None, None, None, True),
        # The last element again, as `tags[-1]` reads it.
        FieldRow("/tags/~-1", "/tags", "null", None, None, None, True),
        FieldRow("/n", "", "number", 3.0, None, None, True),
    }


def test_index_rows_escapes_keys_as_json_pointers() -> None:
    index = index_rows("r1", ABSENT, {"meta": {"extra/key~": 1}})
    assert "/meta/extra~1key~0" in _by_path(index.rows)


def test_index_rows_treats_booleans_as_bool_not_number() -> None:
    (row,) = index_rows("r1", ABSENT, {"ok": False}).rows
    assert (row.kind, row.flag, row.num) == ("bool", False, None)


def test_index_rows_adds_history_from_start_and_touched_subtrees() -> None:
    start: JsonValue = {"attempts": 0, "status": "queued"}
    touched: list[tuple[str, JsonValue | Absent]] = [
        ("/attempts", 1),
        ("/status", "running"),
        ("/attempts", 2),
        ("/result", {"code": 7}),
        ("/result", ABSENT),
        ("/status", "done"),
    ]
    final: JsonValue = {"attempts": 2, "status": "done"}
    rows = _by_path(index_rows("r1", start, final, touched).rows)
    assert sorted((r.num, r.is_final) for r in rows["/attempts"]) == [
        (0.0, False),
        (1.0, False),
        (2.0, True),
    ]
    assert sorted((r.text, r.is_final) for r in rows["/status"]) == [
        ("done", True),
        ("queued", False),
        ("running", False),
    ]
    assert [(r.kind, r.is_final) for r in rows["/result"]] == [("object", False)]
    assert [(r.num, r.parent) for r in rows["/result/code"]] == [(7.0, "/result")]


def test_index_rows_keeps_one_row_for_a_value_seen_again_in_the_final_state() -> None:
    rows = index_rows("r1", {"x": 1}, {"x": 1}, [("/x", 1), ("/x", 1.0)]).rows
    assert rows == (FieldRow("/x", "", "number", 1.0, None, None, True),)


def test_index_rows_accepts_a_touched_root() -> None:
    rows = _by_path(index_rows("r1", ABSENT, {}, [("", {"a": {"b": 1}})]).rows)
    assert set(rows) == {"/a", "/a/b"}


def test_index_rows_caps_rows_and_keeps_final_state_first() -> None:
    start: JsonValue = {f"old{i}": i for i in range(10)}
    final: JsonValue = {f"k{i}": i for i in range(10)}
    index = index_rows("r1", start, final, max_rows=12)
    assert index.truncated
    assert len(index.rows) == 12
    assert sum(row.is_final for row in index.rows) == 10


def test_index_rows_survives_deep_nesting_and_odd_values() -> None:
    deep: JsonValue = None
    for _ in range(2000):
        deep = {"d": deep}
    state: JsonValue = {"deep": deep, "big": 10**400, "bad": "\ud800"}
    rows = _by_path(index_rows("r1", ABSENT, state).rows)
    assert rows["/big"][0].num == float("inf")
    assert rows["/bad"][0].text == "\\ud800"
    assert len(rows) == 2003


def test_nodes_keep_a_value_as_it_was_when_added() -> None:
    # Replay patches one working document in place; what was indexed must not follow.
    inner: dict[str, JsonValue] = {"x": 2}
    touched = Nodes()
    touched.add("/a", inner)
    inner["x"] = 3
    index = index_nodes("r1", ABSENT, {"a": inner}, touched)
    values = {(row.path, row.num, row.is_final) for row in index.rows}
    assert ("/a/x", 2.0, False) in values
    assert ("/a/x", 3.0, True) in values


def test_nodes_past_the_cap_mark_the_index_truncated_and_keep_final_rows() -> None:
    touched = Nodes(max_rows=3)
    touched.add("/t", [1, 2, 3, 4])
    assert touched.overflowed
    index = index_nodes("r1", ABSENT, {"f": 1}, touched)
    assert index.truncated
    assert [row.path for row in index.rows if row.is_final] == ["/f"]


def test_index_rows_keys_a_written_lone_surrogate_as_the_state_keys_its_member() -> None:
    # JSON may name a member "\ud800"; a patch that wrote it names the same node.
    final: JsonValue = {"\ud800": {"b": 1}}
    index = index_rows("r1", ABSENT, final, [("/\ud800", {"b": 1}), ("/\ud800/b", 1)])
    assert [(row.path, row.parent, row.is_final) for row in index.rows] == [
        ("/\\ud800", "", True),
        ("/\\ud800/b", "/\\ud800", True),
    ]
    for row in index.rows:
        row.path.encode("utf-8")
        row.parent.encode("utf-8")


def test_nodes_clean_the_pointer_of_elements_added_under_a_lone_surrogate() -> None:
    touched = Nodes()
    touched.add_elements("/\ud800~1x", ["\udfff"], 0)
    ((path, parent, kind, _, text, _),) = touched.keys
    assert (path, parent, kind, text) == ("/\\ud800~1x/0", "/\\ud800~1x", "string", "\\udfff")
