"""Overload: more exporters than `--max-inflight 2` admits get UNAVAILABLE + RetryInfo,
memory stays bounded, and exporters that honour the delay land everything.

The heavy version is bench/overload.py.
"""

from __future__ import annotations

from crashload import ExportLoad, RssSampler, stored_spans
from support import MakeServer, Server

EXPORTERS = 16
REQUESTS_EACH = 6
SPANS_PER_REQUEST = 200
# The server's peak RSS may grow this much over its idle size: 16 requests of
# ~25 KB in flight at most twice over cannot explain more; a queue without
# bound would.
RSS_GROWTH_LIMIT_KIB = 200 * 1024


def test_overload_refuses_with_retry_info_and_lands_everything(make_server: MakeServer) -> None:
    server: Server = make_server("--max-inflight", "2")
    assert server.process is not None
    sampler = RssSampler(server.process.pid)
    load = ExportLoad(
        server.grpc_target,
        exporters=EXPORTERS,
        spans_per_request=SPANS_PER_REQUEST,
        honour_retry_info=True,
        max_requests=REQUESTS_EACH,
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
