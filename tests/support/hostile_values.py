"""Hostile values in every Junjo field that reaches a page, and the pages that show them.

Each case spoils every span of a relocated `a_linear` run in one way (a deep
or a huge value in a patch, the start or end state, the graph snapshot, a node
span's attributes, an error), so one export is one run that a test (or a
reproduction script) can open on every page and JSON twin in `pages_of`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from collector.producers import junjo
from support.otlp_craft import ExportRequest, relocated_fixture, spans_of

Span = trace_pb2.Span
Mutate = Callable[[Span], None]
# What a browser would run if a value escaped its escaping.
SCRIPT_PROBE = "<img src=x onerror=\"document.title='pwned'\">"


def deep_array(levels: int, leaf: str = '"' + SCRIPT_PROBE.replace('"', '\\"') + '"') -> str:
    return "[" * levels + leaf + "]" * levels


def deep_object(levels: int) -> str:
    return '{"a":' * levels + '"' + SCRIPT_PROBE.replace('"', '\\"') + '"' + "}" * levels


def set_attribute(attributes: Any, key: str, *, string_value: str) -> None:
    for attribute in attributes:
        if attribute.key == key:
            attribute.value.CopyFrom(common_pb2.AnyValue(string_value=string_value))
            return
    attributes.add(key=key, value=common_pb2.AnyValue(string_value=string_value))


def patch_values(value: str) -> Mutate:
    """Every set_state event's patch writes `value` (JSON text) at /x."""

    def mutate(span: Span) -> None:
        for event in span.events:
            if event.name == junjo.SET_STATE_EVENT:
                set_attribute(
                    event.attributes, junjo.PATCH,
                    string_value=f'[{{"op":"add","path":"/x","value":{value}}}]',
                )
    return mutate


def workflow_attribute(key: str, value: str) -> Mutate:
    """The workflow span's attribute `key` (a state or the graph snapshot) is `value`."""

    def mutate(span: Span) -> None:
        if any(a.key == junjo.WORKFLOW_STATE_START for a in span.attributes):
            set_attribute(span.attributes, key, string_value=value)
    return mutate


def node_attribute(value: str) -> Mutate:
    """Every node span carries `value` as an application attribute."""

    def mutate(span: Span) -> None:
        if any(a.key == junjo.SPAN_TYPE and a.value.string_value == "node"
               for a in span.attributes):
            set_attribute(span.attributes, "app.payload", string_value=value)
    return mutate


def node_error(message: str) -> Mutate:
    """The last node span fails with `message` as its status and exception message."""

    def mutate(span: Span) -> None:
        if span.name == "FinishNode":
            span.status.code = trace_pb2.Status.STATUS_CODE_ERROR
            span.status.message = message
            set_attribute(span.attributes, junjo.ERROR_TYPE, string_value="ValueError")
            event = span.events.add(name="exception", time_unix_nano=span.end_time_unix_nano)
            set_attribute(event.attributes, "exception.type", string_value="ValueError")
            set_attribute(event.attributes, "exception.message", string_value=message)
            set_attribute(event.attributes, "exception.stacktrace", string_value=message)
    return mutate


def stacked_patches(levels_per_patch: int) -> Mutate:
    """Each patch nests another `levels_per_patch` levels under the last one's deepest.

    Every payload stays within the parser's depth limit, but the state they
    build grows past it: a deep state no single telemetry field carries.
    """
    state = {"depth": 0}

    def mutate(span: Span) -> None:
        for event in span.events:
            if event.name != junjo.SET_STATE_EVENT:
                continue
            path = "/x" + "/a" * state["depth"]
            value = deep_object(levels_per_patch)
            set_attribute(
                event.attributes, junjo.PATCH,
                string_value=f'[{{"op":"add","path":"{path}","value":{value}}}]',
            )
            state["depth"] += levels_per_patch
    return mutate


def spoiled_run(tag: str, *mutations: Mutate) -> bytes:
    """A fresh a_linear run (ids ending in `-tag`) with each span spoiled by `mutations`."""
    body = relocated_fixture("a_linear", end_unix_nano=time.time_ns(), tag=tag)[0]
    request = ExportRequest.FromString(body)
    for span in spans_of([request]):
        for mutate in mutations:
            mutate(span)
    spoiled: bytes = request.SerializeToString()
    return spoiled


def pages_of(
    run_id: str, other_run_id: str, node_span_id: str, owner_span_id: str
) -> dict[str, str]:
    """Every page and JSON twin that shows some part of a run, by a short name."""
    base = f"/executions/{run_id}"
    api = f"/api/executions/{run_id}"
    return {
        "page": base,
        "page_step1": base + "?step=1",
        "page_step8": base + "?step=8",
        "page_recorded": base + "?state=recorded",
        "page_provenance": base + "?step=8&path=/x",
        "provenance_partial": base + "/provenance?step=8&path=/x",
        "span_page": f"{base}/spans/{node_span_id}",
        "owner_span_page": f"{base}/spans/{owner_span_id}",
        "compare": f"/compare?a={run_id}&b={other_run_id}",
        "api_detail": api,
        "api_timeline": api + "/timeline",
        "api_state": api + "/state?sequence=8",
        "api_provenance": api + "/provenance?path=/x",
        "api_compare": f"/api/compare?a={run_id}&b={other_run_id}",
    }
