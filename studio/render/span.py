"""The span page's view model: one span's attributes and events, and what it was sent under.

Pure. The resource and instrumentation scope are shown from their own stored bytes,
as sent (OTLP types, repeated keys, bytes as hex, NaN); older rows show their JSON
attributes and say what was not recorded. Every value is cut at SPAN_VALUE_CHARS,
so a hostile span costs a bounded page.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from collector.decode.otlp import (
    AttributeValue,
    TypedAttribute,
    decode_resource,
    decode_scope,
    span_details,
    typed_attributes,
)
from collector.replay.jsondoc import parse_json
from collector.store.spans import ResourceRow, SpanRow
from studio.render.bounded import cut_text
from studio.render.llm import LlmView, llm_view
from studio.render.waterfall import SPAN_KINDS, attribute_text

# OTLP's Status.StatusCode, as the span page names it (a code OTLP does not define is
# shown as its number).
STATUS_CODES: Final = ("unset", "ok", "error")
# The most of one attribute value, name or message the span page holds.
SPAN_VALUE_CHARS: Final = 20_000


@dataclass(frozen=True, slots=True)
class ShownAttribute:
    """An attribute as a row of the page; `value_type` is "" where it was not recorded."""

    key: str
    value_type: str
    text: str


@dataclass(frozen=True, slots=True)
class Described:
    """A Resource or an InstrumentationScope as shown.

    `schema_url` and `dropped_attributes_count` are None where not recorded
    (rows stored before the resource's bytes were kept); "" is a URL not sent.
    """

    attributes: tuple[ShownAttribute, ...]
    schema_url: str | None
    dropped_attributes_count: int | None


@dataclass(frozen=True, slots=True)
class SentUnder:
    """The resource and instrumentation scope a span was exported under."""

    recorded: bool
    service_name: str
    resource: Described
    scope_name: str
    scope_version: str
    scope: Described


@dataclass(frozen=True, slots=True)
class ShownEvent:
    name: str
    offset_nano: int
    attributes: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class SpanView:
    """Everything the span page shows; `sent_under` is None if the span's resource is gone."""

    attributes: tuple[tuple[str, str], ...]
    events: tuple[ShownEvent, ...]
    # The span's own OTLP loss counters: what the SDK left out.
    dropped_attributes_count: int
    dropped_events_count: int
    dropped_links_count: int
    sent_under: SentUnder | None
    # The span's OTLP kind and status code in words (internal, server...; unset, ok, error).
    kind: str = ""
    status: str = ""
    name: str = ""
    status_message: str = ""
    # The span read as a chat (studio/render/llm.py), when a known convention describes it.
    llm: LlmView | None = None


def span_view(span: SpanRow, resource: ResourceRow | None) -> SpanView:
    details = span_details(span.raw)
    return SpanView(
        name=cut_text(span.name, SPAN_VALUE_CHARS),
        status_message=cut_text(span.status_message, SPAN_VALUE_CHARS),
        kind=_named(SPAN_KINDS, span.kind),
        status=_named(STATUS_CODES, span.status_code),
        attributes=_sorted_texts(details["attributes"]),
        events=tuple(
            ShownEvent(
                name=cut_text(event["name"], SPAN_VALUE_CHARS),
                offset_nano=max(event["time_unix_nano"] - span.start, 0),
                attributes=_sorted_texts(event["attributes"]),
            )
            for event in details["events"]
        ),
        dropped_attributes_count=details["dropped_attributes_count"],
        dropped_events_count=details["dropped_events_count"],
        dropped_links_count=details["dropped_links_count"],
        sent_under=None if resource is None else sent_under(resource),
        llm=llm_view(details["attributes"]),
    )


def _named(names: tuple[str, ...], code: int) -> str:
    return names[code] if 0 <= code < len(names) else str(code)


def sent_under(row: ResourceRow) -> SentUnder:
    """A stored resource row as shown, from its bytes when it has them."""
    if row.resource_raw is None or row.scope_raw is None:
        return _unrecorded(row)
    resource, scope = decode_resource(row.resource_raw), decode_scope(row.scope_raw)
    return SentUnder(
        recorded=True,
        service_name=row.service_name,
        resource=Described(
            _typed(typed_attributes(resource.attributes)),
            row.resource_schema_url,
            resource.dropped_attributes_count,
        ),
        scope_name=scope.name,
        scope_version=scope.version,
        scope=Described(
            _typed(typed_attributes(scope.attributes)),
            row.scope_schema_url,
            scope.dropped_attributes_count,
        ),
    )


def _unrecorded(row: ResourceRow) -> SentUnder:
    # Only what the JSON column kept: a key's last value, bytes already hex.
    attributes: Any = parse_json(row.attributes_json)
    if not isinstance(attributes, dict):
        attributes = {}
    return SentUnder(
        recorded=False,
        service_name=row.service_name,
        resource=Described(
            tuple(ShownAttribute(key, "", text) for key, text in _sorted_texts(attributes)),
            None,
            None,
        ),
        scope_name=row.scope_name,
        scope_version=row.scope_version,
        scope=Described((), None, None),
    )


def _typed(attributes: Iterable[TypedAttribute]) -> tuple[ShownAttribute, ...]:
    # In the order sent: with repeated keys, the order says which value a reader finds.
    return tuple(
        ShownAttribute(
            cut_text(a.key, SPAN_VALUE_CHARS), a.value_type,
            cut_text(_typed_text(a.value), SPAN_VALUE_CHARS),
        )
        for a in attributes
    )


def _typed_text(value: AttributeValue) -> str:
    # The type is shown beside the value, so bytes read as their hex digits and
    # a double as Python writes it (nan, inf), not as JSON text.
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, float):
        return repr(value)
    return attribute_text(value)


def _sorted_texts(attributes: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(
        sorted(
            (cut_text(key, SPAN_VALUE_CHARS), cut_text(attribute_text(value), SPAN_VALUE_CHARS))
            for key, value in attributes.items()
        )
    )
