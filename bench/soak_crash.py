"""Crash soak: kill -9 `statetrail serve` under load, over and over, and lose nothing acked.

Several exporter threads send raw OTLP/gRPC requests with unique span ids and
record every span the server acknowledged (tests/support/crashload.py). At random
moments the server gets SIGKILL and is restarted on the same DuckDB file. At the
end every acknowledged span must be stored, and stored exactly once (a request
stored but not acknowledged before a kill is retried with the same bytes).

Run: `.venv/bin/python bench/soak_crash.py [--kills 25] [--exporters 6]`
Prints kills, acknowledged spans, spans found, missing and duplicates; exits 1
if any acknowledged span is missing or duplicated.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.crashload import ExportLoad, stored_spans
from support.servers import Server


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=25)
    parser.add_argument("--exporters", type=int, default=6)
    parser.add_argument("--spans-per-request", type=int, default=100)
    parser.add_argument("--min-uptime", type=float, default=0.3)
    parser.add_argument("--max-uptime", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=1, help="seeds the uptimes and pauses")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        server = Server.on_free_ports(Path(folder) / "soak.duckdb").start()
        load = ExportLoad(server.grpc_target, exporters=args.exporters,
                          spans_per_request=args.spans_per_request, seed=args.seed).start()
        uptimes = random.Random(args.seed)
        started = time.monotonic()
        try:
            for kill in range(1, args.kills + 1):
                time.sleep(uptimes.uniform(args.min_uptime, args.max_uptime))
                server.kill()
                server.start()
                print(f"kill {kill}/{args.kills}: acked so far {len(load.report.acked)}",
                      flush=True)
            time.sleep(1.0)
        finally:
            report = load.stop()
            server.stop()
        stored = stored_spans(server.db)
    missing = report.acked - stored.spans
    print(
        f"seed={args.seed} kills={args.kills} acknowledged_spans={len(report.acked)} "
        f"found={len(stored.spans)} missing={len(missing)} duplicates={stored.duplicates} "
        f"acked_requests={report.requests_acked} failed_attempts={report.failed_attempts} "
        f"abandoned={report.abandoned_requests} seconds={time.monotonic() - started:.0f}"
    )
    if report.unexpected:
        print(f"unexpected errors: {report.unexpected[:5]}")
    return 1 if missing or stored.duplicates or report.unexpected else 0


if __name__ == "__main__":
    raise SystemExit(main())
