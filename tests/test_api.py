"""The JSON API end to end: a real `statetrail serve` fed over gRPC, read over HTTP.

Two module-scoped servers. `fixtures` holds every captured Junjo request exactly
as it was recorded (metadata and compression included), so listings and filters
are checked against the manifests. `variants` holds corrupted copies of
`a_linear`, built by decoding the capture with opentelemetry.proto and editing
its events; each copy gets fresh trace, span, run and store ids, so the
receiver's deduplication cannot merge it with the original or with another
copy, and each must surface its diagnostic code through the API.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from support.otlp_craft import spans_of, variant
from support.servers import (
    FIXTURE_API_KEY,
    MakeServer,
    Server,
    captured_compression,
    export_raw,
    fixture_requests,
    manifest,
    scenarios,
    send_scenario,
)

Json = Any
PB2Request = ExportTraceServiceRequest
PB2Span = Span

APP = Path(__file__).parent / "apps" / "junjo_app.py"
DOCUMENTED_FIELDS = frozenset(
    {"id", "workflow", "service", "status", "verdict", "started_at", "ended_at",
     "transition_count", "trace_id"}
)
SEQUENCE = "junjo.store.transition.sequence"
PATCH = "junjo.state_json_patch"


# --- HTTP helpers ----------------------------------------------------------------


def get(server: Server, route: str, /, **params: str) -> tuple[int, Json]:
    """GET a JSON endpoint; return (status, body) for errors too."""
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    try:
        with urllib.request.urlopen(server.url + route + query, timeout=30) as reply:
            return reply.status, json.load(reply)
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.load(exc)


def ok(server: Server, route: str, /, **params: str) -> Json:
    status, body = get(server, route, **params)
    assert status == 200, body
    return body


def listed(server: Server, **params: str) -> list[Json]:
    executions: list[Json] = ok(server, "/api/executions", limit="500", **params)["executions"]
    return executions


def pages(server: Server, **params: str) -> list[list[Json]]:
    """Every page of the list, following `next` cursors to the end."""
    found: list[list[Json]] = []
    while True:
        page = ok(server, "/api/executions", **params)
        found.append(page["executions"])
        if page["next"] is None:
            return found
        assert len(found) < 10_000, "the cursor never ends"
        params = {**params, "cursor": page["next"]}


def where(server: Server, expression: str) -> set[str]:
    return {e["id"] for e in listed(server, where=expression)}


# --- the servers -----------------------------------------------------------------


def _start(tmp_path_factory: pytest.TempPathFactory, name: str) -> Server:
    db = tmp_path_factory.mktemp(name) / "statetrail.duckdb"
    return Server.on_free_ports(db, "--api-key", FIXTURE_API_KEY).start()


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = _start(tmp_path_factory, "api-fixtures")
    try:
        for scenario in scenarios():
            compression = captured_compression(scenario)
            for reply in send_scenario(server.grpc_target, scenario, compression=compression):
                assert reply == b"", f"{scenario}: partial success {reply!r}"
        server.wait_replayed()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def all_executions(fixtures: Server) -> list[Json]:
    return listed(fixtures)


@pytest.fixture(scope="module")
def variants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = _start(tmp_path_factory, "api-variants")
    try:
        yield server
    finally:
        server.stop()


def run_id_of(scenario: str) -> str:
    run_id: str = manifest(scenario)["outcome"]["run_id"]
    return run_id


# --- listing ---------------------------------------------------------------------


def test_list_executions_newest_first_with_documented_fields(all_executions: list[Json]) -> None:
    assert len(all_executions) >= len(scenarios())
    starts = [e["start_unix_nano"] for e in all_executions]
    assert starts == sorted(starts, reverse=True)
    for execution in all_executions:
        assert execution.keys() >= DOCUMENTED_FIELDS
        assert execution["started_at"].endswith("Z") and execution["ended_at"].endswith("Z")
        assert len(execution["trace_id"]) == 32
    ids = {e["id"] for e in all_executions}
    assert {run_id_of(s) for s in scenarios() if "run_id" in manifest(s)["outcome"]} <= ids


def test_list_executions_cursor_walks_every_execution_once(
    fixtures: Server, all_executions: list[Json]
) -> None:
    walked = pages(fixtures, limit="3")
    assert all(len(page) <= 3 for page in walked)
    seen = [e["id"] for page in walked for e in page]
    assert seen == [e["id"] for e in all_executions]
    assert len(set(seen)) == len(seen)


def test_list_executions_filters_by_workflow_service_and_status(
    fixtures: Server, all_executions: list[Json]
) -> None:
    loop = listed(fixtures, workflow="Loop Workflow")
    assert [e["id"] for e in loop] == [run_id_of("b_graph_loop")]
    assert len(listed(fixtures, service="junjo-research")) == len(all_executions)
    assert listed(fixtures, service="no-such-service") == []
    failed = {e["id"] for e in listed(fixtures, status="error")}
    assert run_id_of("e_exception") in failed
    assert failed == {e["id"] for e in all_executions if e["status"] == "error"}
    assert len(failed) == 2  # e_exception and e2_concurrent_failure


def test_list_executions_filters_by_verdict(
    fixtures: Server, all_executions: list[Json]
) -> None:
    partial = listed(fixtures, verdict="partial")
    assert [e["workflow"] for e in partial] == ["Large State Workflow (single)"]
    assert partial[0]["received_transitions"] < partial[0]["transition_count"]
    verified = {e["id"] for e in listed(fixtures, verdict="verified")}
    assert verified == {e["id"] for e in all_executions} - {partial[0]["id"]}
    for execution in all_executions:
        if execution["id"] in verified:
            assert execution["received_transitions"] == execution["transition_count"]


def test_list_executions_filters_by_correlation_id(
    fixtures: Server, all_executions: list[Json]
) -> None:
    # b_graph_loop ran with execute(correlation=ExecutionCorrelation(...)); Junjo
    # put it on every executable span as junjo.correlation.type/.id.
    ticket = listed(fixtures, correlation="TICKET-42")
    assert [e["id"] for e in ticket] == [run_id_of("b_graph_loop")]
    assert ticket[0]["correlation"] == {"type": "research.ticket", "id": "TICKET-42"}
    assert [e["id"] for e in all_executions if e["correlation"]] == [ticket[0]["id"]]
    assert listed(fixtures, correlation="TICKET-4") == []  # the id is matched whole
    assert listed(fixtures, correlation="TICKET-42", status="error") == []


def test_list_executions_by_trace_and_by_store(
    fixtures: Server, all_executions: list[Json]
) -> None:
    parent = next(e for e in all_executions if e["id"] == run_id_of("d_subflow"))
    # A trace id pasted from another tool may be upper case.
    in_trace = {e["id"] for e in listed(fixtures, trace=parent["trace_id"].upper())}
    assert in_trace == {e["id"] for e in all_executions if e["trace_id"] == parent["trace_id"]}
    assert len(in_trace) == 3  # the workflow and its two subflows
    # Each subflow owns a store of its own.
    assert [e["id"] for e in listed(fixtures, store=parent["store_id"])] == [parent["id"]]
    assert listed(fixtures, store="no-such-store") == []


def test_list_executions_filters_by_time_range(
    fixtures: Server, all_executions: list[Json]
) -> None:
    pivot = next(e for e in all_executions if e["id"] == run_id_of("d_subflow"))
    # started_at has microseconds, so the bound is the start truncated to them.
    bound = pivot["start_unix_nano"] // 1000 * 1000
    since = {e["id"] for e in listed(fixtures, since=pivot["started_at"])}
    until = {e["id"] for e in listed(fixtures, until=pivot["started_at"])}
    assert since == {e["id"] for e in all_executions if e["start_unix_nano"] >= bound}
    assert until == {e["id"] for e in all_executions if e["start_unix_nano"] < bound}
    assert pivot["id"] in since and since.isdisjoint(until)
    assert len(listed(fixtures, since="100000d")) == len(all_executions)
    status, body = get(fixtures, "/api/executions", since="yesterday")
    assert status == 400 and body["parameter"] == "since"


# --- field filters ---------------------------------------------------------------


LINEAR = ("a_linear", "k_gzip_compression")


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("count = 4", ("b_graph_loop",)),
        ("ever count = 2", ("b_graph_loop",)),
        ('verdict = "even"', ("b_graph_loop",)),
        ('items contains "laser"', (*LINEAR, "d_subflow")),
        ('metadata."extra/key~" = true', LINEAR),
        ("/metadata/extra~1key~0 = true", LINEAR),
        ('profile.address.city = "London"', LINEAR),
        ("note = null", LINEAR),
        ("ratio > 0.5", LINEAR),
        ("done exists", LINEAR),
        ('ever title = "linear demo"', LINEAR),
        ('count = 4 or (ratio > 0.5 and not profile.address.zip = "N1")', ("b_graph_loop",)),
        ('(count = 1 or count = 4) and not verdict = "odd"', (*LINEAR, "b_graph_loop")),
        ("not (done exists or nonexistent missing)", ()),
    ],
)
def test_where_filter_matches_manifest_states(
    fixtures: Server, expression: str, expected: tuple[str, ...]
) -> None:
    found = where(fixtures, expression)
    # Subflows are executions too: d_subflow's parent carries the items list.
    named = {run_id_of(s) for s in expected}
    assert named <= found
    assert found - named <= _subflows(fixtures, named)


def _subflows(server: Server, run_ids: set[str]) -> set[str]:
    return {
        child["id"]
        for run_id in run_ids
        for child in ok(server, f"/api/executions/{run_id}")["children"]
    }


def test_where_filter_pages_and_combines_with_facets(
    fixtures: Server, all_executions: list[Json]
) -> None:
    seen = [e["id"] for page in pages(fixtures, limit="3", where="nonexistent missing")
            for e in page]
    assert seen == [e["id"] for e in all_executions]
    linear = {run_id_of(s) for s in LINEAR}
    laser = 'items contains "laser"'
    assert {e["id"] for e in listed(fixtures, where=laser, workflow="Linear Workflow")} == linear
    assert {e["id"] for e in listed(fixtures, where=laser, verdict="partial")} == set()
    verified = {e["id"] for e in listed(fixtures, where=laser, verdict="verified")}
    assert linear | {run_id_of("d_subflow")} <= verified
    assert listed(fixtures, where="ratio > 0.5", status="error") == []


def test_where_filter_checked_against_every_manifest_final_state(
    fixtures: Server, all_executions: list[Json]
) -> None:
    for scenario in scenarios():
        outcome = manifest(scenario)["outcome"]
        if "run_id" not in outcome or "final_state" not in outcome:
            continue
        for key, value in outcome["final_state"].items():
            if isinstance(value, bool | int | float | str) or value is None:
                literal = json.dumps(value)
                assert outcome["run_id"] in where(fixtures, f'"{key}" = {literal}'), key
    assert where(fixtures, "nonexistent missing") == {e["id"] for e in all_executions}
    assert where(fixtures, "nonexistent exists") == set()


def test_where_filter_answers_each_runs_end_value_of_the_paths_it_tests(
    fixtures: Server,
) -> None:
    for scenario in scenarios():
        outcome = manifest(scenario)["outcome"]
        final = outcome.get("final_state")
        if "run_id" not in outcome or not isinstance(final, dict):
            continue
        page = ok(fixtures, "/api/executions", where="nonexistent missing", limit="500")
        (run,) = [e for e in page["executions"] if e["id"] == outcome["run_id"]]
        assert run["fields"] == [{"path": "/nonexistent", "kind": "absent", "value": None}]
        scalars = [k for k, v in final.items() if not isinstance(v, dict | list)][:2]
        if not scalars:
            continue
        expression = " and ".join(f'"{key}" exists' for key in scalars)
        (run,) = [
            e for e in listed(fixtures, where=expression) if e["id"] == outcome["run_id"]
        ]
        assert [(f["path"], f["value"]) for f in run["fields"]] == [
            (f"/{key}", final[key]) for key in scalars
        ], scenario
    # Without a filter there is nothing to answer.
    assert all("fields" not in e for e in ok(fixtures, "/api/executions")["executions"])


@pytest.mark.parametrize(
    ("sort", "key"),
    [
        ("-duration", lambda e: (-(e["end_unix_nano"] - e["start_unix_nano"]), e["id"])),
        ("duration", lambda e: (e["end_unix_nano"] - e["start_unix_nano"], e["id"])),
        ("transitions", lambda e: (e["transition_count"] or -1, e["id"])),
        ("-transitions", lambda e: (-(e["transition_count"] or -1), e["id"])),
        ("started", lambda e: (e["start_unix_nano"], e["id"])),
    ],
)
def test_list_sorts_and_pages_through_every_run_once(
    fixtures: Server, all_executions: list[Json], sort: str, key: Any
) -> None:
    expected = [e["id"] for e in sorted(all_executions, key=key)]
    seen = [e["id"] for page in pages(fixtures, limit="3", sort=sort) for e in page]
    assert seen == expected
    # With a field filter too: the same order over the runs that match.
    matching = {e["id"] for e in listed(fixtures, where="count exists")}
    sorted_matching = [e["id"] for e in listed(fixtures, where="count exists", sort=sort)]
    assert sorted_matching == [run for run in expected if run in matching]


def test_list_rejects_an_unknown_sort(fixtures: Server) -> None:
    status, body = get(fixtures, "/api/executions", sort="name")
    assert status == 400 and body["parameter"] == "sort"


def test_list_refuses_a_cursor_made_for_another_order(fixtures: Server) -> None:
    """A cursor carries a value of its own order: a duration is no start time."""
    longest = ok(fixtures, "/api/executions", limit="1", sort="-duration")["next"]
    assert longest is not None
    assert ok(fixtures, "/api/executions", limit="1", sort="-duration", cursor=longest)["next"]
    for sort in ("", "started", "-started", "duration", "-transitions"):
        status, body = get(fixtures, "/api/executions", limit="1", sort=sort, cursor=longest)
        assert status == 400 and body["parameter"] == "cursor", (sort, body)


@pytest.mark.parametrize(
    ("expression", "position"),
    [
        ("count = = 4", 8),
        ("count = 4 and and done exists", 14),
        ("count 4", 6),
        ("(count = 4", 0),
        ("count = 4)", 9),
        ("count = 'x'", 8),
        ('count = "unterminated', 8),
        ("/a~2 = 1", 2),
        ("count = True", 8),
        ("ratio > null", 8),
    ],
)
def test_where_filter_malformed_is_400_with_position(
    fixtures: Server, expression: str, position: int
) -> None:
    status, body = get(fixtures, "/api/executions", where=expression)
    assert status == 400, body
    assert body["parameter"] == "where"
    assert body["position"] == position, body
    assert isinstance(body["error"], str) and body["error"]


@pytest.mark.parametrize(
    "expression",
    [
        "title = \"x'; DROP TABLE executions; --\"",
        "\"x'; DROP TABLE executions; --\" = 1",
        "title = \"') OR 1=1 --\"",
        '"; DELETE FROM field_values; --" exists',
        "title = \"\\u0000\"",
        "title = \"\\ud800\"",
        "a" * 10_000,
        "(" * 5_000 + "count = 1" + ")" * 5_000,
        "not " * 200 + "count = 1",
        "(" * 40 + "count = 1" + ")" * 40,
        "count = 1\x00",
        "count = 1\x1b[2J",
        "count\u0085= 1",
        " or ".join(["count = 1"] * 100),
        "count = 1e999",
        "count = -0",
        "title = \"" + "é" * 3000 + "\"",
        "\u202etitle = 1",
        "ever ever = 1",
        "count < \"\"",
    ],
)
def test_where_filter_hostile_input_never_500(
    fixtures: Server, all_executions: list[Json], expression: str
) -> None:
    status, body = get(fixtures, "/api/executions", where=expression)
    assert status in (200, 400), body
    if status == 400:
        assert body["parameter"] == "where" and isinstance(body["position"], int)
    else:
        assert {e["id"] for e in body["executions"]} <= {e["id"] for e in all_executions}
    assert len(listed(fixtures)) == len(all_executions)


def test_where_filter_injection_values_leave_tables_intact(
    fixtures: Server, all_executions: list[Json]
) -> None:
    hostile = "x'; DROP TABLE executions; --"
    assert where(fixtures, f'title = "{hostile}"') == set()
    assert where(fixtures, f'"{hostile}" missing') == {e["id"] for e in all_executions}
    health = ok(fixtures, "/healthz")
    assert health["executions"] == len(all_executions)
    assert where(fixtures, "count = 4") == {run_id_of("b_graph_loop")}


# --- one execution ---------------------------------------------------------------


def test_execution_detail_has_summary_parent_children_and_verdict(fixtures: Server) -> None:
    parent_id = run_id_of("d_subflow")
    parent = ok(fixtures, f"/api/executions/{parent_id}")
    assert parent.keys() >= DOCUMENTED_FIELDS
    assert parent["id"] == parent_id and parent["parent"] is None
    assert parent["verdict"] == "verified" and parent["diagnostics"] == []
    assert parent["transition_count"] == parent["transition_end"] - parent["transition_start"]
    [child] = parent["children"]
    assert child["kind"] == "subflow"
    detail = ok(fixtures, f"/api/executions/{child['id']}")
    assert detail["parent"]["id"] == parent_id
    assert detail["parent_store_id"] == parent["store_id"] != detail["store_id"]
    [grandchild] = detail["children"]
    assert ok(fixtures, f"/api/executions/{grandchild['id']}")["parent"]["id"] == child["id"]


def test_execution_unknown_id_is_404_json(fixtures: Server) -> None:
    for suffix in ("", "/timeline", "/state", "/provenance?path=/a"):
        status, body = get(fixtures, f"/api/executions/no-such-run{suffix}")
        assert status == 404 and "no-such-run" in body["error"]


def test_execution_timeline_lists_every_transition(fixtures: Server) -> None:
    run_id = run_id_of("b_graph_loop")
    body = ok(fixtures, f"/api/executions/{run_id}/timeline")
    final = manifest("b_graph_loop")["outcome"]["final_state"]
    assert body["verdict"] == "verified" and body["diagnostics"] == []
    assert body["start"] == {"count": 0, "path": [], "verdict": None}
    assert body["end"] == final
    transitions = body["transitions"]
    assert [t["sequence"] for t in transitions] == list(range(1, body["end_sequence"] + 1))
    for entry in transitions:
        assert {"sequence", "time_unix_nano", "action", "store_id", "span_id", "node",
                "patch", "verified"} <= entry.keys()
        assert isinstance(entry["time_unix_nano"], int) and entry["verified"] is True
        assert len(entry["span_id"]) == 16
    assert {t["node"] for t in transitions} >= {"SourceNode", "IncrementNode"}
    assert transitions[1]["patch"] == [{"op": "replace", "path": "/count", "value": 1}]


@pytest.mark.parametrize(
    "scenario",
    [s for s in scenarios() if "run_id" in manifest(s)["outcome"]],
)
def test_execution_state_at_each_step_equals_direct_patching(
    fixtures: Server, scenario: str
) -> None:
    outcome = manifest(scenario)["outcome"]
    run_id = outcome["run_id"]
    timeline = ok(fixtures, f"/api/executions/{run_id}/timeline")
    first = str(timeline["start_sequence"])
    start = ok(fixtures, f"/api/executions/{run_id}/state", sequence=first)
    assert start["state"] == timeline["start"] and start["verified"] is True
    state = timeline["start"]
    for entry in timeline["transitions"]:
        state = jsonpatch.apply_patch(state, entry["patch"])
        at = ok(fixtures, f"/api/executions/{run_id}/state", sequence=str(entry["sequence"]))
        assert at["state"] == state, entry["sequence"]
        assert at["verified"] is True
    last = ok(fixtures, f"/api/executions/{run_id}/state")
    assert last["sequence"] == timeline["end_sequence"]
    assert last["state"] == outcome.get("final_state", outcome.get("state_at_failure"))


@pytest.mark.parametrize("sequence", ["abc", "1.5", "0x1", "99999", "-1"])
def test_execution_state_bad_sequence_is_400(fixtures: Server, sequence: str) -> None:
    status, body = get(
        fixtures, f"/api/executions/{run_id_of('a_linear')}/state", sequence=sequence
    )
    assert status == 400, body
    assert body["parameter"] == "sequence"


@pytest.mark.parametrize(
    ("path", "sequence", "action", "node"),
    [
        ("profile.address.city", 10, "set_profile", "NestedNode"),
        ("/profile/address/zip", 11, "set_profile", "NestedNode"),
        ("/metadata/extra~1key~0", 9, "set_metadata", "NestedNode"),
        ('metadata."extra/key~"', 9, "set_metadata", "NestedNode"),
        ("metadata.nested.b[2].c", 9, "set_metadata", "NestedNode"),
        ("items[0]", 7, "rotate_items", "ListNode"),
        ("title", 13, "finish", "FinishNode"),
        ("count", 2, "increment", "StartNode"),
    ],
)
def test_execution_provenance_names_last_writer(
    fixtures: Server, path: str, sequence: int, action: str, node: str
) -> None:
    run_id = run_id_of("a_linear")
    body = ok(fixtures, f"/api/executions/{run_id}/provenance", path=path)
    writer = body["last_writer"]
    assert (writer["sequence"], writer["action"], writer["node"]) == (sequence, action, node)
    final = manifest("a_linear")["outcome"]["final_state"]
    assert writer["after"] == jsonpatch.JsonPointer(writer["value_path"]).resolve(final)
    timeline = ok(fixtures, f"/api/executions/{run_id}/timeline")["transitions"]
    step = next(t for t in timeline if t["sequence"] == sequence)
    assert writer["span_id"] == step["span_id"] and writer["store_id"] == step["store_id"]
    assert writer["verified"] is True
    assert body["writes"][-1]["sequence"] >= sequence


def test_execution_provenance_of_unwritten_path_has_no_writer(fixtures: Server) -> None:
    run_id = run_id_of("a_linear")
    body = ok(fixtures, f"/api/executions/{run_id}/provenance", path="nonexistent.field")
    assert body["path"] == "/nonexistent/field" and body["last_writer"] is None
    status, error = get(fixtures, f"/api/executions/{run_id}/provenance", path="a..b")
    assert status == 400 and error["parameter"] == "path"


def test_large_state_is_partial_with_dropped_events_and_gap(
    fixtures: Server, all_executions: list[Json]
) -> None:
    large = next(e for e in all_executions if e["workflow"] == "Large State Workflow (single)")
    detail = ok(fixtures, f"/api/executions/{large['id']}")
    codes = {d["code"] for d in detail["diagnostics"]}
    assert detail["verdict"] == "partial"
    assert {"otlp_data_dropped", "sequence_gap", "claimed_reconstructable_but_failed"} <= codes
    gap = next(d for d in detail["diagnostics"] if d["code"] == "sequence_gap")
    assert gap["severity"] == "error" and gap["sequence"] == 1
    timeline = ok(fixtures, f"/api/executions/{large['id']}/timeline")
    assert len(timeline["transitions"]) == 128
    assert not any(t["verified"] for t in timeline["transitions"])


# --- corrupted variants over gRPC ------------------------------------------------


def _attribute(attributes: Iterable[KeyValue], key: str) -> KeyValue:
    return next(a for a in attributes if a.key == key)


def workflow_span(requests: list[PB2Request]) -> PB2Span:
    return next(
        s for s in spans_of(requests)
        if _attribute(s.attributes, "junjo.span_type").value.string_value == "workflow"
    )


def variant_run_id(requests: list[PB2Request]) -> str:
    span = workflow_span(requests)
    run_id: str = _attribute(span.attributes, "junjo.executable_runtime_id").value.string_value
    return run_id


def event_at(requests: list[PB2Request], sequence: int) -> tuple[PB2Span, int]:
    """The span carrying the set_state event with this sequence, and the event's index."""
    for span in spans_of(requests):
        for index, event in enumerate(span.events):
            if event.name == "set_state" and any(
                a.key == SEQUENCE and a.value.int_value == sequence for a in event.attributes
            ):
                return span, index
    raise LookupError(sequence)


def send(server: Server, requests: list[PB2Request]) -> None:
    metadata = fixture_requests("a_linear")[0][1]
    for request in requests:
        assert export_raw(server.grpc_target, request.SerializeToString(), metadata) == b""


def split_off_workflow(requests: list[PB2Request]) -> tuple[list[PB2Request], list[PB2Request]]:
    """(the requests without the workflow span, a request holding only it)."""
    owner = workflow_span(requests)
    rest = [PB2Request() for _ in requests]
    alone = [PB2Request() for _ in requests]
    for source, without, only in zip(requests, rest, alone, strict=True):
        without.CopyFrom(source)
        only.CopyFrom(source)
        for copy, keep_owner in ((without, False), (only, True)):
            for resource_spans in copy.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    kept = [
                        s for s in scope_spans.spans if (s.span_id == owner.span_id) == keep_owner
                    ]
                    del scope_spans.spans[:]
                    scope_spans.spans.extend(kept)
    return rest, alone


def drop_middle(requests: list[PB2Request]) -> None:
    span, index = event_at(requests, 7)
    del span.events[index]


def duplicate_conflicting(requests: list[PB2Request]) -> None:
    span, index = event_at(requests, 5)
    copy = span.events.add()
    copy.CopyFrom(span.events[index])
    copy.time_unix_nano += 1_000
    _attribute(copy.attributes, "id").value.string_value = "conflictingEventId001"
    _attribute(copy.attributes, PATCH).value.string_value = (
        '[{"op":"add","path":"/items/3","value":"tampered"}]'
    )


def swap_sequences(requests: list[PB2Request]) -> None:
    # 3 appends at /items/1 and 4 at /items/2: swapped, the append at index 2
    # no longer fits the list, and the revisions run backwards.
    (span3, index3), (span4, index4) = event_at(requests, 3), event_at(requests, 4)
    _attribute(span3.events[index3].attributes, SEQUENCE).value.int_value = 4
    _attribute(span4.events[index4].attributes, SEQUENCE).value.int_value = 3


def cut_patch(requests: list[PB2Request]) -> None:
    span, index = event_at(requests, 9)
    patch = _attribute(span.events[index].attributes, PATCH).value
    patch.string_value = patch.string_value[: len(patch.string_value) // 2]


def break_revisions(requests: list[PB2Request]) -> None:
    span, index = event_at(requests, 5)
    attributes = span.events[index].attributes
    before = _attribute(attributes, "junjo.store.revision.before").value.int_value
    _attribute(attributes, "junjo.store.revision.after").value.int_value = before + 3


def withhold_state(requests: list[PB2Request]) -> None:
    attributes = workflow_span(requests).attributes
    for name in ("start", "end"):
        _attribute(attributes, f"junjo.workflow.state.{name}.mode").value.string_value = "redacted"
        _attribute(attributes, f"junjo.workflow.state.{name}").value.string_value = ""


Corruption = Callable[[list[PB2Request]], None]


@pytest.mark.parametrize(
    ("corrupt", "codes", "verdict"),
    [
        (drop_middle, {"sequence_gap", "end_state_mismatch"}, "partial"),
        (duplicate_conflicting, {"duplicate_sequence"}, "partial"),
        (swap_sequences, {"patch_failed", "revision_discontinuity"}, "partial"),
        (cut_patch, {"invalid_json_payload"}, "partial"),
        (break_revisions, {"revision_discontinuity"}, "verified"),
        (withhold_state, {"state_withheld"}, "not_applicable"),
    ],
)
def test_variant_corruption_reported_through_api(
    variants: Server, corrupt: Corruption, codes: set[str], verdict: str
) -> None:
    requests = variant(corrupt.__name__)
    corrupt(requests)
    send(variants, requests)
    variants.wait_replayed()
    run_id = variant_run_id(requests)
    detail = ok(variants, f"/api/executions/{run_id}")
    assert codes <= {d["code"] for d in detail["diagnostics"]}, detail["diagnostics"]
    assert detail["verdict"] == verdict
    [stored] = [e for e in listed(variants, verdict=verdict) if e["id"] == run_id]
    assert stored["verdict"] == verdict
    timeline = ok(variants, f"/api/executions/{run_id}/timeline")
    assert timeline["verdict"] == verdict
    assert codes <= {d["code"] for d in timeline["diagnostics"]}


def test_variant_duplicate_sequence_replays_earliest(variants: Server) -> None:
    requests = variant("duplicate-earliest")
    duplicate_conflicting(requests)
    send(variants, requests)
    variants.wait_replayed()
    run_id = variant_run_id(requests)
    state = ok(variants, f"/api/executions/{run_id}/state", sequence="5")
    assert state["state"]["items"][3] == "horse" and state["verified"] is False
    [finding] = [
        d for d in ok(variants, f"/api/executions/{run_id}")["diagnostics"]
        if d["code"] == "duplicate_sequence"
    ]
    assert finding["severity"] == "error" and finding["sequence"] == 5


def test_variant_late_owner_is_in_flight_until_it_arrives(variants: Server) -> None:
    requests = variant("late-owner")
    run_id = variant_run_id(requests)
    nodes, owner = split_off_workflow(requests)
    send(variants, nodes)
    variants.wait_replayed()
    waiting = ok(variants, f"/api/executions/{run_id}")
    assert waiting["verdict"] == "in_flight"
    assert "owner_not_arrived" in {d["code"] for d in waiting["diagnostics"]}
    assert run_id in {e["id"] for e in listed(variants, verdict="in_flight")}
    assert len(ok(variants, f"/api/executions/{run_id}/timeline")["transitions"]) == 14
    send(variants, owner)
    variants.wait_replayed()
    arrived = ok(variants, f"/api/executions/{run_id}")
    assert arrived["verdict"] == "verified" and arrived["diagnostics"] == []
    assert run_id not in {e["id"] for e in listed(variants, verdict="in_flight")}
    assert run_id in where(variants, 'ever title = "linear demo"')


def test_variant_in_flight_mixing_sequenced_and_unsequenced_events_numbers_steps_in_order(
    variants: Server,
) -> None:
    # What arrives of the store, in time order: an event without a sequence,
    # sequence 7 (2-6 still on the way), another without a sequence, then 9-14.
    # Ordered by time, every step must be numbered by its position, or the
    # steps would read 1, 7, 3, ... and the page could not select 3 or 7.
    requests = variant("mixed-sequences")
    run_id = variant_run_id(requests)
    for sequence in (6, 5, 4, 3, 2):
        span, index = event_at(requests, sequence)
        del span.events[index]
    for sequence in (1, 8):
        span, index = event_at(requests, sequence)
        attributes = span.events[index].attributes
        del attributes[[a.key for a in attributes].index(SEQUENCE)]
    nodes, _ = split_off_workflow(requests)
    send(variants, nodes)
    variants.wait_replayed()

    received = ok(variants, f"/api/executions/{run_id}/timeline")["transitions"]
    sequences = [entry["sequence"] for entry in received]
    assert sequences == list(range(1, 10))
    for sequence in sequences:
        url = f"{variants.url}/executions/{run_id}?step={sequence}"
        with urllib.request.urlopen(url, timeout=30) as reply:
            assert f"<h2>Step {sequence} " in reply.read().decode()


def test_variant_in_flight_run_with_two_stores_replays_only_its_own(variants: Server) -> None:
    # d_subflow's parent workflow, its owner span still on the way. Its nodes and its
    # finished subflow's span name it as their run, and the subflow span carries the
    # subflow store's sequence 1 beside the parent's 2-4 (SCHEMA.md section 7.1).
    # Sequences are per store: the run's steps are its own store's 1-5, not 1, 1, 2, 2, ...
    requests = variant("in-flight-two-stores", "d_subflow")
    run_id = variant_run_id(requests)
    own_store = _attribute(workflow_span(requests).attributes, "junjo.workflow.store.id")
    nodes, _ = split_off_workflow(requests)
    send(variants, nodes)
    variants.wait_replayed()

    [row] = [e for e in listed(variants, verdict="in_flight") if e["id"] == run_id]
    assert len(row["store_ids"]) == 2 and row["store_id"] == own_store.value.string_value
    received = ok(variants, f"/api/executions/{run_id}/timeline")["transitions"]
    assert [(t["sequence"], t["store_id"]) for t in received] == [
        (sequence, own_store.value.string_value) for sequence in range(1, 6)
    ]


def test_variant_late_transitions_update_verdict_and_field_index(variants: Server) -> None:
    requests = variant("late-transitions")
    run_id = variant_run_id(requests)
    nodes, owner = split_off_workflow(requests)
    send(variants, owner)
    variants.wait_replayed()
    early = ok(variants, f"/api/executions/{run_id}")
    assert early["verdict"] == "partial"
    assert "missing_trailing_transitions" in {d["code"] for d in early["diagnostics"]}
    assert run_id in where(variants, 'title = "finished"')
    assert run_id not in where(variants, 'ever title = "linear demo"')
    send(variants, nodes)
    variants.wait_replayed()
    late = ok(variants, f"/api/executions/{run_id}")
    assert late["verdict"] == "verified" and late["diagnostics"] == []
    assert run_id in {e["id"] for e in listed(variants, verdict="verified")}
    assert run_id in where(variants, 'ever title = "linear demo"')


# --- a live Junjo application ----------------------------------------------------


@pytest.mark.junjo
def test_live_junjo_refund_filter_and_provenance(make_server: MakeServer) -> None:
    key = "live-api-key"
    server: Server = make_server("--api-key", key)
    completed = subprocess.run(
        [sys.executable, str(APP), server.grpc_target, key, "junjo", "linear", "failing"],
        capture_output=True, text=True, timeout=120, check=True,
    )
    runs = {
        run["scenario"]: run
        for run in (json.loads(line) for line in completed.stdout.splitlines())
    }
    server.wait_replayed()
    linear = runs["linear"]["run_id"]
    assert where(server, "refund.eligible = true") == {linear}
    assert runs["failing"]["run_id"] in where(server, "refund.eligible = false")
    body = ok(server, f"/api/executions/{linear}/provenance", path="/refund/eligible")
    writer = body["last_writer"]
    assert (writer["action"], writer["node"], writer["after"]) == ("decide", "Decide", True)
    detail = ok(server, f"/api/executions/{linear}")
    assert detail["verdict"] == "verified" and detail["service"] == "refund-service"
