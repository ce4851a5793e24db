"""Property tests: replay agrees with applying the same patches directly."""

from __future__ import annotations

import json
from typing import Any

import jsonpatch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.history_records import pointers, scenario

from collector.index.fields import ABSENT, Absent, JsonValue, Nodes, index_rows
from collector.index.indexing import TouchedValues, field_index
from collector.model import Execution, Transition
from collector.replay.jsondoc import MISSING, JsonPatchOp, changed_paths, json_equal, resolve
from collector.replay.provenance import provenance
from collector.replay.walk import replay

KEYS = st.sampled_from(["a", "b", "c", "x/y", "t~n", ""])
SCALARS = st.none() | st.booleans() | st.integers(-5, 5) | st.text("ab~/", max_size=3)
DOCUMENTS = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children, max_size=4),
    max_leaves=12,
)
ROOTS = st.dictionaries(KEYS, DOCUMENTS, max_size=5)


def execution(start: Any, end: Any, count: int) -> Execution:
    return Execution(
        run_id="run", kind="workflow", name="Prop", service="prop", trace_id="t" * 32,
        span_id="s" * 16, parent_span_id="", parent_run_id=None, status="ok",
        status_message="", error_type=None, start_unix_nano=0, end_unix_nano=1,
        store_id="store", parent_store_id=None, state_start=json.dumps(start),
        state_start_mode="full", state_start_policy="junjo.full.v1",
        state_end=json.dumps(end), state_end_mode="full", state_end_policy="junjo.full.v1",
        revision_start=0, revision_end=count, transition_start=0, transition_end=count,
        transition_count=count, reconstructable=True, graph_snapshot=None,
        contract_version=3, definition_id=None, structural_id=None, cancelled_reason=None,
        correlation_type=None, correlation_id=None, application_store_id=None,
        application_transition_start=None, application_transition_end=None,
    )  # fmt: skip


def transition(sequence: int, patch: str) -> Transition:
    return Transition(
        store_id="store", sequence=sequence, store_name="PropStore", action="set",
        revision_before=sequence - 1, revision_after=sequence, patch_json=patch,
        patch_mode="full", patch_policy="junjo.full.v1", event_id=f"e{sequence}",
        trace_id="t" * 32, span_id="n" * 16, event_index=0, time_unix_nano=sequence,
        contract_version=3, span_name="PropNode",
    )  # fmt: skip


def chain(documents: list[Any]) -> tuple[Execution, list[Transition], list[Any]]:
    """Patches between consecutive documents, and the states direct application gives."""
    states = [documents[0]]
    transitions = []
    for sequence, target in enumerate(documents[1:], start=1):
        patch = jsonpatch.make_patch(states[-1], target)
        states.append(patch.apply(states[-1]))
        transitions.append(transition(sequence, patch.to_string()))
    return execution(states[0], states[-1], len(transitions)), transitions, states


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents=st.lists(ROOTS, min_size=1, max_size=12), data=st.data())
def test_replay_property_matches_direct_application(documents: list[Any], data: Any) -> None:
    execution_, transitions, states = chain(documents)

    history = replay(execution_, transitions)

    assert history.verdict == "verified", history.diagnostics
    k = data.draw(st.integers(0, len(states) - 1), label="k")
    assert json_equal(history.state_at(k), states[k])
    assert all(json_equal(history.state_at(i), state) for i, state in enumerate(states))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents=st.lists(ROOTS, min_size=2, max_size=8), data=st.data())
def test_changes_property_after_values_are_what_each_op_wrote(
    documents: list[Any], data: Any
) -> None:
    execution_, transitions, states = chain(documents)
    history = replay(execution_, transitions)
    k = data.draw(st.integers(1, len(states) - 1), label="k")

    patch = json.loads(transitions[k - 1].patch_json)
    changes = history.changes(k)

    assert [change.op for change in changes] == [op["op"] for op in patch]
    for change, op in zip(changes, patch, strict=True):
        if op["op"] in ("add", "replace"):
            assert json_equal(change.after, op["value"])
        if op["op"] == "remove":
            assert change.after is MISSING


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents=st.lists(ROOTS, min_size=2, max_size=8), key=KEYS)
def test_provenance_property_last_writer_holds_the_final_value(
    documents: list[Any], key: str
) -> None:
    execution_, transitions, states = chain(documents)
    pointer = "/" + key.replace("~", "~0").replace("/", "~1")

    result = provenance(replay(execution_, transitions), pointer)

    final = states[-1].get(key, "absent")
    initial = states[0].get(key, "absent")
    if result.last_writer is None:
        assert json_equal(final, initial)
    else:
        # The last write holds its value at the end: the field's own value, or
        # for a write inside the field the value at the path it wrote (after a
        # removal from a list, the next element moves up into that path).
        last = result.last_writer
        if last.relation != "descendant":
            assert json_equal("absent" if last.after is MISSING else last.after, final)
        elif last.op == "remove":
            assert last.after is MISSING and last.before is not MISSING
        else:
            assert json_equal(last.after, resolve(states[-1], last.value_path))
    changed_steps = {e.sequence for e in result.entries if e.changed}
    for sequence in range(1, len(states)):
        before = states[sequence - 1].get(key, "absent")
        after_state = states[sequence].get(key, "absent")
        if not json_equal(before, after_state):
            assert sequence in changed_steps


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents=st.lists(ROOTS, min_size=1, max_size=8))
def test_field_index_property_holds_every_node_of_every_state(documents: list[Any]) -> None:
    """`ever` sees exactly the (path, value) pairs of the states the history passed through.

    Found by this test: values patched in place after they were indexed, and
    array elements moved by an insert or a removal, were missing.
    """
    execution_, transitions, states = chain(documents)

    _assert_index_holds_every_state(execution_, transitions, states)


def _nodes(state: Any) -> set[tuple[Any, ...]]:
    return {(r.path, r.kind, r.num, r.text, r.flag) for r in index_rows("run", ABSENT, state).rows}


def _assert_index_holds_every_state(
    execution_: Execution, transitions: list[Transition], states: list[Any]
) -> None:
    """The index, walked or watched, is exactly the nodes of every state; its final rows
    exactly the end state's."""
    index = field_index(replay(execution_, transitions), "run")
    touched = TouchedValues()  # the replayer's way: watch the replay, no second walk
    watched = replay(execution_, transitions, on_applied=touched)
    assert field_index(watched, "run", touched.nodes) == index
    every_state = set().union(*(_nodes(state) for state in states))
    assert {(r.path, r.kind, r.num, r.text, r.flag) for r in index.rows} == every_state
    final = _nodes(states[-1])
    assert {(r.path, r.kind, r.num, r.text, r.flag) for r in index.rows if r.is_final} == final


def test_field_index_counts_every_append_when_one_patch_appends_twice() -> None:
    # RFC 6902 `-` appends: both name `/items/-`, and both elements are new.
    execution_, transitions, _ = scenario(
        {"items": []},
        [
            [{"op": "add", "path": "/items/-", "value": "y"},
             {"op": "add", "path": "/items/-", "value": "z"}],
            [{"op": "replace", "path": "/items", "value": ["q"]}],
        ],
    )
    walked = field_index(replay(execution_, transitions), "run")
    touched = TouchedValues()
    watched = field_index(replay(execution_, transitions, on_applied=touched), "run",
                          touched.nodes)
    for index in (walked, watched):
        ever = {(r.path, r.text) for r in index.rows}
        assert {("/items/0", "y"), ("/items/1", "z"), ("/items/0", "q")} <= ever


def test_field_index_keeps_an_append_that_a_later_insert_moved() -> None:
    # `-` appends "y" at 0; inserting "z" at 1 then leaves "y" below the last slot.
    execution_, transitions, _ = scenario(
        {"items": []},
        [[{"op": "add", "path": "/items/-", "value": "y"},
          {"op": "add", "path": "/items/1", "value": "z"}],
         [{"op": "replace", "path": "/items", "value": []}]],
    )
    touched = TouchedValues()
    for index in (
        field_index(replay(execution_, transitions), "run"),
        field_index(replay(execution_, transitions, on_applied=touched), "run", touched.nodes),
    ):
        assert {("/items/0", "y"), ("/items/1", "z")} <= {(r.path, r.text) for r in index.rows}


class _CountingNodes(Nodes):
    __slots__ = ("added",)

    def __init__(self) -> None:
        super().__init__()
        self.added = 0

    def add(self, pointer: str, value: JsonValue | Absent) -> None:
        self.added += 1
        super().add(pointer, value)

    def add_elements(self, pointer: str, array: list[JsonValue], first: int) -> None:
        self.added += len(array) - first  # each element read, as `add` would count it
        super().add_elements(pointer, array, first)


def test_field_index_reads_each_moved_element_once_per_patch() -> None:
    # Junjo fills an empty list with one `add /list/i` op per element; each op
    # shifts the elements after it, and reading them per op was N²/2 reads.
    size = 2_000
    ops: list[JsonPatchOp] = [{"op": "add", "path": f"/nums/{i}", "value": i} for i in range(size)]
    touched = TouchedValues()
    counting = _CountingNodes()
    touched.nodes = counting
    touched(ops, changed_paths(ops), {"nums": list(range(size))})
    assert counting.added == size + 1  # and the last element once more, as nums[-1]
    assert ("/nums/~-1", "/nums", "number", size - 1.0, None, None) in counting.keys
    assert {key[0] for key in counting.keys} >= {f"/nums/{i}" for i in range(size)}


# --- hand-built patches: the ops jsonpatch.make_patch never emits -------------------------

SMALL = st.none() | st.integers(0, 3) | st.lists(st.integers(0, 3), max_size=3)


def _containers(doc: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if not isinstance(doc, dict | list):
        return []
    found: list[tuple[str, Any]] = [(prefix, doc)]
    items = doc.items() if isinstance(doc, dict) else enumerate(doc)
    for key, value in items:
        token = str(key).replace("~", "~0").replace("/", "~1")
        found += _containers(value, f"{prefix}/{token}")
    return found


@st.composite
def _patch(draw: st.DrawFn, doc: Any) -> tuple[list[dict[str, Any]], Any]:
    """Up to six ops valid in turn: inserts at an index or `-`, removes, moves (also
    within one array), copies and replaces, as RFC 6902 allows and Junjo may not send."""
    ops: list[dict[str, Any]] = []
    current = doc
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["add", "append", "remove", "replace", "move", "copy"]))
        paths = [p for p in pointers(current) if p]
        target, container = draw(st.sampled_from(_containers(current)))
        if isinstance(container, list):
            slot = "-" if kind == "append" else str(draw(st.integers(0, len(container))))
        else:
            slot = draw(st.sampled_from(["a", "b", "z"]))
        if kind in ("add", "append"):
            op: dict[str, Any] = {"op": "add", "path": f"{target}/{slot}", "value": draw(SMALL)}
        elif not paths:
            continue
        elif kind in ("remove", "replace"):
            op = {"op": kind, "path": draw(st.sampled_from(paths))}
            if kind == "replace":
                op["value"] = draw(SMALL)
        else:
            op = {"op": kind, "from": draw(st.sampled_from(paths)), "path": f"{target}/{slot}"}
        try:
            current = jsonpatch.apply_patch(current, [op])
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException):
            continue
        ops.append(op)
    return ops, current


def _hand_built_chain(
    data: st.DataObject, start: dict[str, Any]
) -> tuple[Execution, list[Transition], list[Any]]:
    """One to four steps of `_patch` ops from `start`, and the states they lead through."""
    states, patches = [start], []
    for _ in range(data.draw(st.integers(1, 4))):
        ops, after = data.draw(_patch(states[-1]))
        if ops:
            patches.append(ops)
            states.append(after)
    execution_, transitions, _ = scenario(start, patches)
    return execution_, transitions, states


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), start=st.dictionaries(st.sampled_from("abc"), DOCUMENTS, max_size=3))
def test_field_index_property_holds_every_node_under_any_rfc6902_ops(
    data: st.DataObject, start: dict[str, Any]
) -> None:
    execution_, transitions, states = _hand_built_chain(data, start)

    history = replay(execution_, transitions)
    assert history.verdict == "verified", history.diagnostics
    _assert_index_holds_every_state(execution_, transitions, states)


def _assert_writers_are_the_changing_steps(
    execution_: Execution, transitions: list[Transition], states: list[Any], pointer: str
) -> None:
    result = provenance(replay(execution_, transitions), pointer)
    values = [resolve(state, pointer) for state in states]
    changing = [s for s in range(1, len(states)) if not json_equal(values[s - 1], values[s])]
    assert sorted({e.sequence for e in result.entries if e.changed}) == changing
    last = result.last_writer
    assert (last.sequence if last else None) == (changing[-1] if changing else None)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents=st.lists(ROOTS, min_size=2, max_size=8), data=st.data())
def test_provenance_property_writers_are_exactly_the_steps_that_changed_the_value(
    documents: list[Any], data: Any
) -> None:
    """Any node of any state, nested or the whole state: its writers are the steps that
    changed it, and the last of them is its last writer."""
    execution_, transitions, states = chain(documents)
    pointer = data.draw(
        st.sampled_from(sorted({p for state in states for p in pointers(state)})), label="pointer"
    )
    _assert_writers_are_the_changing_steps(execution_, transitions, states, pointer)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), start=st.dictionaries(st.sampled_from("abc"), DOCUMENTS, max_size=3))
def test_provenance_property_writers_are_the_changing_steps_under_any_rfc6902_ops(
    data: st.DataObject, start: dict[str, Any]
) -> None:
    """Found by the live random runs: JSON Patch list diffs write an index and put its
    value back within one step (`add /items/0`, then `move /items/1` to the end),
    which counted as a change. Hand-built patches do that far more often."""
    execution_, transitions, states = _hand_built_chain(data, start)
    pointer = data.draw(
        st.sampled_from(sorted({p for state in states for p in pointers(state)})), label="pointer"
    )
    _assert_writers_are_the_changing_steps(execution_, transitions, states, pointer)
