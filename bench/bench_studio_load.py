"""Executions-page latency while the collector ingests at full rate.

Starts a real `statetrail serve` on a fresh DuckDB file, loads it with a first
round of exports, then measures GET / (the executions page), a filtered page
and /api/executions twice in the same run: idle (the baseline) and while four
exporter threads push pre-built ~1 MB requests as fast as they are
acknowledged. Prints p50/p95 per page for both phases, their ratio, and the
target: executions page p95 <= 200 ms under load (printed, never asserted), and
what ingest achieved meanwhile (studio requests are served first; see
collector/foreground.py).

Run from the repository root: .venv/bin/python -m bench.bench_studio_load
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path

# Run as a script, Python puts bench/ on sys.path, not the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.bench_ingest import LoadResult, RequestTemplate, build_request, drive
from bench.servers import LOOPBACK, free_port, server_env, wait_for_port

TARGET_P95_MS = 200.0
PAGES = {
    "executions page": "/",
    "filtered page": "/?where=" + urllib.parse.quote("count >= 3"),
    "api list": "/api/executions?limit=50",
}


def _get_ms(url: str) -> float:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as reply:
        reply.read()
    return (time.perf_counter() - started) * 1000


def _sample(base: str, path: str, count: int) -> list[float]:
    return [_get_ms(base + path) for _ in range(count)]


def _p95(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="load phase length")
    parser.add_argument("--samples", type=int, default=40, help="GETs per page and phase")
    args = parser.parse_args(argv)
    template = RequestTemplate(build_request(512))
    with tempfile.TemporaryDirectory(prefix="statetrail-studio-bench-") as tmp:
        grpc_port, http_port = free_port(), free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "collector", "serve", "--db", str(Path(tmp) / "b.duckdb"),
             "--host", LOOPBACK, "--grpc-port", str(grpc_port), "--http-port", str(http_port),
             "--log-level", "warning"],
            env=server_env(True),
        )
        try:
            wait_for_port(process, grpc_port)
            wait_for_port(process, http_port)
            base = f"http://{LOOPBACK}:{http_port}"
            drive(grpc_port, template, exporters=4, seconds=5, max_requests=40,
                  warmup_requests=0)
            idle = {name: _sample(base, path, args.samples) for name, path in PAGES.items()}
            loaded: dict[str, list[float]] = {}
            ingest: list[LoadResult] = []
            load = threading.Thread(
                target=lambda: ingest.append(drive(
                    grpc_port, template, exporters=4, seconds=args.seconds,
                    max_requests=None, warmup_requests=0,
                )),
            )
            load.start()
            time.sleep(1.0)
            for name, path in PAGES.items():
                loaded[name] = _sample(base, path, args.samples)
            load.join()
        finally:
            process.terminate()
            process.wait(timeout=120)
    print(f"{'page':>18} {'idle p50':>9} {'idle p95':>9} {'load p50':>9} {'load p95':>9} "
          f"{'p95 ratio':>9}")
    for name in PAGES:
        a, b = idle[name], loaded[name]
        print(f"{name:>18} {statistics.median(a):9.1f} {_p95(a):9.1f} "
              f"{statistics.median(b):9.1f} {_p95(b):9.1f} {_p95(b) / _p95(a):9.1f}")
    # Studio requests come first (collector/foreground.py): ingest gives way to
    # them, so say what that cost ingest while the pages were being sampled.
    if ingest:
        result = ingest[0]
        print(f"ingest during the load phase: {result.spans_per_second:,.0f} spans/s, "
              f"RPC p50 {result.latency_ms(0.5):.0f} ms, p99 {result.latency_ms(0.99):.0f} ms, "
              f"{result.failures} failed")
    worst = _p95(loaded["executions page"])
    verdict = "PASS" if worst <= TARGET_P95_MS else "FAIL"
    print(f"target executions page p95 <= {TARGET_P95_MS:.0f} ms under load: {verdict} "
          f"({worst:.0f} ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
