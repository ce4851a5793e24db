"""Test-only loader: Junjo fixture captures -> the records replay consumes.

Reads the protobuf generic JSON of each `request_NNNN.json` (ids base64, int64
as strings) and builds `Execution`, `Transition` and `EvidenceSpan` records the
way the collector would, independently of `collector.decode.otlp`/`collector.producers.junjo`,
so replay is tested against the captures themselves.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from collector.model import EvidenceSpan, Execution, Transition
from support.servers import FIXTURES

OWNER_TYPES = frozenset({"workflow", "subflow"})

Attributes = dict[str, Any]


@dataclass(frozen=True)
class FixtureRecords:
    name: str
    manifest: dict[str, Any]
    executions: tuple[Execution, ...]
    transitions: tuple[Transition, ...]
    spans: tuple[EvidenceSpan, ...]
    parents: dict[str, str]

    @property
    def root(self) -> Execution:
        """The top-level workflow execution."""
        return next(e for e in self.executions if e.kind == "workflow")

    def by_name(self, name: str) -> Execution:
        return next(e for e in self.executions if e.name == name)

    def subtree(self, span_id: str) -> frozenset[str]:
        """`span_id` and every span below it."""
        children: dict[str, list[str]] = {}
        for child, parent in self.parents.items():
            children.setdefault(parent, []).append(child)
        found, pending = set(), [span_id]
        while pending:
            current = pending.pop()
            found.add(current)
            pending.extend(children.get(current, ()))
        return frozenset(found)

    def expected_final_state(self) -> Any:
        outcome = self.manifest["outcome"]
        for key in ("final_state", "state_at_failure", "telemetry_projection"):
            if key in outcome:
                return outcome[key]
        return None


def fixture_names() -> list[str]:
    return sorted(p.name for p in FIXTURES.iterdir() if (p / "manifest.json").exists())


@cache
def load(name: str) -> FixtureRecords:
    folder = FIXTURES / name
    executions: list[Execution] = []
    transitions: list[Transition] = []
    spans: list[EvidenceSpan] = []
    parents: dict[str, str] = {}
    for span, service in _spans(folder):
        attrs = _attributes(span.get("attributes", []))
        trace_id, span_id = _hex(span["traceId"]), _hex(span["spanId"])
        if span.get("parentSpanId"):
            parents[span_id] = _hex(span["parentSpanId"])
        spans.append(
            EvidenceSpan(
                trace_id=trace_id,
                span_id=span_id,
                name=span["name"],
                span_type=attrs.get("junjo.span_type"),
                dropped_attributes_count=int(span.get("droppedAttributesCount", 0)),
                dropped_events_count=int(span.get("droppedEventsCount", 0)),
                dropped_links_count=int(span.get("droppedLinksCount", 0)),
            )
        )
        if attrs.get("junjo.span_type") in OWNER_TYPES:
            executions.append(_execution(span, attrs, service))
        for index, event in enumerate(span.get("events", [])):
            if event["name"] == "set_state":
                version = attrs.get("junjo.telemetry.contract_version")
                transitions.append(_transition(span, event, index, version))
    manifest = json.loads((folder / "manifest.json").read_text())
    return FixtureRecords(
        name, manifest, tuple(executions), tuple(transitions), tuple(spans), parents
    )


def _spans(folder: Path) -> Iterator[tuple[dict[str, Any], str]]:
    for path in sorted(folder.glob("request_*.json")):
        if path.name.endswith(".meta.json"):
            continue
        request = json.loads(path.read_text())
        for resource_spans in request.get("resourceSpans", []):
            resource = _attributes(resource_spans.get("resource", {}).get("attributes", []))
            for scope_spans in resource_spans.get("scopeSpans", []):
                for span in scope_spans.get("spans", []):
                    yield span, str(resource.get("service.name", ""))


def _attributes(items: list[dict[str, Any]]) -> Attributes:
    decoded: Attributes = {}
    for item in items:
        (kind, value), *_ = item["value"].items()
        decoded[item["key"]] = int(value) if kind == "intValue" else value
    return decoded


def _hex(value: str) -> str:
    return base64.b64decode(value).hex()


def _execution(span: dict[str, Any], attrs: Attributes, service: str) -> Execution:
    status = span.get("status", {}).get("code") == "STATUS_CODE_ERROR"
    return Execution(
        run_id=attrs["junjo.executable_runtime_id"],
        kind=attrs["junjo.span_type"],
        name=span["name"],
        service=service,
        trace_id=_hex(span["traceId"]),
        span_id=_hex(span["spanId"]),
        parent_span_id=_hex(span["parentSpanId"]) if span.get("parentSpanId") else "",
        parent_run_id=attrs.get("junjo.parent_executable_runtime_id"),
        status="error" if status else "ok",
        status_message=span.get("status", {}).get("message", ""),
        error_type=attrs.get("error.type"),
        start_unix_nano=int(span["startTimeUnixNano"]),
        end_unix_nano=int(span["endTimeUnixNano"]),
        store_id=attrs.get("junjo.workflow.store.id"),
        parent_store_id=attrs.get("junjo.workflow.parent_store.id"),
        state_start=attrs.get("junjo.workflow.state.start"),
        state_start_mode=attrs.get("junjo.workflow.state.start.mode"),
        state_start_policy=attrs.get("junjo.workflow.state.start.policy"),
        state_end=attrs.get("junjo.workflow.state.end"),
        state_end_mode=attrs.get("junjo.workflow.state.end.mode"),
        state_end_policy=attrs.get("junjo.workflow.state.end.policy"),
        revision_start=attrs.get("junjo.store.revision.start"),
        revision_end=attrs.get("junjo.store.revision.end"),
        transition_start=attrs.get("junjo.store.transition.start"),
        transition_end=attrs.get("junjo.store.transition.end"),
        transition_count=attrs.get("junjo.store.transition.count"),
        reconstructable=attrs.get("junjo.store.reconstructable"),
        graph_snapshot=attrs.get("junjo.workflow.execution_graph_snapshot"),
        contract_version=attrs.get("junjo.telemetry.contract_version"),
        definition_id=attrs.get("junjo.executable_definition_id"),
        structural_id=attrs.get("junjo.executable_structural_id"),
        cancelled_reason=attrs.get("junjo.cancelled_reason"),
        correlation_type=attrs.get("junjo.correlation.type"),
        correlation_id=attrs.get("junjo.correlation.id"),
        application_store_id=attrs.get("junjo.agent.application_store.id"),
        application_transition_start=attrs.get("junjo.agent.application_store.transition.start"),
        application_transition_end=attrs.get("junjo.agent.application_store.transition.end"),
    )


def _transition(
    span: dict[str, Any], event: dict[str, Any], index: int, version: int | None
) -> Transition:
    attrs = _attributes(event.get("attributes", []))
    return Transition(
        store_id=attrs["junjo.store.id"],
        sequence=attrs.get("junjo.store.transition.sequence"),
        store_name=attrs.get("junjo.store.name", ""),
        action=attrs.get("junjo.store.action", ""),
        revision_before=attrs.get("junjo.store.revision.before"),
        revision_after=attrs.get("junjo.store.revision.after"),
        patch_json=attrs["junjo.state_json_patch"],
        patch_mode=attrs.get("junjo.state_json_patch.mode", "full"),
        patch_policy=attrs.get("junjo.state_json_patch.policy", ""),
        event_id=attrs.get("id", ""),
        trace_id=_hex(span["traceId"]),
        span_id=_hex(span["spanId"]),
        event_index=index,
        time_unix_nano=int(event["timeUnixNano"]),
        contract_version=version,
        span_name=span["name"],
    )
