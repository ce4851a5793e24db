"""The OTLP/gRPC receiver's contract: auth, bad input, limits, retries, durability."""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter
from pathlib import Path

import duckdb
import grpc
import pytest
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2
from support.servers import FIXTURE_API_KEY, MakeServer, Server, export_raw, fixture_requests

from collector.receive.answers import retry_delay_seconds

KEY = [("x-junjo-api-key", FIXTURE_API_KEY)]


def _linear() -> bytes:
    body, _ = fixture_requests("a_linear")[0]
    return body


def _count(db: Path, table: str) -> int:
    with duckdb.connect(str(db), read_only=True) as connection:
        row = connection.execute(f"SELECT count(*) FROM {table}").fetchone()
    assert row is not None
    count: int = row[0]
    return count


def _request(*spans: trace_pb2.Span) -> bytes:
    request = trace_service_pb2.ExportTraceServiceRequest()
    scope_spans = request.resource_spans.add().scope_spans.add()
    scope_spans.spans.extend(spans)
    serialized: bytes = request.SerializeToString()
    return serialized


def _span(trace_id: bytes, span_id: bytes, name: str = "s") -> trace_pb2.Span:
    return trace_pb2.Span(
        trace_id=trace_id, span_id=span_id, name=name,
        start_time_unix_nano=1, end_time_unix_nano=2,
    )


def test_grpc_rejects_missing_and_wrong_keys(make_server: MakeServer) -> None:
    server: Server = make_server("--api-key", FIXTURE_API_KEY)
    for metadata in ([], [("x-junjo-api-key", "wrong")], [("authorization", "Bearer wrong")]):
        with pytest.raises(grpc.RpcError) as error:
            export_raw(server.grpc_target, _linear(), metadata)
        assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED
    export_raw(server.grpc_target, _linear(), [("authorization", f"Bearer {FIXTURE_API_KEY}")])
    assert server.get_json("/healthz")["spans"] == 5
    # Both headers: Junjo's is the one checked, in either order.
    both = [("authorization", "Bearer wrong"), ("x-junjo-api-key", FIXTURE_API_KEY)]
    for metadata in (both, both[::-1]):
        export_raw(server.grpc_target, _linear(), metadata)
    wrong_junjo = [("authorization", f"Bearer {FIXTURE_API_KEY}"), ("x-junjo-api-key", "wrong")]
    for metadata in (wrong_junjo, wrong_junjo[::-1]):
        with pytest.raises(grpc.RpcError) as error:
            export_raw(server.grpc_target, _linear(), metadata)
        assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_grpc_malformed_body_is_invalid_argument_and_stores_nothing(server: Server) -> None:
    for body in (b"\xff\xff\xff\xff", _linear()[:-7], b"\x0a\x05abc"):
        with pytest.raises(grpc.RpcError) as error:
            export_raw(server.grpc_target, body)
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "ExportTraceServiceRequest" in (error.value.details() or "")
        # OTLP: the Status details SHOULD hold a BadRequest describing the bad data.
        trailers = dict(error.value.trailing_metadata() or ())
        status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
        bad_request = error_details_pb2.BadRequest()
        assert status.code == code_pb2.INVALID_ARGUMENT and status.details[0].Unpack(bad_request)
        assert bad_request.field_violations[0].description == error.value.details()
    assert server.get_json("/healthz")["spans"] == 0
    export_raw(server.grpc_target, _linear())
    assert server.get_json("/healthz")["spans"] == 5


def test_grpc_oversize_request_is_resource_exhausted(make_server: MakeServer) -> None:
    server: Server = make_server("--max-receive-mib", "1")
    big = _request(*(_span(os.urandom(16), os.urandom(8), "x" * 4096) for _ in range(400)))
    with pytest.raises(grpc.RpcError) as error:
        export_raw(server.grpc_target, big)
    assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    export_raw(server.grpc_target, _linear())
    assert server.get_json("/healthz")["spans"] == 5


def test_grpc_gzip_request_is_accepted(server: Server) -> None:
    export_raw(server.grpc_target, _linear(), compression=grpc.Compression.Gzip)
    health = server.get_json("/healthz")
    assert (health["spans"], health["executions"], health["transitions"]) == (5, 1, 14)


def test_grpc_duplicate_delivery_is_stored_once(server: Server) -> None:
    for _ in range(3):
        export_raw(server.grpc_target, _linear())
    health = server.get_json("/healthz")
    assert (health["spans"], health["executions"], health["transitions"]) == (5, 1, 14)


def test_grpc_partial_success_counts_bad_spans_and_stores_the_rest(server: Server) -> None:
    good = _span(os.urandom(16), os.urandom(8), "good")
    body = _request(
        good,
        _span(os.urandom(16), b"\x01\x02\x03", "short-span-id"),
        _span(b"", os.urandom(8), "no-trace-id"),
        _span(bytes(16), os.urandom(8), "zero-trace-id"),
    )
    reply = trace_service_pb2.ExportTraceServiceResponse.FromString(
        export_raw(server.grpc_target, body)
    )
    assert reply.partial_success.rejected_spans == 3
    assert "short-span-id" in reply.partial_success.error_message
    assert server.get_json("/healthz")["spans"] == 1


def test_grpc_transitions_before_owner_join_when_owner_arrives(server: Server) -> None:
    first, second = fixture_requests("l_split_batches")
    export_raw(server.grpc_target, first[0])
    assert server.get_json("/api/executions")["executions"] == []
    (in_flight,) = server.get_json("/api/executions?verdict=in_flight")["executions"]
    assert in_flight["received_transitions"] > 0
    assert server.get_json(f"/api/executions/{in_flight['id']}")["verdict"] == "in_flight"
    export_raw(server.grpc_target, second[0])
    server.wait_replayed()
    assert server.get_json("/api/executions?verdict=in_flight")["executions"] == []
    (execution,) = server.get_json("/api/executions")["executions"]
    assert execution["id"] == in_flight["id"]
    assert execution["verdict"] == "verified"
    assert execution["received_transitions"] == execution["transition_count"] == 6


def test_grpc_storage_failure_is_unavailable_then_recovers(server: Server) -> None:
    # A directory where DuckDB's write-ahead log must go makes every commit fail,
    # a real storage fault that goes away when the directory does.
    wal = server.db.with_name(server.db.name + ".wal")
    wal.mkdir()
    try:
        with pytest.raises(grpc.RpcError) as error:
            export_raw(server.grpc_target, _linear())
        assert error.value.code() == grpc.StatusCode.UNAVAILABLE
        assert server.get_json("/healthz")["spans"] == 0
    finally:
        wal.rmdir()
    export_raw(server.grpc_target, _linear())
    # The refused export stayed in the spool and is stored once the database
    # recovers; the resent copy is the same spans, stored once.
    assert server.wait_replayed()["spans"] == 5


def test_grpc_overload_is_unavailable_with_retry_info(make_server: MakeServer) -> None:
    server: Server = make_server("--max-inflight", "1")
    body, _ = fixture_requests("g_large_state")[1]
    errors: list[grpc.RpcError] = []

    def send() -> None:
        for _ in range(4):
            try:
                export_raw(server.grpc_target, body)
            except grpc.RpcError as error:
                errors.append(error)

    threads = [threading.Thread(target=send) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors, "12 concurrent exporters never exceeded one in-flight export"
    error = errors[0]
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    trailers = dict(error.trailing_metadata() or ())
    retry = error_details_pb2.RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"])
    assert retry.retry_delay.seconds in {1, 2, 3}  # 2 s, give or take half
    status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    unpacked = error_details_pb2.RetryInfo()
    assert status.details[0].Unpack(unpacked)
    assert unpacked == retry


def test_grpc_acknowledged_export_survives_kill_9(server: Server) -> None:
    sent = 0
    for body, _ in fixture_requests("d_subflow"):
        export_raw(server.grpc_target, body)
        sent += sum(
            len(scope.spans)
            for resource in trace_service_pb2.ExportTraceServiceRequest.FromString(body)
            .resource_spans
            for scope in resource.scope_spans
        )
    server.kill()
    assert server.process is not None and server.process.returncode == -signal.SIGKILL
    server.start()
    health = server.get_json("/healthz")
    assert (health["spans"], health["executions"]) == (sent, 3)
    server.stop()
    assert _count(server.db, "transitions") == health["transitions"] > 0


def test_grpc_refuses_non_loopback_without_keys(make_server: MakeServer, tmp_path: Path) -> None:
    server: Server = make_server("--host", "0.0.0.0", start=False)
    with pytest.raises(RuntimeError, match="without API keys"):
        server.start()
    # A keys file with no key in it (comments only) is no key at all.
    empty = tmp_path / "keys.txt"
    empty.write_text("# one key per line\n\n", encoding="utf-8")
    server = make_server("--host", "0.0.0.0", "--keys-file", str(empty), start=False)
    with pytest.raises(RuntimeError, match="without API keys"):
        server.start()


def test_retry_delays_spread_around_the_configured_delay() -> None:
    # Refused exporters told one fixed delay come back together and are refused together.
    for base in (1, 2, 5, 30):
        delays = Counter(retry_delay_seconds(base) for _ in range(2000))
        low, high = max(1, base // 2), max(1, base * 3 // 2)
        assert set(delays) == set(range(low, high + 1)), (base, delays)
