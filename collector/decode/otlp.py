"""Decode stage: OTLP protobuf -> plain span records.

Invariant: nothing here touches storage or the network, and every id leaves as
lowercase hex and every time as integer nanoseconds. Turning every attribute into
Python objects is costly, so a span is kept whole as the bytes it arrived in (decoded
lazily when someone looks at it), only queried columns are decoded here, and
extraction reads the few attributes it needs by key (collector/decode/wire.py). The
Resource and InstrumentationScope are kept as their own bytes too (`ResourceRecord`).
"""

from __future__ import annotations

import hashlib
import json
import math
import operator
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, NamedTuple, TypeAlias, TypeVar, assert_never, cast

from google.protobuf import message
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from collector.decode import wire

ExportRequestPB2: TypeAlias = trace_service_pb2.ExportTraceServiceRequest
SpanPB2: TypeAlias = trace_pb2.Span
AnyValuePB2: TypeAlias = common_pb2.AnyValue
KeyValuePB2: TypeAlias = common_pb2.KeyValue
ResourcePB2: TypeAlias = resource_pb2.Resource
ScopePB2: TypeAlias = common_pb2.InstrumentationScope

AttributeValue: TypeAlias = (
    str | bool | int | float | bytes | list["AttributeValue"] | dict[str, "AttributeValue"] | None
)
Attributes: TypeAlias = dict[str, AttributeValue]
# Attributes by key with their values still protobuf (collector/decode/wire.py reads
# them as a map): for readers that want a few known keys of a known type.
AttributeValues: TypeAlias = Mapping[str, AnyValuePB2]

_ValueCase = Literal[
    "string_value",
    "bool_value",
    "int_value",
    "double_value",
    "bytes_value",
    "array_value",
    "kvlist_value",
]

SERVICE_NAME_KEY = "service.name"
UNKNOWN_SERVICE = "unknown_service"
TRACE_ID_BYTES = 16
SPAN_ID_BYTES = 8
# Times are stored as signed 64-bit nanoseconds (DuckDB BIGINT, up to 2262);
# OTLP's fixed64 allows twice that, which no column could hold.
MAX_UNIX_NANO = 2**63 - 1
# Span kind and status code are open proto3 enums: any int32 can arrive. A value
# OTLP does not define (yet) is stored as sent, as receivers must stay forward
# compatible; the columns are TINYINT, so past this a span is rejected rather
# than stored with another value.
MAX_ENUM_VALUE = 127


class DecodeError(ValueError):
    """The request body is not an OTLP ExportTraceServiceRequest."""


# What protobuf raises for bytes it cannot parse.
_PROTOBUF_ERRORS: Final = (message.DecodeError, RuntimeWarning)


@dataclass(frozen=True, slots=True)
class ResourceRecord:
    """A resource + scope pair as sent, content-addressed so repeats are stored once.

    Their own protobuf bytes are kept, so every attribute keeps its type; the decoded
    columns are for queries. The key covers the bytes and both schema URLs: whatever
    tells two resources apart makes them two rows.
    """

    key: str
    service_name: str
    scope_name: str
    scope_version: str
    attributes_json: str
    resource_raw: bytes
    resource_schema_url: str
    scope_raw: bytes
    scope_schema_url: str


class SpanRecord(NamedTuple):
    """One span as stored: its queryable columns, and its bytes as received."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: int
    start_unix_nano: int
    end_unix_nano: int
    status_code: int
    status_message: str
    resource: ResourceRecord
    dropped_attributes_count: int
    dropped_events_count: int
    dropped_links_count: int
    event_count: int
    raw: bytes


class DecodedSpan(NamedTuple):
    """A span as stored, and as parsed through collector/decode/wire.py for extraction.

    Kept apart because the parsed view is several times the size of the
    span's bytes: it is let go once extracted (encode.exports.batch_from_export).
    """

    record: SpanRecord
    view: wire.SpanView


@dataclass(frozen=True, slots=True)
class RejectedSpan:
    """A span that cannot be stored, with the reason reported to the exporter."""

    name: str
    reason: str


def parse_request(body: bytes) -> ExportRequestPB2:
    """Parse protobuf bytes, turning the library's error into ours."""
    return _parsed(ExportRequestPB2(), body, "body is not an ExportTraceServiceRequest")


def iter_spans(body: bytes) -> Iterator[DecodedSpan | RejectedSpan]:
    """Yield a record for every span in an export request's bytes, in request order, read
    through wire.py's schema. Raises DecodeError if the body is not an export request."""
    try:
        request = wire.parse_request_view(body)
    except _PROTOBUF_ERRORS as exc:
        raise DecodeError(f"body is not an ExportTraceServiceRequest: {exc}") from exc
    for resource_spans in request.resource_spans:
        service_name, attributes_json = _resource_columns(resource_spans.resource)
        for scope_spans in resource_spans.scope_spans:
            resource = _resource_record(resource_spans, scope_spans, service_name, attributes_json)
            for raw in scope_spans.spans:
                yield _span_record(raw, resource)


def _resource_columns(raw: bytes) -> tuple[str, str]:
    """A Resource's service name and its attributes as JSON: once per ResourceSpans."""
    attributes = decode_attributes(decode_resource(raw).attributes)
    service = attributes.get(SERVICE_NAME_KEY)
    service_name = service if isinstance(service, str) and service else UNKNOWN_SERVICE
    return service_name, _json_text(attributes, sort_keys=True)


def _resource_record(
    resource_spans: wire.ResourceSpansView,
    scope_spans: wire.ScopeSpansView,
    service_name: str,
    attributes_json: str,
) -> ResourceRecord:
    scope = decode_scope(scope_spans.scope)
    return ResourceRecord(
        key=_content_key(
            resource_spans.resource,
            resource_spans.schema_url.encode(),
            scope_spans.scope,
            scope_spans.schema_url.encode(),
        ),
        service_name=service_name,
        scope_name=scope.name,
        scope_version=scope.version,
        attributes_json=attributes_json,
        resource_raw=resource_spans.resource,
        resource_schema_url=resource_spans.schema_url,
        scope_raw=scope_spans.scope,
        scope_schema_url=scope_spans.schema_url,
    )


def _content_key(*parts: bytes) -> str:
    # Each part is prefixed with its length: bytes can hold any separator.
    digest = hashlib.blake2b(digest_size=12)
    for part in parts:
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return digest.hexdigest()


def screen(request: ExportRequestPB2) -> tuple[int, list[RejectedSpan]]:
    """How many spans of a request can be stored, and why the others cannot.

    The same checks `iter_spans` makes, without building records: receivers
    answer partial success from this before the request is processed.
    """
    accepted = 0
    rejected: list[RejectedSpan] = []
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                reason = rejection_reason(span)
                if reason is None:
                    accepted += 1
                else:
                    rejected.append(RejectedSpan(span.name, reason))
    return accepted, rejected


def rejection_reason(span: SpanPB2 | wire.SpanView) -> str | None:
    """Why a span cannot be stored, or None if it can.

    Runs for every span before an export is acknowledged, so each field is
    read once and compared in C (`== _ZERO_TRACE_ID`, not `any(...)`).
    """
    trace_id = span.trace_id
    if len(trace_id) != TRACE_ID_BYTES or trace_id == _ZERO_TRACE_ID:
        return "trace_id must be 16 bytes (32 hex digits in OTLP JSON) and not all zero"
    span_id = span.span_id
    if len(span_id) != SPAN_ID_BYTES or span_id == _ZERO_SPAN_ID:
        return "span_id must be 8 bytes (16 hex digits in OTLP JSON) and not all zero"
    parent_span_id = span.parent_span_id
    if parent_span_id and len(parent_span_id) != SPAN_ID_BYTES:
        return "parent_span_id must be empty or 8 bytes (16 hex digits in OTLP JSON)"
    # Found by the hostile-input tests: a value outside a column's range killed the
    # writer thread, after which no export was ever acknowledged again.
    events = span.events
    if max(span.start_time_unix_nano, span.end_time_unix_nano) > MAX_UNIX_NANO or (
        events and max(map(_EVENT_TIME, events)) > MAX_UNIX_NANO
    ):
        return "times must be before 2262 (int64 nanoseconds)"
    if not 0 <= span.kind <= MAX_ENUM_VALUE or not 0 <= span.status.code <= MAX_ENUM_VALUE:
        return f"kind and status code must be 0-{MAX_ENUM_VALUE} (OTLP defines 0-5 and 0-2)"
    return None


# In C: a generator over the events was a quarter of screening (py-spy, under load).
_EVENT_TIME: Final = operator.attrgetter("time_unix_nano")
_ZERO_TRACE_ID: Final = bytes(TRACE_ID_BYTES)
_ZERO_SPAN_ID: Final = bytes(SPAN_ID_BYTES)


def _span_record(raw: bytes, resource: ResourceRecord) -> DecodedSpan | RejectedSpan:
    try:
        span = wire.parse_span_view(raw)
    except _PROTOBUF_ERRORS as exc:
        raise DecodeError(f"a span does not decode: {exc}") from exc
    reason = rejection_reason(span)
    if reason is not None:
        return RejectedSpan(span.name, reason)
    status = span.status
    # Positional, in SpanRecord's field order: by keyword, NamedTuple's __new__
    # binds the names in Python, a noticeable part of decoding a span.
    record = SpanRecord(
        span.trace_id.hex(),
        span.span_id.hex(),
        span.parent_span_id.hex(),
        span.name,
        span.kind,
        span.start_time_unix_nano,
        span.end_time_unix_nano,
        status.code,
        status.message,
        resource,
        span.dropped_attributes_count,
        span.dropped_events_count,
        span.dropped_links_count,
        len(span.events),
        raw,
    )
    return DecodedSpan(record, span)


def decode_value(value: AnyValuePB2) -> AttributeValue:
    """One OTLP AnyValue as a plain Python value (bytes stay bytes)."""
    case = cast("_ValueCase | None", value.WhichOneof("value"))
    if case is None:
        return None
    if case == "string_value":
        return value.string_value
    if case == "bool_value":
        return value.bool_value
    if case == "int_value":
        return value.int_value
    if case == "double_value":
        return value.double_value
    if case == "bytes_value":
        return value.bytes_value
    if case == "array_value":
        return [decode_value(item) for item in value.array_value.values]
    if case == "kvlist_value":
        return decode_attributes(value.kvlist_value.values)
    assert_never(case)


def decode_attributes(attributes: Any) -> Attributes:
    """A repeated KeyValue field as a dict; a repeated key keeps its last value."""
    return {kv.key: decode_value(kv.value) for kv in attributes}


# Reading a oneof member that is not set gives its default (0, "", False), so a
# value other than the default proves the member is the one set; only a
# default needs the WhichOneof check. Wrong types read as absent, never coerced.


def string_attribute(values: AttributeValues, key: str) -> str | None:
    value = values.get(key)
    if value is None:
        return None
    text: str = value.string_value
    return text if text or value.WhichOneof("value") == "string_value" else None


def int_attribute(values: AttributeValues, key: str) -> int | None:
    value = values.get(key)
    if value is None:
        return None
    number: int = value.int_value
    return number if number or value.WhichOneof("value") == "int_value" else None


def bool_attribute(values: AttributeValues, key: str) -> bool | None:
    value = values.get(key)
    if value is None or value.WhichOneof("value") != "bool_value":
        return None
    flag: bool = value.bool_value
    return flag


def decode_span(raw: bytes) -> SpanPB2:
    """A stored span back into protobuf, for the pages that show every detail."""
    span = SpanPB2()
    span.ParseFromString(raw)
    return span


def decode_resource(raw: bytes) -> ResourcePB2:
    """A Resource's own bytes (from a request, or stored) as protobuf. Raises DecodeError."""
    return _parsed(ResourcePB2(), raw, "a resource does not decode")


def decode_scope(raw: bytes) -> ScopePB2:
    """An InstrumentationScope's own bytes as protobuf. Raises DecodeError."""
    return _parsed(ScopePB2(), raw, "an instrumentation scope does not decode")


_Message = TypeVar("_Message", bound=message.Message)


def _parsed(empty: _Message, raw: bytes, failure: str) -> _Message:
    """`empty` parsed from `raw`; the library's error as a DecodeError saying `failure`."""
    try:
        empty.ParseFromString(raw)
    except _PROTOBUF_ERRORS as exc:
        raise DecodeError(f"{failure}: {exc}") from exc
    return empty


class TypedAttribute(NamedTuple):
    """One KeyValue as sent: its value's OTLP type named ("bytes", "double", ...)."""

    key: str
    value_type: str
    value: AttributeValue


def typed_attributes(attributes: Iterable[KeyValuePB2]) -> list[TypedAttribute]:
    """A repeated KeyValue field in order, a repeated key as often as it was sent.

    Unlike `decode_attributes`, for the pages that show what was sent rather
    than what a reader of a key would find. An unset value is typed "empty".
    """
    return [
        TypedAttribute(
            kv.key,
            (kv.value.WhichOneof("value") or "empty").removesuffix("_value"),
            decode_value(kv.value),
        )
        for kv in attributes
    ]


def span_details(raw: bytes) -> dict[str, Any]:
    """Everything about a stored span that the studio shows, as plain JSON values."""
    span = decode_span(raw)
    return {
        "attributes": json_safe(decode_attributes(span.attributes)),
        "dropped_attributes_count": span.dropped_attributes_count,
        "dropped_events_count": span.dropped_events_count,
        "dropped_links_count": span.dropped_links_count,
        "events": [
            {
                "name": event.name,
                "time_unix_nano": event.time_unix_nano,
                "attributes": json_safe(decode_attributes(event.attributes)),
                "dropped_attributes_count": event.dropped_attributes_count,
            }
            for event in span.events
        ],
        "links": [
            {
                "trace_id": link.trace_id.hex(),
                "span_id": link.span_id.hex(),
                "attributes": json_safe(decode_attributes(link.attributes)),
            }
            for link in span.links
        ],
    }


def json_safe(value: AttributeValue | Mapping[str, AttributeValue]) -> Any:
    """Attribute values with bytes shown as hex, so they serialize as JSON."""
    return json.loads(_json_text(value))


def _json_text(value: AttributeValue | Mapping[str, AttributeValue], **options: Any) -> str:
    """Strict JSON (RFC 8259) for attribute values: NaN and infinities, which the JSON
    column would refuse (with the whole commit), are written as strings; the span's
    own bytes keep the real value."""
    try:
        return json.dumps(value, default=_json_default, allow_nan=False, **options)
    except ValueError:
        return json.dumps(_finite(value), default=_json_default, allow_nan=False, **options)


def _finite(value: Any) -> Any:
    # Recursion is bounded: protobuf refuses messages nested deeper than 100.
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, list):
        return [_finite(item) for item in value]
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    return value


def _json_default(value: object) -> str:
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(f"cannot serialize {type(value).__name__}")
