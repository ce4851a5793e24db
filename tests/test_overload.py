"""Overload: more exporters than `--max-inflight 2` admits get UNAVAILABLE + RetryInfo,
memory stays bounded, and exporters that honour the delay land everything.

The heavy version is bench/overload.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import httpx
import pytest
from google.rpc import error_details_pb2
from support.crashload import ExportLoad, RssSampler, stored_spans
from support.seeds import seed_id, seeds
from support.servers import MakeServer, Server, export_raw, fixture_requests
from support.slow_clients import serve_in_process

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


def test_one_in_flight_budget_spans_grpc_and_http(tmp_path: Path) -> None:
    # --max-inflight bounds the exports in progress whichever way they arrive:
    # with the only slot taken (as an export being stored takes it), both
    # transports answer "retry later", and serve again once it is given back.
    body = fixture_requests("a_linear")[0][0]
    with serve_in_process(tmp_path, "--max-inflight", "1") as served:
        assert served.admission.try_enter(len(body))
        try:
            refused = _first_refusal(f"127.0.0.1:{served.grpc_port}", body, until=0)
            assert refused is not None and refused.code() == grpc.StatusCode.UNAVAILABLE
            retry = error_details_pb2.RetryInfo()
            trailers = dict(refused.trailing_metadata() or ())
            retry.ParseFromString(trailers["google.rpc.retryinfo-bin"])
            assert retry.retry_delay.seconds > 0
            assert _post(served.url, body).status_code == 503
        finally:
            served.admission.leave(len(body))
        assert _first_refusal(f"127.0.0.1:{served.grpc_port}", body, until=0) is None
        assert _post(served.url, body).status_code == 200
        assert served.admission.in_flight() == (0, 0, 0)


def _post(url: str, body: bytes) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/traces", content=body, headers={"content-type": "application/x-protobuf"},
        timeout=30,
    )


def _first_refusal(target: str, body: bytes, *, until: float) -> grpc.RpcError | None:
    """Export `body` until it is refused (or once, past `until`); the refusal, if any."""
    while True:
        try:
            export_raw(target, body)
        except grpc.RpcError as refused:
            return refused
        if time.monotonic() >= until:
            return None
