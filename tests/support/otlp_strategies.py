"""Hypothesis strategies for OTLP trace requests: random messages, and mutated captures.

Random fields are mostly valid and often Junjo-shaped (`_PLAUSIBLE`), so that
executions and transitions really get built; the rest is anything the wire
allows. Used by the fuzz tests and by the wire-schema equivalence tests.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from collector.producers import junjo
from support.servers import FIXTURES

ExportRequest = trace_service_pb2.ExportTraceServiceRequest
AnyValue = common_pb2.AnyValue
KeyValue = common_pb2.KeyValue

_INT64 = st.integers(-(2**63), 2**63 - 1)
_JSON_TEXT = st.one_of(
    st.sampled_from([
        "{}", "[]", '{"a": 1}', "null", "1e400", "NaN", "[" * 3000 + "]" * 3000,
        '{"a":' * 300 + "1" + "}" * 300, '[{"op":"add","path":"/a","value":1}]',
        '[{"op":"replace","path":"/a/0","value":{"b":[1,2]}}]', '[{"op":"move","from":"/a",'
        '"path":"/b"}]', '[{"op":"remove","path":"/~2"}]', "[{}]", '[{"op":"test"}]',
        "1" + "0" * 400, '{"x": -1e999}', "\ud7ff",
    ]),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner,
                                                                    max_size=4),
        max_leaves=6,
    ).map(json.dumps),
    st.text(max_size=40),
)


def _any_values() -> st.SearchStrategy[AnyValue]:
    scalars = st.one_of(
        st.builds(lambda v: AnyValue(string_value=v), st.text(max_size=20) | _JSON_TEXT),
        st.builds(lambda v: AnyValue(bool_value=v), st.booleans()),
        st.builds(lambda v: AnyValue(int_value=v), _INT64),
        st.builds(lambda v: AnyValue(double_value=v), st.floats()),
        st.builds(lambda v: AnyValue(bytes_value=v), st.binary(max_size=16)),
        st.just(AnyValue()),
    )

    def containers(inner: st.SearchStrategy[AnyValue]) -> st.SearchStrategy[AnyValue]:
        def array(values: list[AnyValue]) -> AnyValue:
            value = AnyValue()
            value.array_value.values.extend(values)
            return value

        def kvlist(pairs: list[tuple[str, AnyValue]]) -> AnyValue:
            value = AnyValue()
            value.kvlist_value.values.extend(KeyValue(key=k, value=v) for k, v in pairs)
            return value

        return st.lists(inner, max_size=3).map(array) | st.lists(
            st.tuples(st.text(max_size=6), inner), max_size=3
        ).map(kvlist)

    return st.recursive(scalars, containers, max_leaves=4)


_ANY_VALUES = _any_values()
_SPAN_KEYS = [
    junjo.SPAN_TYPE, junjo.CONTRACT_VERSION, junjo.RUNTIME_ID, junjo.RUNTIME_ID_V1,
    junjo.PARENT_RUNTIME_ID, junjo.PARENT_TYPE, junjo.WORKFLOW_STATE_START,
    junjo.WORKFLOW_STATE_END, junjo.WORKFLOW_STORE_ID, junjo.AGENT_STATE_START,
    junjo.AGENT_STORE_ID, junjo.TRANSITION_START, junjo.TRANSITION_END, junjo.TRANSITION_COUNT,
    junjo.REVISION_START, junjo.REVISION_END, junjo.RECONSTRUCTABLE, junjo.CANCELLED,
    junjo.WORKFLOW_STATE_START + junjo.MODE_SUFFIX, "service.name", "other",
]
_EVENT_KEYS = [
    junjo.STORE_ID, junjo.SEQUENCE, junjo.STORE_NAME, junjo.STORE_ACTION, junjo.PATCH,
    junjo.REVISION_BEFORE, junjo.REVISION_AFTER, junjo.EVENT_ID,
    junjo.PATCH + junjo.MODE_SUFFIX, "other",
]
# Junjo values of the right type, drawn often enough that executions and
# transitions really get built and replayed, not only refused.
_PLAUSIBLE: dict[str, st.SearchStrategy[AnyValue]] = {
    junjo.SPAN_TYPE: st.sampled_from(["workflow", "subflow", "agent", "node", "x"]).map(
        lambda v: AnyValue(string_value=v)),
    junjo.RUNTIME_ID: st.sampled_from(["run-a", "run-b"]).map(lambda v: AnyValue(string_value=v)),
    junjo.WORKFLOW_STORE_ID: st.just(AnyValue(string_value="store-a")),
    junjo.STORE_ID: st.sampled_from(["store-a", "store-b"]).map(
        lambda v: AnyValue(string_value=v)),
    junjo.SEQUENCE: st.integers(-2, 6).map(lambda v: AnyValue(int_value=v)),
    junjo.TRANSITION_START: st.integers(-1, 3).map(lambda v: AnyValue(int_value=v)),
    junjo.TRANSITION_END: st.integers(0, 8).map(lambda v: AnyValue(int_value=v)),
    junjo.CONTRACT_VERSION: st.sampled_from([1, 2, 3, 99, 2**40]).map(
        lambda v: AnyValue(int_value=v)),
    junjo.WORKFLOW_STATE_START: _JSON_TEXT.map(lambda v: AnyValue(string_value=v)),
    junjo.WORKFLOW_STATE_END: _JSON_TEXT.map(lambda v: AnyValue(string_value=v)),
    junjo.PATCH: _JSON_TEXT.map(lambda v: AnyValue(string_value=v)),
}


def _attributes(keys: list[str]) -> st.SearchStrategy[list[KeyValue]]:
    def value_for(key: str) -> st.SearchStrategy[AnyValue]:
        plausible = _PLAUSIBLE.get(key)
        return _ANY_VALUES if plausible is None else plausible | _ANY_VALUES

    pair = st.one_of(
        [st.builds(KeyValue, key=st.just(key), value=value_for(key)) for key in keys]
    )
    return st.lists(pair, max_size=6)


def _mostly(valid: st.SearchStrategy[Any], anything: st.SearchStrategy[Any]) -> Any:
    """`valid` four times in five: random fields would otherwise almost never all be valid."""
    return st.tuples(st.integers(0, 4), valid, anything).map(
        lambda drawn: drawn[2] if drawn[0] == 4 else drawn[1]
    )


# Well-formed ids repeat, so spans share traces and duplicates occur.
_IDS = _mostly(st.sampled_from([b"\x01" * 16, b"\x02" * 16]), st.binary(max_size=20))
_SPAN_IDS = _mostly(
    st.integers(1, 2**64 - 1).map(lambda n: n.to_bytes(8, "big")), st.binary(max_size=12)
)
_TIMES = _mostly(st.integers(10**18, 10**18 + 10**6), st.integers(0, 2**64 - 1))
_ENUM = st.integers(-(2**31), 2**31 - 1)


@st.composite
def _events(draw: st.DrawFn) -> trace_pb2.Span.Event:
    event = trace_pb2.Span.Event(
        name=draw(st.sampled_from([junjo.SET_STATE_EVENT, "other"])),
        time_unix_nano=draw(_TIMES),
        dropped_attributes_count=draw(st.integers(0, 2**32 - 1)),
    )
    event.attributes.extend(draw(_attributes(_EVENT_KEYS)))
    return event


@st.composite
def _spans(draw: st.DrawFn) -> trace_pb2.Span:
    span = trace_pb2.Span(
        trace_id=draw(_IDS),
        span_id=draw(_SPAN_IDS),
        parent_span_id=draw(_mostly(st.just(b""), _SPAN_IDS)),
        name=draw(st.text(max_size=10)),
        kind=draw(_mostly(st.integers(0, 5), _ENUM)),
        start_time_unix_nano=draw(_TIMES),
        end_time_unix_nano=draw(_TIMES),
        dropped_attributes_count=draw(st.integers(0, 2**32 - 1)),
        dropped_events_count=draw(st.integers(0, 2**32 - 1)),
    )
    span.status.code = draw(_mostly(st.integers(0, 2), _ENUM))
    span.status.message = draw(st.text(max_size=10))
    span.attributes.extend(draw(_attributes(_SPAN_KEYS)))
    span.events.extend(draw(st.lists(_events(), max_size=3)))
    return span


@st.composite
def requests(draw: st.DrawFn) -> ExportRequest:
    request = ExportRequest()
    for _ in range(draw(st.integers(1, 2))):
        resource_spans = request.resource_spans.add()
        resource_spans.resource.attributes.extend(draw(_attributes(["service.name", "r"])))
        resource_spans.resource.dropped_attributes_count = draw(st.integers(0, 2**32 - 1))
        resource_spans.schema_url = draw(st.text(max_size=8))
        scope_spans = resource_spans.scope_spans.add()
        scope_spans.scope.name = draw(st.text(max_size=8))
        scope_spans.scope.version = draw(st.text(max_size=4))
        scope_spans.scope.attributes.extend(draw(_attributes(["s"])))
        scope_spans.scope.dropped_attributes_count = draw(st.integers(0, 2**32 - 1))
        scope_spans.schema_url = draw(st.text(max_size=8))
        scope_spans.spans.extend(draw(st.lists(_spans(), min_size=1, max_size=3)))
    return request


def fixture_bodies() -> list[bytes]:
    return [path.read_bytes() for path in sorted(Path(FIXTURES).glob("*/request_*.pb"))]


@st.composite
def mutated_bytes(draw: st.DrawFn) -> bytes:
    bodies = fixture_bodies()
    body = bytearray(draw(st.sampled_from(bodies)))
    how = draw(st.sampled_from(["flip", "truncate", "splice", "all"]))
    if how in ("flip", "all"):
        for position in draw(st.lists(st.integers(0, len(body) - 1), min_size=1, max_size=8)):
            body[position] ^= 1 << draw(st.integers(0, 7))
    if how in ("truncate", "all"):
        body = body[: draw(st.integers(0, len(body)))]
    if how in ("splice", "all"):
        other = draw(st.sampled_from(bodies))
        cut, at = draw(st.integers(0, len(body))), draw(st.integers(0, len(other)))
        body = body[:cut] + other[at:]
    return bytes(body)
