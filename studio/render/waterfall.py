"""View model of a trace for the execution page: a span tree drawn as a Gantt waterfall.

Pure: stored span rows in, template rows out. Bars are in integer units of an SVG
viewBox `SCALE` wide (attributes, which the CSP allows; no time divided into a
float). `set_state` events are only counted: the timeline shows every one, and
decoding them would cost most of the page's time. Values are cut at
ATTRIBUTE_PREVIEW_CHARS and MESSAGE_CHARS, so a hostile span costs a bounded page.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from collector.decode.otlp import AttributeValue, decode_attributes, decode_span, json_safe
from collector.model import ExecutionStatus, span_subtree
from collector.producers.junjo import (
    CANCELLED,
    CANCELLED_REASON,
    DEFINITION_ID,
    ERROR_TYPE,
    OWNER_SPAN_TYPES,
    SET_STATE_EVENT,
    STRUCTURAL_ID,
    span_status,
)
from collector.store.spans import SpanRow
from studio.render.bounded import cut_line, cut_text
from studio.render.llm import LlmSummary, llm_summary

SCALE: Final = 1000
TICKS: Final = 4
ATTRIBUTE_PREVIEW_CHARS: Final = 400
MESSAGE_CHARS: Final = 4000
NAME_CHARS: Final = 200
EXCEPTION_EVENT: Final = "exception"
SPAN_KINDS: Final = ("unspecified", "internal", "server", "client", "producer", "consumer")


@dataclass(frozen=True, slots=True)
class Attribute:
    """One attribute as text; `preview` is cut to ATTRIBUTE_PREVIEW_CHARS when `truncated`."""

    key: str
    preview: str
    length: int
    truncated: bool


@dataclass(frozen=True, slots=True)
class SpanException:
    """An `exception` event: what was raised, and where (the stack trace may be empty)."""

    type: str
    message: str
    stacktrace: str
    offset_nano: int


@dataclass(frozen=True, slots=True)
class SpanEvent:
    """Any other event worth showing (hook errors, user events), with its attributes."""

    name: str
    offset_nano: int
    attributes: tuple[Attribute, ...]


@dataclass(frozen=True, slots=True)
class WaterfallRow:
    """One span in tree order: depth for indentation, `x`/`width` in viewBox units."""

    span_id: str
    parent_span_id: str
    name: str
    depth: int
    span_type: str | None
    kind: str
    service: str
    scope: str
    offset_nano: int
    duration_nano: int
    x: int
    width: int
    status: ExecutionStatus
    status_message: str
    error_type: str | None
    cancelled_reason: str | None
    structural_id: str | None
    # `junjo.executable_definition_id`: the node's (or subflow's) runtime id in
    # its owner's own graph snapshot.
    definition_id: str | None
    exceptions: tuple[SpanException, ...]
    events: tuple[SpanEvent, ...]
    set_state_count: int
    dropped_events: int
    attributes: tuple[Attribute, ...]
    in_execution: bool
    is_owner: bool
    # The run an owner span (workflow, subflow, agent) stands for, to link to.
    run_id: str | None = None
    # An LLM, tool or agent span: its conversation is drawn on the span page.
    llm: LlmSummary | None = None


@dataclass(frozen=True, slots=True)
class Tick:
    """A time-axis mark: `x` in viewBox units, `offset_nano` since the trace began."""

    x: int
    offset_nano: int


@dataclass(frozen=True, slots=True)
class Waterfall:
    rows: tuple[WaterfallRow, ...]
    start: int
    duration_nano: int
    ticks: tuple[Tick, ...]

    def row(self, span_id: str) -> WaterfallRow | None:
        return next((row for row in self.rows if row.span_id == span_id), None)


def build_waterfall(spans: Sequence[SpanRow], owner_span_id: str | None) -> Waterfall:
    """The trace's spans in depth-first order, children by start time.

    A span whose parent never arrived becomes a root, so nothing is hidden.
    `owner_span_id` marks the execution's own span and its subtree.
    """
    if not spans:
        return Waterfall((), 0, 0, ())
    start = min(span.start for span in spans)
    end = max(max(span.end, span.start) for span in spans)
    total = max(end - start, 1)
    ordered = _tree_order(spans)
    inside = (
        span_subtree(owner_span_id, [(s.span_id, s.parent_span_id) for s in spans])
        if owner_span_id
        else frozenset()
    )
    rows = tuple(
        _row(span, depth, start, total, span.span_id in inside, span.span_id == owner_span_id)
        for span, depth in ordered
    )
    ticks = tuple(Tick(i * SCALE // TICKS, i * total // TICKS) for i in range(TICKS + 1))
    return Waterfall(rows, start, end - start, ticks)


def owning_runs(waterfall: Waterfall) -> dict[str, str]:
    """Each span's run: the run id of the nearest owner span at or above it in the trace.

    Spans outside any owner (an HTTP handler around a workflow) have no entry.
    """
    by_id = {row.span_id: row for row in waterfall.rows}
    owners: dict[str, str] = {}
    for row in waterfall.rows:
        seen: set[str] = set()
        current: WaterfallRow | None = row
        while current is not None and current.span_id not in seen:
            if current.run_id is not None:
                owners[row.span_id] = current.run_id
                break
            seen.add(current.span_id)
            current = by_id.get(current.parent_span_id)
    return owners


def own_level(rows: Sequence[WaterfallRow], owner: WaterfallRow) -> list[WaterfallRow]:
    """The spans an owner span's run ran itself, in tree order; not the owner's own.

    Spans below a nested owner (a subflow, a workflow run inside a node, an
    agent) belong to that owner's run, so they are left out; the nested owner's
    own span is in.
    """
    by_id = {row.span_id: row for row in rows}
    return [row for row in rows if _run_above(row, owner.span_id, by_id)]


def _run_above(row: WaterfallRow, owner_span_id: str, by_id: dict[str, WaterfallRow]) -> bool:
    """Whether the nearest owner span above `row` is the one with `owner_span_id`."""
    seen = {row.span_id}
    parent = by_id.get(row.parent_span_id)
    while parent is not None and parent.span_id not in seen:
        if parent.span_id == owner_span_id:
            return True
        if parent.span_type in OWNER_SPAN_TYPES:
            return False
        seen.add(parent.span_id)
        parent = by_id.get(parent.parent_span_id)
    return False


def attribute_text(value: AttributeValue) -> str:
    """An attribute value as people read it: strings as-is, anything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(json_safe(value), ensure_ascii=False)


def preview_attributes(attributes: dict[str, AttributeValue]) -> tuple[Attribute, ...]:
    """Attributes sorted by key, each cut to a preview (state payloads run to megabytes)."""
    shown: list[Attribute] = []
    for key in sorted(attributes):
        text = attribute_text(attributes[key])
        cut = len(text) > ATTRIBUTE_PREVIEW_CHARS
        shown.append(Attribute(key, text[:ATTRIBUTE_PREVIEW_CHARS], len(text), cut))
    return tuple(shown)


def _tree_order(spans: Sequence[SpanRow]) -> list[tuple[SpanRow, int]]:
    by_id = {span.span_id: span for span in spans}
    children: dict[str, list[SpanRow]] = {}
    roots: list[SpanRow] = []
    for span in spans:
        if span.parent_span_id and span.parent_span_id in by_id:
            children.setdefault(span.parent_span_id, []).append(span)
        else:
            roots.append(span)
    ordered: list[tuple[SpanRow, int]] = []
    seen: set[str] = set()
    pending = [(root, 0) for root in reversed(_by_start(roots))]
    while pending:
        span, depth = pending.pop()
        if span.span_id in seen:
            continue
        seen.add(span.span_id)
        ordered.append((span, depth))
        for child in reversed(_by_start(children.get(span.span_id, []))):
            pending.append((child, depth + 1))
    # A parent cycle (corrupt ids) leaves spans unreached from any root; show them last.
    ordered += [(span, 0) for span in spans if span.span_id not in seen]
    return ordered


def _by_start(spans: Iterable[SpanRow]) -> list[SpanRow]:
    return sorted(spans, key=lambda span: (span.start, span.span_id))


def _row(
    span: SpanRow, depth: int, start: int, total: int, in_execution: bool, is_owner: bool
) -> WaterfallRow:
    decoded = decode_span(span.raw)
    attributes = decode_attributes(decoded.attributes)
    exceptions: list[SpanException] = []
    events: list[SpanEvent] = []
    set_states = 0
    for event in decoded.events:
        if event.name == SET_STATE_EVENT:
            set_states += 1
            continue
        offset = max(event.time_unix_nano - span.start, 0)
        values = decode_attributes(event.attributes)
        if event.name == EXCEPTION_EVENT:
            exceptions.append(
                SpanException(
                    cut_line(_text(values.get("exception.type")), NAME_CHARS),
                    _message(values.get("exception.message")),
                    _message(values.get("exception.stacktrace")),
                    offset,
                )
            )
        else:
            events.append(
                SpanEvent(cut_line(event.name, NAME_CHARS), offset, preview_attributes(values))
            )
    duration = max(span.end - span.start, 0)
    x = (span.start - start) * SCALE // total
    cancelled = attributes.get(CANCELLED) is True
    structural = attributes.get(STRUCTURAL_ID)
    definition = attributes.get(DEFINITION_ID)
    return WaterfallRow(
        span_id=span.span_id,
        parent_span_id=span.parent_span_id,
        name=cut_line(span.name, NAME_CHARS),
        depth=depth,
        span_type=span.span_type,
        kind=SPAN_KINDS[span.kind] if 0 <= span.kind < len(SPAN_KINDS) else str(span.kind),
        service=span.service_name,
        scope=span.scope_name,
        offset_nano=span.start - start,
        duration_nano=duration,
        x=x,
        # At least one unit wide, so a span of a few microseconds is still visible.
        width=max(min(duration * SCALE // total, SCALE - x), 1),
        status=span_status(span.status_code, cancelled),
        status_message=cut_text(span.status_message, MESSAGE_CHARS),
        error_type=cut_line(_text(attributes.get(ERROR_TYPE)), NAME_CHARS) or None,
        cancelled_reason=_message(attributes.get(CANCELLED_REASON)) or None if cancelled else None,
        structural_id=structural if isinstance(structural, str) else None,
        definition_id=definition if isinstance(definition, str) else None,
        exceptions=tuple(exceptions),
        events=tuple(events),
        set_state_count=set_states,
        dropped_events=decoded.dropped_events_count,
        attributes=preview_attributes(attributes),
        in_execution=in_execution,
        is_owner=is_owner,
        run_id=span.runtime_id if span.span_type in OWNER_SPAN_TYPES and span.runtime_id else None,
        llm=llm_summary(attributes),
    )


def _message(value: AttributeValue) -> str:
    return cut_text(_text(value), MESSAGE_CHARS)


def _text(value: AttributeValue) -> str:
    if value is None:
        return ""
    return attribute_text(value)
