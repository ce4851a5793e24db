"""OTLP trace requests read through a second schema, made for storing spans fast.

Pure, part of the decode stage. The generated classes model attributes as a repeated
KeyValue, walked in Python one wrapper object at a time, which was most of
extraction. Two facts of the wire format do better without changing what is stored:

- A `map<string, V>` is encoded exactly like a repeated KeyValue, so read as a map a
  span's attributes are a C hash table (a repeated key keeps its last value, as
  `decode.decode_attributes` does).
- An embedded message is encoded exactly like `bytes`, so spans, the Resource and the
  InstrumentationScope are read as the bytes they arrived in: stored byte for byte,
  never serialized again, and parsed once per ResourceSpans/ScopeSpans.

Only the fields extraction reads are declared; the studio decodes the rest from the
stored bytes. One reading differs, only for bytes no exporter writes: a KeyValue with
a field OTLP does not define is left out of the map (extraction sees the attribute as
absent and replay reports the hole; the stored span keeps it), and a Resource or
scope sent twice in one message is read as its last copy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Protocol, cast

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

_PACKAGE: Final = "statetrail.otlp_view"
_Field = descriptor_pb2.FieldDescriptorProto
_OPTIONAL: Final = _Field.LABEL_OPTIONAL
_REPEATED: Final = _Field.LABEL_REPEATED


class EventView(Protocol):
    """A span event with its attributes by key (values are OTLP AnyValue)."""

    time_unix_nano: int
    name: str
    attributes: Mapping[str, common_pb2.AnyValue]


class SpanView(Protocol):
    """The fields of an OTLP Span that are stored as columns or extracted from."""

    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes
    name: str
    kind: int
    start_time_unix_nano: int
    end_time_unix_nano: int
    attributes: Mapping[str, common_pb2.AnyValue]
    dropped_attributes_count: int
    events: Sequence[EventView]
    dropped_events_count: int
    dropped_links_count: int
    status: trace_pb2.Status

    def ParseFromString(self, data: bytes) -> int: ...


class ScopeSpansView(Protocol):
    # The InstrumentationScope's own bytes (empty when absent).
    scope: bytes
    spans: Sequence[bytes]
    schema_url: str


class ResourceSpansView(Protocol):
    # The Resource's own bytes (empty when absent).
    resource: bytes
    scope_spans: Sequence[ScopeSpansView]
    schema_url: str


class RequestView(Protocol):
    """An ExportTraceServiceRequest (or TracesData: the same wire format)."""

    resource_spans: Sequence[ResourceSpansView]

    def ParseFromString(self, data: bytes) -> int: ...


def _schema() -> descriptor_pb2.FileDescriptorProto:
    # Field numbers and types are those of opentelemetry/proto/trace/v1/trace.proto.
    file = descriptor_pb2.FileDescriptorProto(
        name="statetrail/otlp_view.proto",
        package=_PACKAGE,
        syntax="proto3",
        dependency=[
            common_pb2.DESCRIPTOR.name,
            trace_pb2.DESCRIPTOR.name,
        ],
    )
    request = file.message_type.add(name="Request")
    _add(request, "resource_spans", 1, _Field.TYPE_MESSAGE, _REPEATED, f".{_PACKAGE}.ResourceSpans")

    resource_spans = file.message_type.add(name="ResourceSpans")
    _add(resource_spans, "resource", 1, _Field.TYPE_BYTES)
    scope_spans_type = f".{_PACKAGE}.ScopeSpans"
    _add(resource_spans, "scope_spans", 2, _Field.TYPE_MESSAGE, _REPEATED, scope_spans_type)
    _add(resource_spans, "schema_url", 3, _Field.TYPE_STRING)

    scope_spans = file.message_type.add(name="ScopeSpans")
    _add(scope_spans, "scope", 1, _Field.TYPE_BYTES)
    _add(scope_spans, "spans", 2, _Field.TYPE_BYTES, _REPEATED)
    _add(scope_spans, "schema_url", 3, _Field.TYPE_STRING)

    event = file.message_type.add(name="Event")
    _add(event, "time_unix_nano", 1, _Field.TYPE_FIXED64)
    _add(event, "name", 2, _Field.TYPE_STRING)
    _add_attribute_map(event, 3)

    span = file.message_type.add(name="Span")
    _add(span, "trace_id", 1, _Field.TYPE_BYTES)
    _add(span, "span_id", 2, _Field.TYPE_BYTES)
    _add(span, "parent_span_id", 4, _Field.TYPE_BYTES)
    _add(span, "name", 5, _Field.TYPE_STRING)
    # An open enum on the wire; int32 reads any value the real field would.
    _add(span, "kind", 6, _Field.TYPE_INT32)
    _add(span, "start_time_unix_nano", 7, _Field.TYPE_FIXED64)
    _add(span, "end_time_unix_nano", 8, _Field.TYPE_FIXED64)
    _add_attribute_map(span, 9)
    _add(span, "dropped_attributes_count", 10, _Field.TYPE_UINT32)
    _add(span, "events", 11, _Field.TYPE_MESSAGE, _REPEATED, f".{_PACKAGE}.Event")
    _add(span, "dropped_events_count", 12, _Field.TYPE_UINT32)
    _add(span, "dropped_links_count", 14, _Field.TYPE_UINT32)
    _add(span, "status", 15, _Field.TYPE_MESSAGE, type_name=_otlp(trace_pb2.Status))
    return file


def _otlp(message: Any) -> str:
    return f".{message.DESCRIPTOR.full_name}"


def _add(
    message: descriptor_pb2.DescriptorProto,
    name: str,
    number: int,
    kind: int,
    label: int = _OPTIONAL,
    type_name: str = "",
) -> None:
    field = message.field.add(name=name, number=number, type=kind, label=label)
    if type_name:
        field.type_name = type_name


def _add_attribute_map(message: descriptor_pb2.DescriptorProto, number: int) -> None:
    """`map<string, AnyValue> attributes`: the wire format of `repeated KeyValue`."""
    entry = message.nested_type.add(name="AttributesEntry")
    entry.options.map_entry = True
    _add(entry, "key", 1, _Field.TYPE_STRING)
    _add(entry, "value", 2, _Field.TYPE_MESSAGE, type_name=_otlp(common_pb2.AnyValue))
    entry_type = f".{_PACKAGE}.{message.name}.AttributesEntry"
    _add(message, "attributes", number, _Field.TYPE_MESSAGE, _REPEATED, entry_type)


def _message_classes() -> tuple[type[RequestView], type[SpanView]]:
    pool = descriptor_pool.Default()
    pool.Add(_schema())
    request = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.Request"))
    span = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.Span"))
    return cast("type[RequestView]", request), cast("type[SpanView]", span)


_Request, _Span = _message_classes()


def parse_request_view(body: bytes) -> RequestView:
    """Parse an export request; spans stay bytes. Raises protobuf's DecodeError."""
    request = _Request()
    request.ParseFromString(body)
    return request


def parse_span_view(raw: bytes) -> SpanView:
    """Parse one span's bytes (from `parse_request_view`). Raises protobuf's DecodeError."""
    span = _Span()
    span.ParseFromString(raw)
    return span
