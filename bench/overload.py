"""Overload: many exporters against `serve --max-inflight 2`; bounded memory, nothing lost.

`--exporters` raw gRPC clients (tests/support/crashload.py) each send `--requests`
exports and honour the RetryInfo delay of every UNAVAILABLE answer. The
server's RSS is sampled from /proc/<pid>/status throughout. At the end every
acknowledged span must be stored, and every request acknowledged.

Run: `.venv/bin/python bench/overload.py [--exporters 64] [--requests 20]`
Prints acked requests, refusals, idle and peak RSS; exits 1 on any loss.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.crashload import ExportLoad, RssSampler, stored_spans
from support.servers import Server


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exporters", type=int, default=64)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--spans-per-request", type=int, default=512)
    parser.add_argument("--max-inflight", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1, help="seeds the exporters' jitter")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        server = Server.on_free_ports(
            Path(folder) / "overload.duckdb", "--max-inflight", str(args.max_inflight)
        )
        server.start()
        assert server.process is not None
        sampler = RssSampler(server.process.pid)
        started = time.monotonic()
        load = ExportLoad(server.grpc_target, exporters=args.exporters,
                          spans_per_request=args.spans_per_request, honour_retry_info=True,
                          max_requests=args.requests, seed=args.seed).start()
        report = load.join()
        seconds = time.monotonic() - started
        peak = sampler.stop()
        server.stop()
        stored = stored_spans(server.db)
    missing = report.acked - stored.spans
    expected = args.exporters * args.requests
    print(
        f"seed={args.seed} exporters={args.exporters} "
        f"acked_requests={report.requests_acked}/{expected} "
        f"refusals_with_retry_info={len(report.retry_infos)} acked_spans={len(report.acked)} "
        f"found={len(stored.spans)} missing={len(missing)} "
        f"rss_idle_mib={sampler.first_kib // 1024} rss_peak_mib={peak // 1024} "
        f"seconds={seconds:.0f}"
    )
    return 1 if missing or report.requests_acked != expected or report.unexpected else 0


if __name__ == "__main__":
    raise SystemExit(main())
