"""collector/decode/wire.py reads OTLP through its own schema: it must agree with the real one.

Receivers check a request with the generated OTLP classes; storing reads the
same bytes through wire.py (attributes as maps, spans as their own bytes). These
tests hold the two readings together: on the captured requests, on random
messages, and on mutated bytes, every span is kept byte for byte, and every
attribute read by key gives what decoding the whole attribute list gives.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from google.protobuf.unknown_fields import UnknownFieldSet
from hypothesis import HealthCheck, given, settings
from opentelemetry.proto.trace.v1 import trace_pb2
from support.otlp_strategies import (
    AnyValue,
    ExportRequest,
    KeyValue,
    fixture_bodies,
    mutated_bytes,
    requests,
)

from collector.decode.otlp import (
    AttributeValue,
    AttributeValues,
    DecodedSpan,
    DecodeError,
    RejectedSpan,
    ResourceRecord,
    bool_attribute,
    decode_attributes,
    decode_resource,
    decode_scope,
    decode_span,
    int_attribute,
    iter_spans,
    parse_request,
    string_attribute,
)
from collector.decode.wire import parse_span_view


def _spans(request: ExportRequest) -> list[trace_pb2.Span]:
    return [span for span, _, _ in _placed_spans(request)]


def _placed_spans(
    request: ExportRequest,
) -> list[tuple[trace_pb2.Span, trace_pb2.ResourceSpans, trace_pb2.ScopeSpans]]:
    return [
        (span, resource_spans, scope_spans)
        for resource_spans in request.resource_spans
        for scope_spans in resource_spans.scope_spans
        for span in scope_spans.spans
    ]


def _assert_same_spans(body: bytes) -> None:
    """Every span read through wire.py is the span the real schema reads, byte for byte."""
    expected = _placed_spans(parse_request(body))
    records = list(iter_spans(body))
    assert len(records) == len(expected)
    for decoded, (span, resource_spans, scope_spans) in zip(records, expected, strict=True):
        if isinstance(decoded, RejectedSpan):
            assert decoded.name == span.name
            continue
        record, view = decoded
        _assert_same_resource(record.resource, resource_spans, scope_spans, body)
        assert decode_span(record.raw) == span
        assert record.raw in body
        assert (record.trace_id, record.span_id) == (span.trace_id.hex(), span.span_id.hex())
        assert record.event_count == len(span.events)
        _assert_same_attributes(view.attributes, span.attributes)
        for event_view, event in zip(view.events, span.events, strict=True):
            assert event_view.name == event.name
            assert event_view.time_unix_nano == event.time_unix_nano
            _assert_same_attributes(event_view.attributes, event.attributes)


def _assert_same_resource(
    resource: ResourceRecord,
    resource_spans: trace_pb2.ResourceSpans,
    scope_spans: trace_pb2.ScopeSpans,
    body: bytes,
) -> None:
    """The resource and scope are kept as their own bytes, which read as the real schema's."""
    assert decode_resource(resource.resource_raw) == resource_spans.resource
    assert decode_scope(resource.scope_raw) == scope_spans.scope
    assert resource.resource_raw in body and resource.scope_raw in body
    assert resource.resource_schema_url == resource_spans.schema_url
    assert resource.scope_schema_url == scope_spans.schema_url
    assert (resource.scope_name, resource.scope_version) == (
        scope_spans.scope.name, scope_spans.scope.version,
    )


def _assert_same_attributes(view: AttributeValues, attributes: Iterable[KeyValue]) -> None:
    # A KeyValue carrying a field OTLP does not define (only mutated bytes have
    # one) is not in the map: see collector/decode/wire.py. Its key reads as the
    # well-formed KeyValues with that key say, or as absent.
    decoded = decode_attributes(kv for kv in attributes if not UnknownFieldSet(kv))
    keys = {kv.key for kv in attributes} | {"absent"}
    for key in keys:
        value = decoded.get(key)
        assert string_attribute(view, key) == _typed(value, str), key
        assert int_attribute(view, key) == _int(value), key
        assert bool_attribute(view, key) == _typed(value, bool), key


def _typed(value: AttributeValue, kind: type) -> object:
    return value if isinstance(value, kind) else None


def _int(value: AttributeValue) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@pytest.mark.parametrize("body", fixture_bodies(), ids=lambda body: f"{len(body)}B")
def test_wire_reads_every_captured_request_as_the_otlp_schema_does(body: bytes) -> None:
    _assert_same_spans(body)


@pytest.mark.slow
@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(request=requests())
def test_wire_reads_random_requests_as_the_otlp_schema_does(request: ExportRequest) -> None:
    _assert_same_spans(request.SerializeToString())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=mutated_bytes())
def test_wire_accepts_whatever_the_otlp_schema_accepts(body: bytes) -> None:
    """Receivers acknowledge what the real schema parses; storing must parse it too."""
    try:
        parse_request(body)
    except DecodeError:
        return
    _assert_same_spans(body)


def test_wire_attribute_readers_keep_the_last_of_a_repeated_key_and_refuse_wrong_types() -> None:
    span = trace_pb2.Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
    span.attributes.extend([
        KeyValue(key="name", value=AnyValue(string_value="first")),
        KeyValue(key="name", value=AnyValue(string_value="last")),
        KeyValue(key="empty", value=AnyValue(string_value="")),
        KeyValue(key="zero", value=AnyValue(int_value=0)),
        KeyValue(key="flag", value=AnyValue(bool_value=False)),
        KeyValue(key="unset", value=AnyValue()),
    ])  # fmt: skip
    view = parse_span_view(span.SerializeToString()).attributes
    assert string_attribute(view, "name") == "last"
    # Defaults are real values when their member is the one set...
    assert (string_attribute(view, "empty"), int_attribute(view, "zero")) == ("", 0)
    assert bool_attribute(view, "flag") is False
    # ...and absent when another member (or none) is set: never coerced.
    assert int_attribute(view, "flag") is None
    assert bool_attribute(view, "zero") is None
    assert string_attribute(view, "zero") is None
    assert int_attribute(view, "name") is None
    assert string_attribute(view, "unset") is None
    assert string_attribute(view, "missing") is None
    assert "missing" not in view  # reading never adds a key


def test_wire_span_that_does_not_decode_is_a_decode_error() -> None:
    request = ExportRequest()
    scope_spans = request.resource_spans.add().scope_spans.add()
    scope_spans.spans.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="ok")
    body = request.SerializeToString()
    # The span's name (field 5) made invalid UTF-8: both schemas refuse it.
    spoiled = body.replace(b"\x2a\x02ok", b"\x2a\x02\xff\xfe")
    assert spoiled != body
    with pytest.raises(DecodeError):
        parse_request(spoiled)
    with pytest.raises(DecodeError):
        list(iter_spans(spoiled))
    assert [type(decoded) for decoded in iter_spans(body)] == [DecodedSpan]


def test_wire_resource_key_tells_apart_what_the_json_attributes_do_not() -> None:
    def key(blob: AnyValue, resource_url: str = "", scope_url: str = "") -> str:
        request = ExportRequest()
        resource_spans = request.resource_spans.add(schema_url=resource_url)
        resource_spans.resource.attributes.add(key="blob", value=blob)
        scope_spans = resource_spans.scope_spans.add(schema_url=scope_url)
        scope_spans.spans.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
        (decoded,) = iter_spans(request.SerializeToString())
        assert isinstance(decoded, DecodedSpan)
        return decoded.record.resource.key

    as_bytes, as_string = AnyValue(bytes_value=b"\x00\xff"), AnyValue(string_value="00ff")
    assert key(as_bytes) == key(AnyValue(bytes_value=b"\x00\xff"))
    assert len({key(as_bytes), key(as_string), key(as_bytes, "u"), key(as_bytes, "", "u")}) == 4
