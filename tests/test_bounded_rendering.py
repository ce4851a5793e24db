"""Deep and huge telemetry values render as a marked truncation on every page, never a 500.

Each field of a Junjo run that reaches a page (a patch value, the start and end
states, the graph snapshot, a node span's attributes, an error message) is
filled with JSON nested 10,000 and 100,000 levels deep, or with a huge shallow
value, and every page and JSON twin that shows the run is read from a real
server: each answers 200 (or its documented 404), says what it left out, and
stays small whatever the value's size (studio/render/bounded.py).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.hostile_values import (
    SCRIPT_PROBE,
    Mutate,
    deep_array,
    deep_object,
    node_attribute,
    node_error,
    pages_of,
    patch_values,
    spoiled_run,
    stacked_patches,
    workflow_attribute,
)
from support.servers import FIXTURE_API_KEY, MakeServer, Server, export_raw

from collector.producers import junjo
from collector.replay.jsondoc import JsonValue
from studio.render.bounded import (
    API_MAX_DEPTH,
    TRUNCATED_KEY,
    api_value,
    json_preview,
    truncation_marker,
)
from studio.render.graph import MAX_GRAPH_NODES, GraphError, layout

KEY = [("x-junjo-api-key", FIXTURE_API_KEY)]
# Far above any bounded page here (about 100 KB), far below an unbounded one.
PAGE_BYTES_BOUND = 1_000_000
CUT = "not shown in full"
DEEPER = "deeper levels not shown"
# A documented answer for a run whose start state no replay can use (SCHEMA.md's
# invalid_json_payload): the state API says it has no states, with why.
NO_STATES = {"api_state"}


def deep_cases(levels: int) -> dict[str, list[Mutate]]:
    return {
        "patch": [patch_values(deep_array(levels))],
        "start": [workflow_attribute(junjo.WORKFLOW_STATE_START, deep_object(levels))],
        "end": [workflow_attribute(junjo.WORKFLOW_STATE_END, deep_array(levels))],
        "graph": [workflow_attribute(junjo.GRAPH_SNAPSHOT, deep_object(levels))],
        "graph_nodes": [
            workflow_attribute(junjo.GRAPH_SNAPSHOT, '{"nodes":' + deep_array(levels) + "}")
        ],
        "attribute": [node_attribute(deep_array(levels))],
        "error": [node_error(SCRIPT_PROBE + deep_object(levels))],
    }


# Where each case's value must show up cut: (page, text the page must hold).
DEEP_MARKS: dict[str, tuple[str, str]] = {
    "patch": ("page_step1", CUT),
    "start": ("owner_span_page", CUT),
    "end": ("owner_span_page", CUT),
    "graph": ("page", "nested deeper than 200 levels"),
    "graph_nodes": ("page", "nested deeper than 200 levels"),
    "attribute": ("span_page", CUT),
    "error": ("page", CUT),
}


def _send(server: Server, cases: dict[str, list[Mutate]]) -> dict[str, dict[str, str]]:
    """Export one plain run and one spoiled run per case; each case's pages, by name."""
    export_raw(server.grpc_target, spoiled_run("plain"), KEY, timeout=60)
    for name, mutations in cases.items():
        export_raw(server.grpc_target, spoiled_run(name, *mutations), KEY, timeout=60)
    server.wait_replayed(timeout=60)
    runs = {
        run["store_id"].rsplit("-", 1)[-1]: run
        for run in server.get_json("/api/executions?limit=100")["executions"]
    }
    pages = {}
    for name in cases:
        run = runs[name]
        timeline = server.get_json(f"/api/executions/{run['id']}/timeline")
        node_span = timeline["transitions"][-1]["span_id"]
        pages[name] = pages_of(run["id"], runs["plain"]["id"], node_span, run["span_id"])
    return pages


def _read_all(server: Server, pages: dict[str, str]) -> dict[str, httpx.Response]:
    with httpx.Client(base_url=server.url, timeout=60) as client:
        return {name: client.get(url) for name, url in pages.items()}


def _assert_bounded_and_answered(case: str, answers: dict[str, httpx.Response]) -> None:
    for name, answer in answers.items():
        expected = (200, 404) if name in NO_STATES else (200,)
        assert answer.status_code in expected, (case, name, answer.text[:300])
        assert len(answer.content) < PAGE_BYTES_BOUND, (case, name, len(answer.content))
        if name.startswith("api_"):
            answer.json()  # every JSON answer parses


@pytest.mark.parametrize("levels", [10_000, 100_000])
def test_bounded_rendering_deep_values_in_every_field_answer_200_with_the_cut_shown(
    make_server: MakeServer, levels: int
) -> None:
    server = make_server()
    cases = deep_cases(levels)
    for case, pages in _send(server, cases).items():
        answers = _read_all(server, pages)
        _assert_bounded_and_answered(case, answers)
        page, mark = DEEP_MARKS[case]
        assert mark in answers[page].text, (case, page)
        if case == "error":
            # The hostile string at the head of the cut message is text, escaped.
            assert "&lt;img src=x onerror=" in answers[page].text
            assert "<img src=x" not in answers[page].text
    assert "Traceback" not in server.output()


def test_bounded_rendering_state_nested_past_the_page_depth_is_cut_there(
    make_server: MakeServer,
) -> None:
    # 14 patches of 12 levels each: a state 168 levels deep that no payload is alone.
    server = make_server()
    pages = _send(server, {"stacked": [stacked_patches(12)]})["stacked"]
    answers = _read_all(server, pages)
    _assert_bounded_and_answered("stacked", answers)
    for name in ("page_step8", "page_provenance"):
        assert DEEPER in answers[name].text, name
    # The JSON API answers the state whole: it is within API_MAX_DEPTH.
    state: Any = answers["api_state"].json()["state"]
    assert TRUNCATED_KEY not in json.dumps(state)
    assert "Traceback" not in server.output()


def test_bounded_rendering_api_values_deeper_than_the_cap_are_cut_with_a_marker() -> None:
    deep: list[Any] = [1]
    for _ in range(100_000):  # built level by level: json.loads refuses this depth
        deep = [deep]
    answered = api_value(deep)
    text = json.dumps(answered)  # serialises: no RecursionError
    assert text.startswith("[" * API_MAX_DEPTH + "{")
    assert json.loads(text) is not None
    marker: Any = answered
    for _ in range(API_MAX_DEPTH):
        marker = marker[0]
    assert marker == truncation_marker(API_MAX_DEPTH)
    shallow: JsonValue = {"a": [1, {"b": None}]}
    assert api_value(shallow) is shallow


def test_bounded_rendering_huge_shallow_values_render_bounded_pages(
    make_server: MakeServer,
) -> None:
    nodes = [{"nodeRuntimeId": f"n{i}", "nodeLabel": f"node {i}"} for i in range(100_000)]
    edges = [{"tailNodeRuntimeId": f"n{i}", "headNodeRuntimeId": f"n{i + 1}"}
             for i in range(99_999)]
    server = make_server()
    big_string = json.dumps({"big": "<b>x</b>" * 1_000_000, "x": 0})
    cases: dict[str, list[Mutate]] = {
        "string": [workflow_attribute(junjo.WORKFLOW_STATE_START, big_string)],
        "array": [
            workflow_attribute(junjo.WORKFLOW_STATE_START, json.dumps({"items": [0] * 200_000}))
        ],
        "key": [workflow_attribute(junjo.WORKFLOW_STATE_START, json.dumps({"k" * 2_000_000: 1}))],
        "graph": [
            workflow_attribute(junjo.GRAPH_SNAPSHOT, json.dumps({"nodes": nodes, "edges": edges}))
        ],
    }
    sent = _send(server, cases)
    marks = {
        "string": ("page_step1", "value of 8,000,000 characters not shown in full"),
        "array": ("page_step1", "199,900 more"),
        "key": ("page_step1", "(2,000,000 characters)"),
        "graph": ("page", "too large to draw here (100,000 nodes"),
    }
    for case, pages in sent.items():
        answers = _read_all(server, {k: v for k, v in pages.items() if not k.startswith("api_")})
        _assert_bounded_and_answered(case, answers)
        page, mark = marks[case]
        assert mark in answers[page].text, (case, page)
        assert "<b>x</b>" not in answers[page].text


@pytest.mark.parametrize(
    "snapshot",
    [
        '{"nodes": [{"nodeRuntimeId": "a", "childNodeRuntimeIds": 5}], "edges": 7}',
        '{"nodes": [{"nodeRuntimeId": "a", "nodeLabel": {"x": [1]}}], "edges": null}',
        deep_object(100_000),
        '{"nodes": [1]}',
        json.dumps({"nodes": [{"nodeRuntimeId": str(i)} for i in range(MAX_GRAPH_NODES + 1)]}),
    ],
)
def test_bounded_rendering_graph_snapshots_of_any_shape_are_drawn_or_refused(
    snapshot: str,
) -> None:
    # Drawn, or a GraphError the page shows; never another exception (a 500).
    try:
        graph = layout(snapshot, {})
    except GraphError as error:
        assert str(error)
    else:
        assert len(graph.nodes) <= MAX_GRAPH_NODES


JSON_VALUES: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(st.text(max_size=5), children, max_size=5),
    max_leaves=40,
)


@settings(max_examples=200, deadline=None)
@given(
    value=JSON_VALUES,
    limit=st.integers(min_value=0, max_value=300),
    indent=st.sampled_from([None, 2]),
)
def test_bounded_rendering_preview_is_json_dumps_within_budget_and_cut_past_it(
    value: Any, limit: int, indent: int | None
) -> None:
    whole = json.dumps(value, indent=indent, ensure_ascii=False)
    shown = json_preview(value, limit, indent=indent)
    if len(whole) <= limit:
        assert shown == whole
    else:
        assert shown == whole[:limit] + "\n… more not shown"
