"""Overload: more exporters than `--max-inflight 2` admits get UNAVAILABLE + RetryInfo,
memory stays bounded, and exporters that honour the delay land everything.

The heavy version is bench/overload.py.
"""

from __future__ import annotations

import socket
import time

import grpc
import pytest
from google.rpc import error_details_pb2
from support.crashload import ExportLoad, RssSampler, stored_spans
from support.polling import wait_until
from support.seeds import seed_id, seeds
from support.servers import MakeServer, Server, export_raw, fixture_requests

EXPORTERS = 16
REQUESTS_EACH = 6
SPANS_PER_REQUEST = 200
# The server's peak RSS may grow this much over its idle size: 16 requests of
# ~25 KB in flight at most twice over cannot explain more; a queue without
# bound would.
RSS_GROWTH_LIMIT_KIB = 200 * 1024


@pytest.mark.slow
@pytest.mark.parametrize("seed", seeds("LOAD_SEEDS", 1), ids=seed_id)
def test_overload_refuses_with_retry_info_and_lands_everything(
    make_server: MakeServer, seed: int
) -> None:
    server: Server = make_server("--max-inflight", "2")
    assert server.process is not None
    sampler = RssSampler(server.process.pid)
    load = ExportLoad(
        server.grpc_target,
        exporters=EXPORTERS,
        spans_per_request=SPANS_PER_REQUEST,
        honour_retry_info=True,
        max_requests=REQUESTS_EACH,
        seed=seed,
    ).start()
    report = load.join(timeout=120)
    peak = sampler.stop()
    health = server.wait_replayed()
    server.stop()
    stored = stored_spans(server.db)
    print(
        f"acked_requests={report.requests_acked} refusals={len(report.retry_infos)} "
        f"rss_idle_kib={sampler.first_kib} rss_peak_kib={peak}"
    )
    assert report.requests_acked == EXPORTERS * REQUESTS_EACH
    assert report.retry_infos, "16 exporters against 2 slots must be told to retry"
    assert min(report.retry_infos) >= 1.0
    assert not report.unexpected, report.unexpected[:5]
    assert peak - sampler.first_kib < RSS_GROWTH_LIMIT_KIB
    assert health["spans"] == len(report.acked)
    assert report.acked <= stored.spans and stored.duplicates == 0


def test_one_in_flight_budget_spans_grpc_and_http(make_server: MakeServer) -> None:
    # --max-inflight bounds the exports in progress whichever way they arrive: an
    # HTTP upload holding the only slot makes a gRPC export wait its turn.
    server: Server = make_server("--max-inflight", "1")
    host, port = server.url.removeprefix("http://").split(":")
    body = fixture_requests("a_linear")[0][0]
    with socket.create_connection((host, int(port)), timeout=60) as stalled:
        stalled.sendall(
            b"POST /v1/traces HTTP/1.1\r\nHost: statetrail\r\n"
            b"Content-Type: application/x-protobuf\r\nContent-Length: 1000\r\n\r\n" + b"\x00" * 10
        )
        refused = _first_refusal(server.grpc_target, body, until=time.monotonic() + 5)
        assert refused is not None, "the stalled HTTP upload never held the slot"
        assert refused.code() == grpc.StatusCode.UNAVAILABLE
        retry = error_details_pb2.RetryInfo()
        retry.ParseFromString(dict(refused.trailing_metadata() or ())["google.rpc.retryinfo-bin"])
        assert retry.retry_delay.seconds > 0
    # The upload gone, its slot is free again.

    def slot_free() -> bool:
        refused = _first_refusal(server.grpc_target, body, until=0)
        assert refused is None or refused.code() == grpc.StatusCode.UNAVAILABLE
        return refused is None

    wait_until(slot_free, timeout=10, interval=0.1, what="the slot to be given back")


def _first_refusal(target: str, body: bytes, *, until: float) -> grpc.RpcError | None:
    """Export `body` until it is refused (or once, past `until`); the refusal, if any."""
    while True:
        try:
            export_raw(target, body)
        except grpc.RpcError as refused:
            return refused
        if time.monotonic() >= until:
            return None
