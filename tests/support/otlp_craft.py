"""Hand-built OTLP requests for the tests: plain spans, relocated and renewed fixtures.

Three kinds: plain spans with chosen ids and times (`plain_request`), spans
under a chosen resource and scope (`request_under`), and copies of a captured
Junjo fixture moved in time with fresh trace, run and store ids
(`relocated_fixture`), so one fixture yields any number of distinct executions
at any age.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Sequence

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from collector.producers import junjo
from support.servers import fixture_requests

ExportRequest = trace_service_pb2.ExportTraceServiceRequest
DAY_NANOS = 86_400 * 1_000_000_000
# Attribute values that name a run or a store: renamed in a relocated copy.
_ID_KEYS = frozenset({
    junjo.RUNTIME_ID, junjo.RUNTIME_ID_V1, junjo.PARENT_RUNTIME_ID, junjo.WORKFLOW_STORE_ID,
    junjo.WORKFLOW_PARENT_STORE_ID, junjo.AGENT_STORE_ID, junjo.STORE_ID,
})


def new_trace_id() -> bytes:
    return os.urandom(16)


def new_span_id() -> bytes:
    return os.urandom(8)


def plain_request(
    trace_id: bytes,
    span_ids: Sequence[bytes],
    *,
    start_unix_nano: int,
    end_unix_nano: int,
    service: str = "statetrail-test",
) -> ExportRequest:
    """One resource, one scope, one span per id, all in one trace."""
    request = ExportRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.add(
        key="service.name", value=common_pb2.AnyValue(string_value=service)
    )
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.name = "statetrail.tests"
    for index, span_id in enumerate(span_ids):
        scope_spans.spans.append(
            trace_pb2.Span(
                trace_id=trace_id,
                span_id=span_id,
                name=f"span-{index}",
                start_time_unix_nano=start_unix_nano,
                end_time_unix_nano=end_unix_nano,
            )
        )
    return request


def request_under(
    resource: resource_pb2.Resource,
    scope: common_pb2.InstrumentationScope,
    spans: Iterable[trace_pb2.Span],
    *,
    resource_schema_url: str = "",
    scope_schema_url: str = "",
) -> ExportRequest:
    """These spans sent under exactly this resource and scope, with these schema URLs."""
    request = ExportRequest()
    resource_spans = request.resource_spans.add(schema_url=resource_schema_url)
    resource_spans.resource.CopyFrom(resource)
    scope_spans = resource_spans.scope_spans.add(schema_url=scope_schema_url)
    scope_spans.scope.CopyFrom(scope)
    scope_spans.spans.extend(spans)
    return request


def relocated_fixture(scenario: str, *, end_unix_nano: int, tag: str) -> list[bytes]:
    """A scenario's requests with new trace/run/store ids, ending at `end_unix_nano`."""
    requests = [ExportRequest.FromString(body) for body, _ in fixture_requests(scenario)]
    spans = [span for request in requests for span in _spans(request)]
    shift = end_unix_nano - max(span.end_time_unix_nano for span in spans)
    traces: dict[bytes, bytes] = {}
    for span in spans:
        span.trace_id = traces.setdefault(span.trace_id, new_trace_id())
        for link in span.links:
            link.trace_id = traces.setdefault(link.trace_id, new_trace_id())
        span.start_time_unix_nano += shift
        span.end_time_unix_nano += shift
        _rename_ids(span.attributes, tag)
        for event in span.events:
            event.time_unix_nano += shift
            _rename_ids(event.attributes, tag)
    return [request.SerializeToString() for request in requests]


def _spans(request: ExportRequest) -> Iterable[trace_pb2.Span]:
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            yield from scope_spans.spans


def spans_of(requests: Iterable[ExportRequest]) -> Iterator[trace_pb2.Span]:
    """Every span of these requests, in order, for editing in place."""
    for request in requests:
        yield from _spans(request)


# Values that identify a run, a store, a definition or an event: renewed in a
# variant so it is a different run with a different store, not a retry.
VARIANT_ID_KEYS = frozenset({
    "id",
    junjo.DEFINITION_ID,
    junjo.RUNTIME_ID,
    "junjo.parent_executable_definition_id",
    junjo.PARENT_RUNTIME_ID,
    junjo.WORKFLOW_STORE_ID,
    junjo.WORKFLOW_PARENT_STORE_ID,
    junjo.STORE_ID,
})


def fresh_id(old: str, tag: str, size: int) -> str:
    """A deterministic new hex id for `old` under `tag` (the same input, the same id)."""
    return hashlib.blake2b(f"{tag}:{old}".encode(), digest_size=16).hexdigest()[:size]


def variant(tag: str, scenario: str = "a_linear") -> list[ExportRequest]:
    """The scenario's requests, decoded, with every trace, span and Junjo id renewed."""
    requests = [ExportRequest.FromString(body) for body, _ in fixture_requests(scenario)]
    for span in spans_of(requests):
        span.trace_id = bytes.fromhex(fresh_id(span.trace_id.hex(), tag, 32))
        span.span_id = bytes.fromhex(fresh_id(span.span_id.hex(), tag, 16))
        if span.parent_span_id:
            span.parent_span_id = bytes.fromhex(fresh_id(span.parent_span_id.hex(), tag, 16))
        for attributes in (span.attributes, *(event.attributes for event in span.events)):
            for item in attributes:
                if item.key in VARIANT_ID_KEYS and item.value.string_value:
                    item.value.string_value = fresh_id(item.value.string_value, tag, 21)
    return requests


def _rename_ids(attributes: Iterable[common_pb2.KeyValue], tag: str) -> None:
    for attribute in attributes:
        if attribute.key in _ID_KEYS and attribute.value.HasField("string_value"):
            attribute.value.string_value = f"{attribute.value.string_value}-{tag}"


def long_run(tag: str, steps: int) -> ExportRequest:
    """a_linear renewed under `tag` as one verified run of `steps` transitions, named
    "Long Workflow".

    Its node spans carry `steps` set_state events between them (a counter replaced and an
    item appended at every step, a note every fifth), and the workflow span the start and
    end states and counts that agree, so the replay verifies every step.
    """
    (request,) = variant(tag)
    spans = list(_spans(request))
    workflow = next(span for span in spans if span.name.endswith("Workflow"))
    nodes = [span for span in spans if span is not workflow]
    workflow.name = "Long Workflow"
    template = trace_pb2.Span.Event()
    template.CopyFrom(nodes[0].events[0])
    start: dict[str, object] = {"count": 0, "items": [], "note": "", "title": "long run"}
    end_state: dict[str, object] = {**start, "items": [f"item {n}" for n in range(1, steps + 1)]}
    patches = []
    for sequence in range(1, steps + 1):
        patch: list[dict[str, object]] = [
            {"op": "replace", "path": "/count", "value": sequence},
            {"op": "add", "path": f"/items/{sequence - 1}", "value": f"item {sequence}"},
        ]
        if sequence % 5 == 0:
            patch.append({"op": "replace", "path": "/note", "value": f"note at {sequence}"})
            end_state["note"] = f"note at {sequence}"
        patches.append(patch)
    end_state["count"] = steps
    share = -(-steps // len(nodes))
    for index, node in enumerate(nodes):
        del node.events[:]
        mine = range(index * share + 1, min((index + 1) * share, steps) + 1)
        span_nanos = node.end_time_unix_nano - node.start_time_unix_nano
        for offset, sequence in enumerate(mine):
            event = node.events.add()
            event.CopyFrom(template)
            event.time_unix_nano = node.start_time_unix_nano + span_nanos * (offset + 1) // (
                len(mine) + 1
            )
            _set(event.attributes, junjo.EVENT_ID, string_value=f"{tag}-event-{sequence}")
            _set(event.attributes, junjo.STORE_ACTION, string_value=f"step_{sequence % 7}")
            _set(event.attributes, junjo.SEQUENCE, int_value=sequence)
            _set(event.attributes, junjo.REVISION_BEFORE, int_value=sequence - 1)
            _set(event.attributes, junjo.REVISION_AFTER, int_value=sequence)
            _set(event.attributes, junjo.PATCH,
                 string_value=json.dumps(patches[sequence - 1]))  # fmt: skip
    for key, value in ((junjo.WORKFLOW_STATE_START, start), (junjo.WORKFLOW_STATE_END, end_state)):
        _set(workflow.attributes, key, string_value=json.dumps(value, sort_keys=True))
    for key in (junjo.TRANSITION_END, junjo.TRANSITION_COUNT, junjo.REVISION_END):
        _set(workflow.attributes, key, int_value=steps)
    return request


def _set(
    attributes: Iterable[common_pb2.KeyValue],
    key: str,
    *,
    string_value: str | None = None,
    int_value: int | None = None,
) -> None:
    for attribute in attributes:
        if attribute.key == key:
            if string_value is not None:
                attribute.value.string_value = string_value
            else:
                attribute.value.int_value = int_value or 0
            return
    raise KeyError(key)
