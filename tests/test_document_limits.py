"""Bounded documents: no state replay builds crosses its limits, whatever the patches do.

The applier (collector/replay/jsondoc.py `DocumentMeter`) is checked against jsonpatch,
op by op, on patches that copy and move from the root and write large values
again and again; replay (collector/replay/walk.py) against a reference that skips
each step jsonpatch says would cross a limit; and a real server against the
export of issue 42 (25 copies of the whole state in one patch). Deep nesting,
in payloads or built by patches, ends in a finding, never an exception.
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import httpx
import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.history_records import make_execution, make_transition, pointers
from support.otlp_craft import ExportRequest, relocated_fixture, spans_of
from support.servers import FIXTURE_API_KEY, MakeServer, Server, export_raw

from collector.config import serve_config
from collector.index.indexing import field_index
from collector.producers import junjo
from collector.replay.history import History, walk
from collector.replay.jsondoc import (
    MAX_JSON_DEPTH,
    PATCH_ERRORS,
    DocumentLimitError,
    DocumentLimits,
    DocumentMeter,
    measure,
    patch_in_place,
)
from collector.replay.provenance import provenance
from collector.replay.snapshot import restore, take
from collector.replay.walk import replay
from studio.inspect import footprint

LIMITS = DocumentLimits(max_bytes=4096, max_nodes=200, max_depth=12)
KEY = [("x-junjo-api-key", FIXTURE_API_KEY)]
# Generous: well above the server at rest, far below what an unbounded replay reaches.
SERVER_HWM_BOUND_KB = 600 * 1024


def copies_from_root(count: int) -> list[dict[str, Any]]:
    return [{"op": "copy", "from": "", "path": f"/a{i}"} for i in range(count)]


def nested(levels: int) -> str:
    return '{"d":' * levels + "1" + "}" * levels


def depth_of(value: Any) -> int:
    """Containers nested in one another, counted without recursion (and without jsondoc)."""
    deepest, level = 0, [value]
    while level := [c for c in level if isinstance(c, dict | list)]:
        deepest += 1
        level = [child for c in level for child in (c.values() if isinstance(c, dict) else c)]
    return deepest


def within(limits: DocumentLimits, doc: Any) -> bool:
    size, nodes, depth = measure(doc)
    return size <= limits.max_bytes and nodes <= limits.max_nodes and depth <= limits.max_depth


def assert_within(limits: DocumentLimits, doc: Any) -> None:
    assert within(limits, doc), measure(doc)
    # Checked apart from `measure` too: the tests' strings need no escapes, so
    # the compact text is no longer than what the meter counts.
    assert len(json.dumps(doc, separators=(",", ":"), ensure_ascii=False)) <= limits.max_bytes
    assert depth_of(doc) <= limits.max_depth


# --- the applier --------------------------------------------------------------------------


def test_document_meter_refuses_the_copy_that_would_cross_before_it_copies() -> None:
    doc: Any = {"x": "y" * 10}
    meter = DocumentMeter(doc, LIMITS)

    with pytest.raises(DocumentLimitError) as refused:
        doc = patch_in_place(doc, copies_from_root(25), meter)

    index = refused.value.op_index
    assert index is not None and 0 < index < 25
    # The ops before it were applied, the refused one was not: the count is the document's.
    assert len(doc) == 1 + index
    assert meter.totals == measure(doc)[:2]
    assert_within(LIMITS, doc)
    crossed = jsonpatch.apply_patch(doc, copies_from_root(25)[index : index + 1])
    assert not within(LIMITS, crossed)


@pytest.mark.parametrize(
    ("limit", "op"),
    [
        ("bytes", {"op": "add", "path": "/big", "value": "x" * 5000}),
        ("nodes", {"op": "add", "path": "/many", "value": list(range(300))}),
        ("depth", {"op": "add", "path": "/a/b", "value": json.loads(nested(11))}),
    ],
)
def test_document_meter_names_the_limit_crossed(limit: str, op: dict[str, Any]) -> None:
    doc: Any = {"a": {"b": 1}}
    meter = DocumentMeter(doc, LIMITS)

    with pytest.raises(DocumentLimitError) as refused:
        patch_in_place(doc, [op], meter)

    assert refused.value.limit == limit
    assert refused.value.reached > refused.value.allowed
    assert str(refused.value.allowed) in str(refused.value).replace(",", "")
    assert doc == {"a": {"b": 1}}


def test_document_meter_counts_what_a_write_replaces_and_removes() -> None:
    doc: Any = {"log": [], "big": ""}
    meter = DocumentMeter(doc, LIMITS)
    # 30 KB written in all, never more than ~3 KB held at once.
    for turn in range(10):
        ops: list[dict[str, Any]] = [
            {"op": "replace", "path": "/big", "value": str(turn) * 3000},
            {"op": "add", "path": "/log/-", "value": turn},
            {"op": "move", "from": "/log/0", "path": "/first"},
            {"op": "remove", "path": "/first"},
        ]
        doc = patch_in_place(doc, ops, meter)
        assert meter.totals == measure(doc)[:2]
    assert doc == {"log": [], "big": "9" * 3000}


# Values that grow a document fast: repeated, large, nested, or the whole document.
BIG_VALUES = st.sampled_from(["x" * 700, list(range(40)), json.loads(nested(5)), {"k": "v" * 300}])
SMALL_VALUES = st.none() | st.integers(0, 9) | st.text("ab", max_size=3)


@st.composite
def hostile_patch(draw: st.DrawFn, doc: Any) -> list[dict[str, Any]]:
    """Up to eight ops against `doc`'s pointers: copies and moves (from "" too), big values."""
    ops: list[dict[str, Any]] = []
    existing = pointers(doc)
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["copy", "copy", "move", "add", "replace", "remove"]))
        at = draw(st.sampled_from(existing))
        slot = draw(st.sampled_from(["/a", "/b", "/0", "/-", ""]))
        if kind in ("copy", "move"):
            source = draw(st.sampled_from(["", *existing]))
            ops.append({"op": kind, "from": source, "path": at + slot})
        elif kind == "remove":
            ops.append({"op": kind, "path": at})
        else:
            value = draw(BIG_VALUES | SMALL_VALUES)
            ops.append({"op": kind, "path": at + slot if kind == "add" else at, "value": value})
    return ops


def reference_apply(doc: Any, ops: list[dict[str, Any]], limits: DocumentLimits) -> Any:
    """jsonpatch, op by op: the document, or "crossed"/"failed" at the first op that does."""
    for op in ops:
        try:
            doc = jsonpatch.apply_patch(doc, [op])
        except PATCH_ERRORS:
            return "failed"
        if not within(limits, doc):
            return "crossed"
    return doc


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), start=st.dictionaries(st.sampled_from("ab"), SMALL_VALUES, max_size=3))
def test_applier_property_agrees_with_jsonpatch_and_never_crosses_a_limit(
    data: st.DataObject, start: dict[str, Any]
) -> None:
    doc: Any = start
    meter = DocumentMeter(doc, LIMITS)
    for _ in range(4):
        ops = data.draw(hostile_patch(doc))
        expected = reference_apply(copy.deepcopy(doc), ops, LIMITS)
        totals, before = meter.totals, copy.deepcopy(doc)
        try:
            doc = patch_in_place(doc, json.loads(json.dumps(ops)), meter)
        except DocumentLimitError:
            # Refused only where jsonpatch crosses the limit (or would refuse the op itself).
            assert expected in ("crossed", "failed"), ops
            doc, outcome = before, "crossed"
            meter.restore(totals)
        except PATCH_ERRORS:
            doc, outcome = before, "failed"
            meter.restore(totals)
        else:
            outcome = doc
        if expected == "crossed":
            assert outcome == "crossed", ops
        else:
            assert outcome == expected, ops
        assert meter.totals == measure(doc)[:2]
        assert_within(LIMITS, doc)


# --- replay -----------------------------------------------------------------------------


def test_replay_refuses_the_step_over_the_limit_and_goes_on_unverified() -> None:
    patches = [
        [{"op": "replace", "path": "/a", "value": "b"}],
        copies_from_root(25),
        [{"op": "replace", "path": "/a", "value": "c"}],
    ]
    execution = make_execution(
        state_start='{"a": "x"}', state_end=None, transition_end=3, revision_end=3,
        transition_count=3,
    )  # fmt: skip
    transitions = [make_transition(i, patch) for i, patch in enumerate(patches, start=1)]

    history = replay(execution, transitions, limits=LIMITS)

    refused = [d for d in history.diagnostics if d.code == "document_limit_exceeded"]
    assert len(refused) == 1
    finding = refused[0]
    assert (finding.severity, finding.sequence) == ("error", 2)
    for words in ("transition 2", 'copy from "" to', "of 25", "--max-state-", "over the limit"):
        assert words in finding.message, finding.message
    assert [(s.applied, s.verified) for s in history.steps] == [
        (True, True), (False, False), (True, False)
    ]
    assert history.verdict == "partial"
    assert history.state_at(2) == {"a": "b"}
    assert history.state_at(3) == {"a": "c"}


def test_replay_reports_later_refusals_once_and_keeps_every_state_within_the_limits() -> None:
    # The same large value, added again and again: the fourth would cross 4096 bytes.
    patches = [[{"op": "add", "path": f"/k{i}", "value": "v" * 1100}] for i in range(8)]
    execution = make_execution(
        state_end=None, transition_end=8, revision_end=8, transition_count=8
    )
    transitions = [make_transition(i, patch) for i, patch in enumerate(patches, start=1)]

    history = replay(execution, transitions, limits=LIMITS)

    refused = [d for d in history.diagnostics if d.code == "document_limit_exceeded"]
    assert [(d.severity, d.sequence) for d in refused] == [("error", 4), ("warning", 5)]
    assert "4 later patches" in refused[1].message
    assert [s.applied for s in history.steps] == [True] * 3 + [False] * 5
    for _, state in walk(history):
        assert_within(LIMITS, state)


def test_replay_does_not_rebuild_a_start_state_over_the_limits() -> None:
    execution = make_execution(state_start=json.dumps({"n": list(range(500))}))

    history = replay(execution, [], limits=LIMITS)

    assert history.verdict == "failed"
    assert not history.has_states
    assert [d.code for d in history.diagnostics if d.severity == "error"] == [
        "document_limit_exceeded"
    ]
    assert "start state" in history.diagnostics[0].message


def test_replay_refuses_nesting_that_patches_build_deeper_than_the_limit() -> None:
    # Each patch is under the parse-side cap, but nests its value at the end of
    # the last one: without the depth limit, the state reached ~1,900 levels.
    patches = [
        f'[{{"op":"add","path":"{"/d" * (1 + 190 * i)}","value":{nested(190)}}}]'
        for i in range(10)
    ]
    transitions = [make_transition(i, text) for i, text in enumerate(patches, start=1)]
    execution = make_execution(
        state_start="{}", state_end=None, transition_end=10, revision_end=10,
        transition_count=10,
    )  # fmt: skip

    history = replay(execution, transitions)

    refused = next(d for d in history.diagnostics if d.code == "document_limit_exceeded")
    assert refused.sequence == 2 and "levels of nesting" in refused.message
    for _, state in walk(history):
        assert depth_of(state) <= MAX_JSON_DEPTH
    json.dumps(history.state_at(10))
    field_index(history, "run")
    provenance(history, "/d")


def test_inspector_counts_a_state_grown_by_patches_at_its_real_size() -> None:
    execution = make_execution(
        state_start=json.dumps({"x": "y" * 100}), state_end=None, transition_end=1,
        revision_end=1, transition_count=1,
    )  # fmt: skip

    history = replay(execution, [make_transition(1, copies_from_root(10))])

    grown = measure(history.replayed_end)[0]
    assert grown > 100_000
    assert history.peak_state_size == grown
    # The cache's estimate of what the history holds follows the state, not the start text.
    assert footprint(history) >= 2 * grown


@pytest.mark.parametrize("levels", [10_000, 100_000])
@pytest.mark.parametrize("where", ["patch", "start", "end"])
def test_replay_and_index_take_deep_nesting_as_invalid_json(levels: int, where: str) -> None:
    deep = nested(levels) if levels == 10_000 else "[" * levels + "]" * levels
    patch = f'[{{"op":"add","path":"/x","value":{deep}}}]' if where == "patch" else "[]"
    execution = make_execution(
        state_start=deep if where == "start" else "{}",
        state_end=deep if where == "end" else '{"x": 1}',
        transition_end=1, revision_end=1, transition_count=1,
    )  # fmt: skip

    history = replay(execution, [make_transition(1, patch)])

    assert "invalid_json_payload" in {d.code for d in history.diagnostics}
    index = field_index(history, "run")
    assert index is not None
    provenance(history, "/x")
    if history.has_states:
        snapshot = take(history, [make_transition(1, patch)], (1, 0))
        assert snapshot is not None
        restored = restore(snapshot, execution, [make_transition(1, patch)])
        assert isinstance(restored, History)
        assert restored.state_at(restored.last_sequence) == history.replayed_end


@st.composite
def limited_chain(draw: st.DrawFn) -> tuple[Any, list[list[dict[str, Any]]], list[Any]]:
    """A start, hostile patches, and the states a replay that skips refused steps reaches."""
    start = draw(st.dictionaries(st.sampled_from("ab"), SMALL_VALUES, max_size=3))
    states, patches = [start], []
    for _ in range(draw(st.integers(1, 6))):
        ops = draw(hostile_patch(states[-1]))
        outcome = reference_apply(copy.deepcopy(states[-1]), ops, LIMITS)
        patches.append(ops)
        states.append(states[-1] if outcome in ("crossed", "failed") else outcome)
    return start, patches, states


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain=limited_chain())
def test_replay_property_states_are_jsonpatchs_within_the_limits(
    chain: tuple[Any, list[list[dict[str, Any]]], list[Any]],
) -> None:
    start, patches, states = chain
    transitions = [make_transition(i, patch) for i, patch in enumerate(patches, start=1)]
    execution = make_execution(
        state_start=json.dumps(start), state_end=json.dumps(states[-1]),
        transition_end=len(patches), revision_end=len(patches), transition_count=len(patches),
    )  # fmt: skip

    history = replay(execution, transitions, limits=LIMITS)

    for sequence, expected in enumerate(states):
        assert history.state_at(sequence) == expected
        assert_within(LIMITS, history.state_at(sequence))
    crossed = [
        s for s, ops in enumerate(patches, start=1)
        if reference_apply(copy.deepcopy(states[s - 1]), ops, LIMITS) == "crossed"
    ]  # fmt: skip
    refused = {d.sequence for d in history.diagnostics if d.code == "document_limit_exceeded"}
    assert bool(crossed) == bool(refused)
    assert not crossed or crossed[0] == min(s for s in refused if s is not None)
    if not crossed and not any(d.code == "patch_failed" for d in history.diagnostics):
        assert history.verdict == "verified", history.diagnostics


# --- settings ---------------------------------------------------------------------------


def test_serve_takes_the_state_limits_from_flags_or_environment() -> None:
    from collector.cli.main import _parser

    default = serve_config(_parser({}).parse_args(["serve"])).document_limits
    assert default == DocumentLimits(max_bytes=16 * 1024 * 1024, max_nodes=1_000_000)
    environ = {"STATETRAIL_MAX_STATE_MIB": "2", "STATETRAIL_MAX_STATE_NODES": "5000"}
    args = _parser(environ).parse_args(["serve", "--max-state-depth", "50"])
    assert serve_config(args).document_limits == DocumentLimits(2 * 1024 * 1024, 5000, 50)


@pytest.mark.parametrize("flag", [["--max-state-depth", "201"], ["--max-state-mib", "0"]])
def test_serve_refuses_state_limits_it_cannot_keep(
    flag: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from collector.cli.main import _parser

    with pytest.raises(SystemExit):
        _parser({}).parse_args(["serve", *flag])
    assert flag[0] in capsys.readouterr().err


# --- through a real server --------------------------------------------------------------


def _export_with_patches(server: Server, tag: str, patches: list[str]) -> str:
    """a_linear with its first patches replaced; the run id."""
    body = relocated_fixture("a_linear", end_unix_nano=time.time_ns(), tag=tag)[0]
    request = ExportRequest.FromString(body)
    events = [
        attribute
        for span in spans_of([request])
        for event in span.events
        if event.name == junjo.SET_STATE_EVENT
        for attribute in event.attributes
        if attribute.key == junjo.PATCH
    ]
    for attribute, patch in zip(events, patches, strict=False):
        attribute.value.string_value = patch
    export_raw(server.grpc_target, request.SerializeToString(), KEY)
    runs = server.get_json("/api/executions?limit=50")["executions"]
    run_id: str = next(r["id"] for r in runs if (r["store_id"] or "").endswith(f"-{tag}"))
    return run_id


def _high_water_kb(server: Server) -> int:
    assert server.process is not None
    with open(f"/proc/{server.process.pid}/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1])


def test_server_answers_the_exponential_copy_export_with_a_finding_in_bounded_memory(
    make_server: MakeServer,
) -> None:
    server = make_server()
    copies = _export_with_patches(server, "copies", [json.dumps(copies_from_root(25))])
    deepening = _export_with_patches(
        server, "deepening",
        [f'[{{"op":"add","path":"{"/d" * (1 + 190 * i)}","value":{nested(190)}}}]'
         for i in range(4)],
    )  # fmt: skip
    server.wait_replayed(timeout=120)

    with httpx.Client(base_url=server.url, timeout=60) as client:
        detail = client.get(f"/api/executions/{copies}")
        assert detail.status_code == 200
        findings = [d for d in detail.json()["diagnostics"]
                    if d["code"] == "document_limit_exceeded"]  # fmt: skip
        assert [(d["severity"], d["sequence"]) for d in findings] == [("error", 1)]
        assert "of 25" in findings[0]["message"]
        page = client.get(f"/executions/{copies}?step=1")
        assert page.status_code == 200
        assert "document_limit_exceeded" in page.text
        for run, field in ((copies, "/a0"), (deepening, "/d" * 100)):
            for path in (
                f"/executions/{run}", f"/executions/{run}?step=1", f"/executions/{run}?step=2",
                f"/executions/{run}?step=1&path={field}",
                f"/api/executions/{run}", f"/api/executions/{run}/timeline",
                f"/api/executions/{run}/state", f"/api/executions/{run}/provenance?path={field}",
            ):
                answer = client.get(path)
                assert answer.status_code == 200, (path, answer.text[:300])
        deep = client.get(f"/api/executions/{deepening}").json()["diagnostics"]
        assert "document_limit_exceeded" in {d["code"] for d in deep}
    assert _high_water_kb(server) < SERVER_HWM_BOUND_KB
