"""Hostile input: every bad input class gets its documented answer, and the server lives.

Transport-level garbage is refused (INVALID_ARGUMENT / 400, 413, RESOURCE_EXHAUSTED);
well-formed exports with absurd content are stored, or rejected per span in
partial_success; and replaying what was stored yields diagnostics, never a 500.
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import httpx
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2
from support.otlp_craft import (
    ExportRequest,
    new_span_id,
    new_trace_id,
    plain_request,
    relocated_fixture,
    spans_of,
)
from support.polling import wait_until
from support.servers import FIXTURE_API_KEY, MakeServer, Server, export_raw

from collector.producers import junjo

KEY = [("x-junjo-api-key", FIXTURE_API_KEY)]
HTTP_KEY = {"x-junjo-api-key": FIXTURE_API_KEY}
PROTOBUF = {"content-type": "application/x-protobuf", **HTTP_KEY}
JSON_TYPE = {"content-type": "application/json", **HTTP_KEY}
DEEP_ARRAY = "[" * 10_000 + "]" * 10_000
DEEP_OBJECT = '{"a":' * 10_000 + "1" + "}" * 10_000
HUGE_INT = "1" + "0" * 400
Span = trace_pb2.Span


def _set(attributes: Any, key: str, **value: Any) -> None:
    for attribute in attributes:
        if attribute.key == key:
            attribute.value.CopyFrom(common_pb2.AnyValue(**value))
            return
    attributes.add(key=key, value=common_pb2.AnyValue(**value))


def _patches(value: str) -> Callable[[Span], None]:
    def mutate(span: Span) -> None:
        for event in span.events:
            if event.name == junjo.SET_STATE_EVENT:
                _set(event.attributes, junjo.PATCH,
                     string_value=f'[{{"op":"add","path":"/x","value":{value}}}]')
    return mutate


def _start_state(value: str) -> Callable[[Span], None]:
    def mutate(span: Span) -> None:
        if any(a.key == junjo.WORKFLOW_STATE_START for a in span.attributes):
            _set(span.attributes, junjo.WORKFLOW_STATE_START, string_value=value)
    return mutate


# Kept intact so the spoiled span still names an execution that can be asked about.
_IDENTITY = frozenset({junjo.SPAN_TYPE, junjo.RUNTIME_ID, junjo.WORKFLOW_STORE_ID})


def _wrong_types(span: Span) -> None:
    for attribute in list(span.attributes):
        if attribute.key.startswith("junjo.") and attribute.key not in _IDENTITY:
            attribute.value.CopyFrom(common_pb2.AnyValue(bytes_value=b"\xff\xfe\x00"))
    for event in span.events:
        for attribute in event.attributes:
            if attribute.key != junjo.STORE_ID:
                attribute.value.CopyFrom(common_pb2.AnyValue(double_value=float("nan")))


# name -> (how to spoil every span of a relocated a_linear, diagnostic expected, if any)
JUNJO_CASES: dict[str, tuple[Callable[[Span], None], str | None]] = {
    "deep_array_start": (_start_state(DEEP_ARRAY), "invalid_json_payload"),
    "deep_object_start": (_start_state(DEEP_OBJECT), "invalid_json_payload"),
    "deep_patch": (_patches(DEEP_ARRAY), "invalid_json_payload"),
    "float_overflow_patch": (_patches("1e400"), "invalid_json_payload"),
    "nan_literal_patch": (_patches("NaN"), "invalid_json_payload"),
    "huge_int_patch": (_patches(HUGE_INT), None),
    "huge_numbers_start": (_start_state('{"n": 1e400, "i": ' + HUGE_INT + "}"),
                           "invalid_json_payload"),
    "non_json_start": (_start_state("<xml>not json</xml>"), "invalid_json_payload"),
    "wrong_types": (_wrong_types, None),
}


def _spoiled_linear(tag: str, mutate: Callable[[Span], None]) -> bytes:
    body = relocated_fixture("a_linear", end_unix_nano=time.time_ns(), tag=tag)[0]
    request = ExportRequest.FromString(body)
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                mutate(span)
    spoiled: bytes = request.SerializeToString()
    return spoiled


def _grpc_code(server: Server, body: bytes) -> grpc.StatusCode:
    try:
        export_raw(server.grpc_target, body, KEY, timeout=30)
    except grpc.RpcError as error:
        code: grpc.StatusCode = error.code()
        return code
    return grpc.StatusCode.OK


def _partial_success(server: Server, body: bytes) -> tuple[int, str]:
    reply = trace_service_pb2.ExportTraceServiceResponse.FromString(
        export_raw(server.grpc_target, body, KEY, timeout=60)
    )
    return reply.partial_success.rejected_spans, reply.partial_success.error_message


def _invalid_utf8_request() -> bytes:
    """A request whose span name is not UTF-8 (protobuf strings must be)."""
    request = plain_request(new_trace_id(), [new_span_id()], start_unix_nano=1, end_unix_nano=2)
    request.resource_spans[0].scope_spans[0].spans[0].name = "PLACEHOLDER"
    body: bytes = request.SerializeToString()
    return body.replace(b"PLACEHOLDER", b"PLACEHOLD\xff\xfe")


def _healthy_with_at_least(server: Server, before: dict[str, Any]) -> dict[str, Any]:
    health: dict[str, Any] = server.get_json("/healthz")
    assert health["status"] == "ok"
    for table in ("spans", "executions", "transitions"):
        assert health[table] >= before[table], (table, health, before)
    return health


def test_hostile_transport_input_gets_documented_answers(make_server: MakeServer) -> None:
    server: Server = make_server("--max-receive-mib", "1")
    good = relocated_fixture("a_linear", end_unix_nano=time.time_ns(), tag="good")[0]
    assert _grpc_code(server, good) == grpc.StatusCode.OK
    before = server.wait_replayed()

    assert _grpc_code(server, good[: len(good) // 2]) == grpc.StatusCode.INVALID_ARGUMENT
    assert _grpc_code(server, b"\xff" * 64) == grpc.StatusCode.INVALID_ARGUMENT
    assert _grpc_code(server, _invalid_utf8_request()) == grpc.StatusCode.INVALID_ARGUMENT
    assert _grpc_code(server, b"\x00" * (2 * 1024 * 1024)) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED
    )
    url = f"{server.url}/v1/traces"
    with httpx.Client(timeout=60) as client:
        answers = {
            "truncated": client.post(url, content=good[:-7], headers=PROTOBUF),
            "bad_gzip": client.post(url, content=gzip.compress(good)[:-12],
                                    headers={**PROTOBUF, "content-encoding": "gzip"}),
            "not_gzip": client.post(url, content=b"plain bytes",
                                    headers={**PROTOBUF, "content-encoding": "gzip"}),
            "not_json": client.post(url, content=b"{'resourceSpans': [", headers=JSON_TYPE),
            "deep_json": client.post(url, content=DEEP_ARRAY.encode(), headers=JSON_TYPE),
            "deep_json_inside": client.post(
                url, content=('{"resourceSpans": ' + DEEP_ARRAY + "}").encode(),
                headers=JSON_TYPE),
            "huge_time_json": client.post(url, content=json.dumps({"resourceSpans": [{
                "scopeSpans": [{"spans": [{
                    "traceId": "0" * 31 + "1", "spanId": "0" * 15 + "1", "name": "x",
                    "startTimeUnixNano": HUGE_INT, "endTimeUnixNano": 1e400}]}]}]}),
                headers=JSON_TYPE),
            "invalid_utf8_json": client.post(url, content=b'{"resourceSpans": "\xff\xfe"}',
                                             headers=JSON_TYPE),
            "invalid_utf8_protobuf": client.post(url, content=_invalid_utf8_request(),
                                                 headers=PROTOBUF),
        }
        oversize = client.post(url, content=b"\x00" * (2 * 1024 * 1024), headers=PROTOBUF)
        bomb = client.post(url, content=gzip.compress(b"\x00" * (8 * 1024 * 1024)),
                           headers={**PROTOBUF, "content-encoding": "gzip"})
    for name, answer in answers.items():
        assert answer.status_code == 400, (name, answer.status_code, answer.text[:200])
    assert oversize.status_code == 413
    assert bomb.status_code == 413
    _healthy_with_at_least(server, before)
    # Still taking exports after all of it.
    again = relocated_fixture("a_linear", end_unix_nano=time.time_ns(), tag="again")[0]
    assert _grpc_code(server, again) == grpc.StatusCode.OK


def test_hostile_junjo_payloads_replay_to_diagnostics_not_errors(make_server: MakeServer) -> None:
    server: Server = make_server()
    for name, (mutate, _) in JUNJO_CASES.items():
        assert _grpc_code(server, _spoiled_linear(name, mutate)) == grpc.StatusCode.OK, name
    server.wait_replayed()
    executions = server.get_json("/api/executions?limit=200")["executions"]
    by_case = {
        name: [e for e in executions if (e["store_id"] or "").endswith(f"-{name}")]
        for name in JUNJO_CASES
    }
    with httpx.Client(base_url=server.url, timeout=60) as client:
        for name, (_, expected) in JUNJO_CASES.items():
            assert by_case[name], f"{name}: the execution must be stored"
            for execution in by_case[name]:
                base = f"/api/executions/{execution['id']}"
                detail = client.get(base)
                assert detail.status_code == 200, (name, detail.text[:300])
                codes = {d["code"] for d in detail.json()["diagnostics"]}
                if expected is not None:
                    assert expected in codes, (name, codes)
                for suffix in ("/timeline", "/state", "/provenance?path=/x"):
                    answer = client.get(base + suffix)
                    # 404/400 with an explanation are documented; a 500 never is.
                    assert answer.status_code in (200, 400, 404), (name, suffix, answer.text)
                    assert "error" in answer.json() or answer.status_code == 200


def test_hostile_absurd_timestamps_are_stored_or_rejected_per_span(make_server: MakeServer) -> None:
    server: Server = make_server()
    now = time.time_ns()
    storable = [(0, 0), (now, now - 10**12), (2**63 - 1, 2**63 - 1)]
    request = ExportRequest()
    scope = request.resource_spans.add().scope_spans.add()
    trace_id = new_trace_id()
    for start, end in [*storable, (2**64 - 1, 2**64 - 1), (now, 2**63)]:
        scope.spans.append(Span(trace_id=trace_id, span_id=new_span_id(), name="t",
                                start_time_unix_nano=start, end_time_unix_nano=end))
    event_span = scope.spans.add(trace_id=trace_id, span_id=new_span_id(), name="event")
    event_span.events.add(name="e", time_unix_nano=2**64 - 1)
    odd_kind = scope.spans.add(trace_id=trace_id, span_id=new_span_id(), name="kind")
    odd_kind.kind = 2**31 - 1
    rejected, message = _partial_success(server, request.SerializeToString())
    assert rejected == 4
    assert "2262" in message
    assert server.get_json("/healthz")["spans"] == len(storable)


def test_hostile_span_with_100k_attributes_is_stored(make_server: MakeServer) -> None:
    server: Server = make_server()
    request = plain_request(new_trace_id(), [new_span_id()], start_unix_nano=1,
                            end_unix_nano=2)
    span = request.resource_spans[0].scope_spans[0].spans[0]
    for index in range(100_000):
        span.attributes.add(key=f"k{index}", value=common_pb2.AnyValue(int_value=index))
    started = time.monotonic()
    rejected, _ = _partial_success(server, request.SerializeToString())
    assert rejected == 0
    assert time.monotonic() - started < 30
    assert server.get_json("/healthz")["spans"] == 1


@pytest.mark.slow
def test_hostile_giant_strings_in_stored_columns_never_stop_storing(
    make_server: MakeServer,
) -> None:
    # Legal exports (under the 64 MiB receive limit) with one 24 MiB string where
    # statetrail keeps plain columns: a resource attribute and a Junjo store id.
    # DuckDB ran out of its 128 MB inside the commit; the export was retried
    # forever and every later one was acknowledged and never stored. Since a
    # store id of that size could also fail the rollback, it is now bounded.
    server: Server = make_server()
    giant = "x" * (24 * 1024 * 1024)
    resource = plain_request(new_trace_id(), [new_span_id()], start_unix_nano=1,
                             end_unix_nano=2)
    _set(resource.resource_spans[0].resource.attributes, "giant", string_value=giant)
    store = [
        _with_store_id(body, giant)
        for body in relocated_fixture("a_linear", end_unix_nano=time.time_ns(), tag="giant")
    ]
    after = plain_request(new_trace_id(), [new_span_id()], start_unix_nano=1, end_unix_nano=2)

    for body in (resource.SerializeToString(), *store, after.SerializeToString()):
        # Not "retry": the receiver waits through the store running out of memory
        # while the extractor stores the export alone at a raised limit.
        answer = trace_service_pb2.ExportTraceServiceResponse.FromString(
            export_raw(server.grpc_target, body, KEY, timeout=120)
        )
        assert answer.partial_success.rejected_spans == 0

    health = wait_until(
        lambda: server.get_json("/healthz"), until=lambda health: not health["backlog_bytes"],
        timeout=60, interval=0.5, what="an empty backlog",
    )  # fmt: skip
    stored_spans = health["spans"]
    quarantined = list((server.db.parent / f"{server.db.name}.spool" / "quarantine").glob("*.pb"))
    # Everything after the giants is stored; each giant is stored or kept in quarantine.
    expected = 1 + sum(len(list(_spans_of(body))) for body in store) + 1
    kept = sum(len(list(_spans_of(q.read_bytes()))) for q in quarantined)
    assert stored_spans + kept == expected
    transitions = server.get_json("/healthz")["transitions"]
    assert transitions > 0 and not quarantined  # both fit at the raised limit
    # The server still answers and stores.
    late = plain_request(new_trace_id(), [new_span_id()], start_unix_nano=1, end_unix_nano=2)
    export_raw(server.grpc_target, late.SerializeToString(), KEY)
    assert server.get_json("/healthz")["spans"] == stored_spans + 1


def _with_store_id(body: bytes, store_id: str) -> bytes:
    """The request with its first set_state event's store id replaced."""
    request = ExportRequest.FromString(body)
    events = (
        event
        for span in spans_of([request])
        for event in span.events
        if event.name == junjo.SET_STATE_EVENT
    )
    first = next(events, None)
    if first is not None:
        _set(first.attributes, junjo.STORE_ID, string_value=store_id)
    edited: bytes = request.SerializeToString()
    return edited


def _spans_of(body: bytes) -> Iterator[Span]:
    return spans_of([ExportRequest.FromString(body)])
