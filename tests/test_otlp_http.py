"""The OTLP/HTTP receiver's contract: encodings, auth, limits, retries, durability.

Every test talks to a real `statetrail serve` over loopback; the exporter tests
use the OpenTelemetry SDK's own OTLP/HTTP exporter.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import duckdb
import httpx
from google.protobuf import json_format
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link
from support.servers import (
    FIXTURE_API_KEY,
    MakeServer,
    Server,
    fixture_requests,
    free_port,
    serving_in_thread,
)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
KEY = {"x-junjo-api-key": FIXTURE_API_KEY}
MIB = 1024 * 1024


def _linear() -> bytes:
    body, _ = fixture_requests("a_linear")[0]
    return body


def _post(
    server: Server,
    body: bytes | Iterator[bytes],
    content_type: str = PROTOBUF,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    return httpx.post(
        f"{server.url}/v1/traces",
        content=body,
        headers={"content-type": content_type, **(headers or {})},
        timeout=60,
    )


def _status(response: httpx.Response) -> status_pb2.Status:
    """The google.rpc.Status error body, in whichever encoding the request used."""
    if response.headers["content-type"].startswith(JSON):
        return json_format.Parse(response.text, status_pb2.Status())
    return status_pb2.Status.FromString(response.content)


def _hex_json(body: bytes) -> dict[str, Any]:
    """A protobuf export request as OTLP JSON: camelCase, and ids as hex, not base64."""
    document: dict[str, Any] = json_format.MessageToDict(
        trace_service_pb2.ExportTraceServiceRequest.FromString(body)
    )
    for resource in document.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                _ids_to_hex(span, ("traceId", "spanId", "parentSpanId"))
                for link in span.get("links", []):
                    _ids_to_hex(link, ("traceId", "spanId"))
    return document


def _ids_to_hex(message: dict[str, Any], fields: tuple[str, ...]) -> None:
    for field in fields:
        if field in message:
            message[field] = base64.b64decode(message[field]).hex()


def _stored_span_ids(db: Path) -> set[tuple[str, str, str]]:
    with duckdb.connect(str(db), read_only=True) as connection:
        rows = connection.execute("SELECT trace_id, span_id, parent_span_id FROM spans").fetchall()
    return {(trace_id, span_id, parent) for trace_id, span_id, parent in rows}


def _one_span_json(trace_id: str, span_id: str, name: str) -> dict[str, Any]:
    return {
        "traceId": trace_id,
        "spanId": span_id,
        "name": name,
        "kind": 2,
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": 1700000000000001000,
        "status": {"code": 1},
        "futureField": {"ignored": True},
    }


def _json_request(*spans: dict[str, Any]) -> bytes:
    document = {"resourceSpans": [{"scopeSpans": [{"spans": list(spans)}]}]}
    return json.dumps(document).encode()


def test_otlp_http_exporter_spans_are_stored_with_their_ids(make_server: MakeServer) -> None:
    server: Server = make_server("--api-key", FIXTURE_API_KEY)
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("statetrail-tests")
    with tracer.start_as_current_span("parent") as parent:
        tracer.start_span("child", links=[Link(parent.get_span_context())]).end()
    provider.shutdown()
    spans = memory.get_finished_spans()
    exporter = OTLPSpanExporter(endpoint=f"{server.url}/v1/traces", headers=KEY, timeout=30)
    try:
        assert exporter.export(spans) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()  # type: ignore[no-untyped-call]  # untyped in the SDK
    assert server.get_json("/healthz")["spans"] == 2
    server.stop()
    expected = {
        (
            f"{span.context.trace_id:032x}",
            f"{span.context.span_id:016x}",
            f"{span.parent.span_id:016x}" if span.parent else "",
        )
        for span in spans
    }
    assert _stored_span_ids(server.db) == expected


def test_otlp_http_exporter_gzip_is_stored(server: Server) -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    for index in range(20):
        with provider.get_tracer("statetrail-tests").start_as_current_span(f"s{index}"):
            pass
    provider.shutdown()
    exporter = OTLPSpanExporter(
        endpoint=f"{server.url}/v1/traces", compression=Compression.Gzip, timeout=30
    )
    try:
        assert exporter.export(memory.get_finished_spans()) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()  # type: ignore[no-untyped-call]  # untyped in the SDK
    assert server.get_json("/healthz")["spans"] == 20


def test_otlp_http_json_hex_ids_are_stored_as_sent(server: Server) -> None:
    body = _linear()
    document = _hex_json(body)
    response = _post(server, json.dumps(document).encode(), JSON)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith(JSON)
    assert response.json() == {}
    trace_id = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"]
    executions = server.get_json("/api/executions")["executions"]
    assert [e["trace_id"] for e in executions] == [trace_id]
    assert server.get_json("/healthz")["spans"] == 5


def test_otlp_http_json_reports_partial_success(server: Server) -> None:
    good = _one_span_json("0102030405060708090a0b0c0d0e0f10", "0102030405060708", "good")
    short = _one_span_json("0102", "0102030405060708", "short-trace-id")
    response = _post(server, _json_request(good, short), JSON)
    assert response.status_code == 200, response.text
    partial = response.json()["partialSuccess"]
    assert int(partial["rejectedSpans"]) == 1
    assert "short-trace-id" in partial["errorMessage"]
    assert server.get_json("/healthz")["spans"] == 1


def test_otlp_http_protobuf_reports_partial_success(server: Server) -> None:
    request = trace_service_pb2.ExportTraceServiceRequest.FromString(_linear())
    request.resource_spans[0].scope_spans[0].spans[0].span_id = b"\x00" * 8
    response = _post(server, request.SerializeToString())
    assert response.status_code == 200
    assert response.headers["content-type"] == PROTOBUF
    reply = trace_service_pb2.ExportTraceServiceResponse.FromString(response.content)
    assert reply.partial_success.rejected_spans == 1
    assert server.get_json("/healthz")["spans"] == 4


def test_otlp_http_json_malformed_id_rejects_only_its_span(server: Server) -> None:
    bad_ids = ("zz" * 16, "abc", "AQIDBAUGBwgJCgsMDQ4PEA==", 12)
    spans = []
    for number, bad_id in enumerate(bad_ids):
        span = _one_span_json("0102030405060708090a0b0c0d0e0f10", f"{number + 1:016x}", "bad")
        span["traceId"] = bad_id
        spans.append(span)
    bad_parent = _one_span_json("0102030405060708090a0b0c0d0e0f10", "00000000000000aa", "bad")
    bad_parent["parentSpanId"] = "not hex"
    # proto3's JSON mapping reads null as "not set": a root span, stored.
    null_parent = _one_span_json("0102030405060708090a0b0c0d0e0f10", "00000000000000bb", "root")
    null_parent["parentSpanId"] = None
    good = _one_span_json("0102030405060708090a0b0c0d0e0f10", "00000000000000cc", "good")
    good["links"] = [{"traceId": "xyz", "spanId": None}]
    response = _post(server, _json_request(*spans, bad_parent, null_parent, good), JSON)
    assert response.status_code == 200, response.text
    partial = response.json()["partialSuccess"]
    assert int(partial["rejectedSpans"]) == len(bad_ids) + 1
    assert "'bad'" in partial["errorMessage"] and "hex digits" in partial["errorMessage"]
    server.stop()
    assert _stored_span_ids(server.db) == {
        ("0102030405060708090a0b0c0d0e0f10", "00000000000000bb", ""),
        ("0102030405060708090a0b0c0d0e0f10", "00000000000000cc", ""),
    }


def test_otlp_http_stores_span_kinds_and_status_codes_otlp_may_add(server: Server) -> None:
    future = _one_span_json("0102030405060708090a0b0c0d0e0f10", "00000000000000dd", "future")
    future["kind"] = 9
    future["status"] = {"code": 5}
    beyond = _one_span_json("0102030405060708090a0b0c0d0e0f10", "00000000000000ee", "beyond")
    beyond["kind"] = 300
    response = _post(server, _json_request(future, beyond), JSON)
    assert response.status_code == 200, response.text
    partial = response.json()["partialSuccess"]
    assert int(partial["rejectedSpans"]) == 1 and "'beyond'" in partial["errorMessage"]
    server.stop()
    with duckdb.connect(str(server.db), read_only=True) as connection:
        rows = connection.execute("SELECT span_id, kind, status_code FROM spans").fetchall()
    assert rows == [("00000000000000dd", 9, 5)]


def test_otlp_http_bad_bodies_are_400_and_store_nothing(server: Server) -> None:
    cases = [
        (b"\xff\xfe not protobuf", PROTOBUF),
        (b"{not json", JSON),
        (b"[1, 2]", JSON),
        (b'{"resourceSpans": "nope"}', JSON),
    ]
    for body, content_type in cases:
        response = _post(server, body, content_type)
        assert response.status_code == 400, (body, response.text)
        assert response.headers["content-type"] == content_type
        status = _status(response)
        assert status.code == code_pb2.INVALID_ARGUMENT
        # OTLP: the Status details SHOULD hold a BadRequest describing the bad data.
        bad_request = error_details_pb2.BadRequest()
        assert status.details[0].Unpack(bad_request)
        assert bad_request.field_violations[0].description == status.message
    corrupt = _post(server, b"\x1f\x8b\x08\x00garbage", PROTOBUF, {"content-encoding": "gzip"})
    assert corrupt.status_code == 400
    truncated = _post(server, gzip.compress(_linear())[:-20], PROTOBUF,
                      {"content-encoding": "gzip"})
    assert truncated.status_code == 400
    assert server.get_json("/healthz")["spans"] == 0


def test_otlp_http_unsupported_media_is_415(server: Server) -> None:
    assert _post(server, _linear(), "text/plain").status_code == 415
    brotli = _post(server, _linear(), PROTOBUF, {"content-encoding": "br"})
    assert brotli.status_code == 415
    assert _status(brotli).code == code_pb2.INVALID_ARGUMENT


def test_otlp_http_gzip_request_is_stored(server: Server) -> None:
    response = _post(server, gzip.compress(_linear()), PROTOBUF, {"content-encoding": "gzip"})
    assert response.status_code == 200
    assert server.get_json("/healthz")["spans"] == 5


def test_otlp_http_concatenated_gzip_members_are_one_body_up_to_a_limit(
    server: Server,
) -> None:
    # RFC 1952: members in a row are one stream. Two halves of a request, each its own
    # member; with ~1.5 MiB of noise the second starts inside the receiver's first 1 MiB
    # input slice and ends in the next.
    request = trace_service_pb2.ExportTraceServiceRequest.FromString(_linear())
    noise = base64.b64encode(os.urandom(MIB * 3 // 2)).decode()
    request.resource_spans[0].scope_spans[0].spans[0].attributes.add(
        key="noise"
    ).value.string_value = noise
    body = request.SerializeToString()
    middle = len(body) // 2
    two = gzip.compress(body[:middle]) + gzip.compress(body[middle:])
    assert _post(server, two, PROTOBUF, {"content-encoding": "gzip"}).status_code == 200
    assert server.get_json("/healthz")["spans"] == 5
    # Thousands of empty members are refused at once, not inflated in quadratic time.
    empty = gzip.compress(b"")
    started = time.monotonic()
    many = _post(server, empty * 200_000 + gzip.compress(body), PROTOBUF,
                 {"content-encoding": "gzip"})
    assert many.status_code == 400 and "gzip members" in _status(many).message
    assert time.monotonic() - started < 10


def test_otlp_http_oversize_is_413_before_and_while_reading(make_server: MakeServer) -> None:
    server: Server = make_server("--max-receive-mib", "1")
    declared = _post(server, b"\x00" * (2 * MIB))
    assert declared.status_code == 413
    assert _status(declared).code == code_pb2.RESOURCE_EXHAUSTED

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted while reading
        for _ in range(8):
            yield b"\x00" * (MIB // 4)

    assert _post(server, chunks()).status_code == 413
    # A gzip bomb: 64 KiB on the wire that would inflate to 64 MiB.
    bomb = gzip.compress(b"\x00" * (64 * MIB))
    assert len(bomb) < MIB
    assert _post(server, bomb, PROTOBUF, {"content-encoding": "gzip"}).status_code == 413
    assert _post(server, _linear()).status_code == 200
    assert server.get_json("/healthz")["spans"] == 5


def test_otlp_http_chunked_uploads_are_charged_what_they_send(server: Server) -> None:
    """Node's exporters always send chunked bodies; eight at once fit an idle server."""
    body = _linear()
    uploads = 8
    all_started = threading.Barrier(uploads)

    def chunks() -> Iterator[bytes]:
        yield body[: len(body) // 2]
        # Every upload is in flight before any finishes.
        with contextlib.suppress(threading.BrokenBarrierError):
            all_started.wait(timeout=20)
        yield body[len(body) // 2 :]

    with ThreadPoolExecutor(max_workers=uploads) as pool:
        statuses = list(pool.map(lambda _: _post(server, chunks()).status_code, range(uploads)))
    assert statuses == [200] * uploads
    assert server.get_json("/healthz")["spans"] == 5


def test_otlp_http_stalled_body_is_408_and_holds_no_slot(make_server: MakeServer) -> None:
    server = make_server("--max-inflight", "1", "--upload-grace", "2")
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as stalled:
        stalled.sendall(
            b"POST /v1/traces HTTP/1.1\r\nHost: statetrail\r\n"
            b"Content-Type: application/x-protobuf\r\nContent-Length: 1000\r\n\r\n" + b"\x00" * 10
        )
        started = time.monotonic()
        # A body still on its way holds no slot: the only one serves the others.
        assert _post(server, _linear()).status_code == 200
        answer = stalled.recv(65536)
        waited = time.monotonic() - started
        while stalled.recv(65536):  # the rest of the answer; then the server closes
            pass
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert 1.5 < waited < 30, waited
    assert _post(server, _linear()).status_code == 200
    assert server.get_json("/healthz")["spans"] == 5


def test_otlp_http_without_accepted_key_is_401(make_server: MakeServer) -> None:
    server: Server = make_server("--api-key", FIXTURE_API_KEY)
    for headers in ({}, {"x-junjo-api-key": "wrong"}, {"authorization": "Bearer wrong"}):
        response = _post(server, _linear(), PROTOBUF, headers)
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert _status(response).code == code_pb2.UNAUTHENTICATED
    json_reply = _post(server, b"{}", JSON)
    assert json_reply.status_code == 401
    assert json_reply.json()["code"] == code_pb2.UNAUTHENTICATED
    assert server.get_json("/healthz")["spans"] == 0
    bearer = {"authorization": f"Bearer {FIXTURE_API_KEY}"}
    assert _post(server, _linear(), PROTOBUF, bearer).status_code == 200
    assert server.get_json("/healthz")["spans"] == 5


def test_otlp_http_keys_file_is_read_once_when_the_config_is_built(tmp_path: Path) -> None:
    """The keys the file held then are the keys served: removing it later is no crash."""
    from collector.cli.main import _parser
    from collector.config import serve_config
    from studio.app import create_app

    keys = tmp_path / "keys.txt"
    keys.write_text(f"# ingestion keys\n{FIXTURE_API_KEY}  # the fixtures' key\n", "utf-8")
    port = free_port()
    args = _parser({}).parse_args([
        "serve", "--db", str(tmp_path / "k.duckdb"), "--http-port", str(port),
        "--keys-file", str(keys),
    ])
    config = serve_config(args)
    keys.unlink()
    with serving_in_thread(create_app(config, grpc=False), port) as base:
        for headers, status in (({}, 401), ({"authorization": "Bearer wrong"}, 401), (KEY, 200)):
            response = httpx.post(
                f"{base}/v1/traces", content=_linear(),
                headers={"content-type": PROTOBUF, **headers}, timeout=60,
            )
            assert response.status_code == status, headers


def test_otlp_http_overload_is_503_with_retry_after(make_server: MakeServer) -> None:
    server: Server = make_server("--max-inflight", "1")
    body, _ = fixture_requests("g_large_state")[1]
    with httpx.Client(timeout=60) as client, ThreadPoolExecutor(max_workers=16) as pool:
        def send(_: int) -> httpx.Response:
            return client.post(
                f"{server.url}/v1/traces", content=body, headers={"content-type": PROTOBUF}
            )

        responses = list(pool.map(send, range(64)))
    statuses = {response.status_code for response in responses}
    assert statuses <= {200, 503}
    refused = [response for response in responses if response.status_code == 503]
    assert refused, "16 concurrent exporters never exceeded one in-flight export"
    assert 200 in statuses
    # The delay is spread around the configured 2 s, so refused exporters do not
    # all come back in the same moment.
    assert {int(response.headers["retry-after"]) for response in refused} <= {1, 2, 3}
    status = _status(refused[0])
    assert status.code == code_pb2.UNAVAILABLE
    retry = error_details_pb2.RetryInfo()
    assert status.details[0].Unpack(retry)
    assert retry.retry_delay.seconds == int(refused[0].headers["retry-after"])


def test_otlp_http_storage_failure_is_503_then_recovers(server: Server) -> None:
    # A directory where DuckDB's write-ahead log must go makes every commit fail.
    wal = server.db.with_name(server.db.name + ".wal")
    wal.mkdir()
    try:
        response = _post(server, _linear())
        assert response.status_code == 503
        assert "retry-after" in response.headers
        assert _status(response).code == code_pb2.UNAVAILABLE
    finally:
        wal.rmdir()
    assert _post(server, _linear()).status_code == 200
    # The refused export stayed in the spool and is stored once the database
    # recovers; the resent copy is the same spans, stored once.
    assert server.wait_replayed()["spans"] == 5


def test_otlp_http_duplicate_delivery_is_stored_once(server: Server) -> None:
    for _ in range(2):
        assert _post(server, _linear()).status_code == 200
    assert _post(server, json.dumps(_hex_json(_linear())).encode(), JSON).status_code == 200
    health = server.get_json("/healthz")
    assert (health["spans"], health["executions"]) == (5, 1)


def test_otlp_http_acknowledged_export_survives_kill_9(server: Server) -> None:
    assert _post(server, _linear()).status_code == 200
    server.kill()
    assert server.process is not None and server.process.returncode == -signal.SIGKILL
    assert len(_stored_span_ids(server.db)) == 5
