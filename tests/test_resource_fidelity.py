"""The resource and scope a span was sent under are stored as sent, and shown so.

Crafted exports go to a real server over gRPC and OTLP/HTTP, in the trace of a
real Junjo run so the studio's span page can show them. What was sent is read
back three ways: the span page, the DuckDB file once the server has stopped,
and the Store opened on that file. Before, the resource lived only as JSON
text (bytes 00ff read as the string "00ff", NaN as "nan", a repeated key kept
its last value) and schema URLs, scope attributes and dropped counts were lost.
"""

from __future__ import annotations

import math
import re
import time
from html import unescape
from typing import Any

import duckdb
import httpx
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2
from support.otlp_craft import ExportRequest, new_span_id, relocated_fixture, request_under
from support.polling import wait_until
from support.servers import FIXTURE_API_KEY, MakeServer, Server, export_raw

from collector.decode.otlp import decode_resource, decode_scope
from collector.store import Store

GRPC_KEY = [("x-junjo-api-key", FIXTURE_API_KEY)]
HTTP_HEADERS = {"content-type": "application/x-protobuf", "x-junjo-api-key": FIXTURE_API_KEY}
RESOURCE_URL = "https://opentelemetry.io/schemas/1.26.0"
OTHER_RESOURCE_URL = "https://opentelemetry.io/schemas/1.27.0"
SCOPE_URL = "https://example.com/schemas/scope/3"
OTHER_SCOPE_URL = "https://example.com/schemas/scope/4"


def _kv(key: str, **value: Any) -> common_pb2.KeyValue:
    return common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(**value))


def _resource(**blob: Any) -> resource_pb2.Resource:
    return resource_pb2.Resource(
        attributes=[
            _kv("service.name", string_value="fidelity"),
            _kv("blob", **blob),
            _kv("ratio", double_value=math.nan),
            _kv("dup", string_value="first"),
            _kv("dup", int_value=2),
        ],
        dropped_attributes_count=3,
    )


BYTES_RESOURCE = _resource(bytes_value=b"\x00\xff")
STRING_RESOURCE = _resource(string_value="00ff")
SCOPE = common_pb2.InstrumentationScope(
    name="fidelity <b>scope</b>",
    version="1.2.3",
    attributes=[
        _kv("scope.flag", bool_value=True),
        _kv("scope.blob", bytes_value=b"\x00\x01"),
        _kv("scope.count", int_value=7),
        _kv("scope.count", string_value="seven"),
    ],
    dropped_attributes_count=2,
)
# (span name, resource, resource schema URL, scope schema URL, transport)
SENT = {
    "bytes": (BYTES_RESOURCE, RESOURCE_URL, SCOPE_URL, "grpc"),
    "bytes again": (BYTES_RESOURCE, RESOURCE_URL, SCOPE_URL, "http"),
    "string": (STRING_RESOURCE, RESOURCE_URL, SCOPE_URL, "http"),
    "other resource url": (BYTES_RESOURCE, OTHER_RESOURCE_URL, SCOPE_URL, "http"),
    "other scope url": (BYTES_RESOURCE, RESOURCE_URL, OTHER_SCOPE_URL, "grpc"),
}
_TYPED_ROW = re.compile(
    r'<th scope="row">(.*?)</th><td class="x-value-type">(.*?)</td><td><pre>(.*?)</pre>', re.S
)
_DROPPED = re.compile(r"<dt>Dropped attributes</dt><dd>(.*?)</dd>")
_SCHEMA_URL = re.compile(r"<dt>Schema URL</dt><dd>(.*?)</dd>")


def _send(server: Server, request: ExportRequest, transport: str) -> None:
    body = request.SerializeToString()
    if transport == "grpc":
        export_raw(server.grpc_target, body, GRPC_KEY)
        return
    answer = httpx.post(f"{server.url}/v1/traces", content=body, headers=HTTP_HEADERS,
                        timeout=30)
    assert answer.status_code == 200, answer.text


def _wait_for_spans(server: Server, count: int) -> None:
    wait_until(
        lambda: server.get_json("/healthz")["spans"], until=lambda spans: spans >= count,
        timeout=30, what=f"{count} stored spans",
    )  # fmt: skip
    server.wait_replayed()


def _section(html: str, section_id: str) -> str:
    start = html.index(f'id="{section_id}"')
    return html[start : html.index("</section>", start)]


def _typed_rows(section: str) -> list[tuple[str, str, str]]:
    return [(unescape(k), unescape(t), unescape(v)) for k, t, v in _TYPED_ROW.findall(section)]


def test_resource_and_scope_are_stored_and_shown_exactly_as_sent(
    make_server: MakeServer,
) -> None:
    server: Server = make_server()
    now = time.time_ns()
    fixture = relocated_fixture("a_linear", end_unix_nano=now, tag="fidelity")
    for body in fixture:
        export_raw(server.grpc_target, body, GRPC_KEY)
    _wait_for_spans(server, 1)
    (run,) = server.get_json("/api/executions")["executions"]
    trace_id = run["trace_id"]
    stored_before = server.get_json("/healthz")["spans"]
    span_ids: dict[str, str] = {}
    for name, (resource, resource_url, scope_url, transport) in SENT.items():
        span = trace_pb2.Span(
            trace_id=bytes.fromhex(trace_id), span_id=new_span_id(), name=name,
            start_time_unix_nano=now - 1_000, end_time_unix_nano=now,
        )  # fmt: skip
        span_ids[name] = span.span_id.hex()
        request = request_under(
            resource, SCOPE, [span], resource_schema_url=resource_url, scope_schema_url=scope_url
        )
        _send(server, request, transport)
    _wait_for_spans(server, stored_before + len(SENT))

    # The span page: every attribute in the order sent, with its type.
    def page(name: str) -> str:
        answer = httpx.get(f"{server.url}/executions/{run['id']}/spans/{span_ids[name]}",
                           timeout=30)
        assert answer.status_code == 200
        return answer.text

    html = page("bytes")
    resource_html, scope = _section(html, "resource"), _section(html, "scope")
    assert _typed_rows(resource_html) == [
        ("service.name", "string", "fidelity"),
        ("blob", "bytes", "00ff"),
        ("ratio", "double", "nan"),
        ("dup", "string", "first"),
        ("dup", "int", "2"),
    ]
    assert _DROPPED.findall(resource_html) == ["3"]
    assert _SCHEMA_URL.findall(resource_html) == [RESOURCE_URL]
    assert _typed_rows(scope) == [
        ("scope.flag", "bool", "true"),
        ("scope.blob", "bytes", "0001"),
        ("scope.count", "int", "7"),
        ("scope.count", "string", "seven"),
    ]
    assert _DROPPED.findall(scope) == ["2"]
    assert _SCHEMA_URL.findall(scope) == [SCOPE_URL]
    assert "<dd>1.2.3</dd>" in scope
    # Telemetry is escaped, never markup.
    assert "<b>scope</b>" not in html and "fidelity &lt;b&gt;scope&lt;/b&gt;" in scope
    assert ("blob", "string", "00ff") in _typed_rows(_section(page("string"), "resource"))
    other = page("other scope url")
    assert _SCHEMA_URL.findall(_section(other, "scope")) == [OTHER_SCOPE_URL]
    server.stop()

    # The DuckDB file: each resource's and scope's own bytes, and both schema URLs.
    with duckdb.connect(str(server.db), read_only=True) as connection:
        rows = connection.execute(
            "SELECT s.name, r.resource_key, r.resource_raw, r.resource_schema_url,"
            " r.scope_raw, r.scope_schema_url, r.attributes, r.service_name, r.scope_name,"
            " r.scope_version"
            " FROM spans s JOIN resources r ON r.resource_key = s.resource_key"
            " WHERE s.trace_id = ? AND list_contains(?, s.span_id)",
            [trace_id, list(span_ids.values())],
        ).fetchall()
    stored = {row[0]: row[1:] for row in rows}
    assert stored.keys() == SENT.keys()
    for name, (sent_resource, resource_url, scope_url, _) in SENT.items():
        _, resource_raw, stored_resource_url, scope_raw, stored_scope_url, *_ = stored[name]
        assert resource_raw == sent_resource.SerializeToString()
        assert scope_raw == SCOPE.SerializeToString()
        assert (stored_resource_url, stored_scope_url) == (resource_url, scope_url)
    # Bytes against a string, and each schema URL, tell resources apart; the same
    # resource sent again over the other transport is the same row.
    keys = {name: row[0] for name, row in stored.items()}
    assert keys["bytes"] == keys["bytes again"]
    assert len(set(keys.values())) == 4
    # The JSON column alone cannot tell bytes from a string: that is what the bytes are for.
    assert stored["bytes"][5] == stored["string"][5]
    assert stored["bytes"][6:] == ("fidelity", "fidelity <b>scope</b>", "1.2.3")
    kept = decode_resource(stored["bytes"][1])
    values = [(kv.key, kv.value.WhichOneof("value")) for kv in kept.attributes]
    assert values == [("service.name", "string_value"), ("blob", "bytes_value"),
                      ("ratio", "double_value"), ("dup", "string_value"), ("dup", "int_value")]
    assert math.isnan(kept.attributes[2].value.double_value)
    assert kept.dropped_attributes_count == 3
    assert decode_scope(stored["bytes"][3]) == SCOPE

    # The Store on that file answers the same.
    store = Store(server.db)
    try:
        row = store.resource_of_span(trace_id, span_ids["string"])
        assert row is not None
        assert row.resource_raw == STRING_RESOURCE.SerializeToString()
        assert (row.scope_raw, row.resource_schema_url, row.scope_schema_url) == (
            SCOPE.SerializeToString(), RESOURCE_URL, SCOPE_URL,
        )
        assert store.resource_of_span(trace_id, "0" * 16) is None
    finally:
        store.close()
