"""Slow clients against `statetrail serve`: do they hold the server, and for how long?

Phase 1: `--uploads` OTLP/HTTP uploads (raw sockets, `--sources` loopback
addresses) declare `Content-Length: --declared` and send one byte a second,
while the real OpenTelemetry exporters (gRPC and HTTP, timeout `--export-timeout`)
export once every two seconds. Prints how long the server held the uploads, what
it answered them, and how many real exports failed meanwhile.

Phase 2: `--heads` connections send a request line and then one header line a
second, never ending the head. Prints how long the server held them.

Run: `.venv/bin/python bench/slow_clients.py [--seconds 90] [-- serve flags...]`
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.sdk.trace.export import SpanExportResult
from support.servers import Server
from support.slow_clients import (
    SLOW_HEAD_LINE,
    SLOW_HEAD_START,
    SlowClients,
    real_spans,
    upload_head,
)

EXPORT_EVERY_SECONDS = 2.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uploads", type=int, default=32)
    parser.add_argument("--declared", type=int, default=100_000)
    parser.add_argument("--sources", type=int, default=1, help="loopback source addresses")
    parser.add_argument("--heads", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=90.0, help="bound on each phase")
    parser.add_argument("--export-timeout", type=float, default=5.0)
    parser.add_argument("serve_args", nargs="*", help="extra `statetrail serve` flags")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        server = Server.on_free_ports(Path(folder) / "slow.duckdb", *args.serve_args).start()
        try:
            _slow_bodies(server, args)
            _slow_heads(server, args)
        finally:
            server.stop()
    return 0


def _slow_bodies(server: Server, args: argparse.Namespace) -> None:
    sources = [f"127.0.0.{2 + n}" for n in range(args.sources)]
    uploads = SlowClients.open(
        ("127.0.0.1", server.http_port), args.uploads, upload_head(args.declared), b"\x00",
        sources,
    )
    results: dict[str, list[SpanExportResult]] = {"grpc": [], "http": []}
    stop = threading.Event()
    exporting = threading.Thread(target=_export_until, args=(server, args, results, stop))
    started = time.monotonic()
    exporting.start()
    uploads.run(args.seconds)
    stop.set()
    exporting.join()
    print(
        f"slow bodies: uploads={args.uploads} sources={args.sources} {_held(uploads)} "
        f"phase_s={time.monotonic() - started:.0f}"
    )
    for transport, outcomes in results.items():
        failed = sum(result is not SpanExportResult.SUCCESS for result in outcomes)
        print(f"  real {transport} exports meanwhile: {len(outcomes)}, failed {failed}")
    uploads.close()
    health = server.get_json("/healthz")
    print(f"  healthz afterwards: spans={health['spans']}")


def _export_until(
    server: Server,
    args: argparse.Namespace,
    results: dict[str, list[SpanExportResult]],
    stop: threading.Event,
) -> None:
    grpc_exporter = GrpcSpanExporter(
        endpoint=server.grpc_target, insecure=True, timeout=args.export_timeout
    )
    http_exporter = HttpSpanExporter(
        endpoint=f"{server.url}/v1/traces", timeout=args.export_timeout
    )
    try:
        while not stop.wait(EXPORT_EVERY_SECONDS):
            results["grpc"].append(grpc_exporter.export(real_spans()))
            results["http"].append(http_exporter.export(real_spans()))
    finally:
        grpc_exporter.shutdown()
        http_exporter.shutdown()  # type: ignore[no-untyped-call]  # untyped in the SDK


def _slow_heads(server: Server, args: argparse.Namespace) -> None:
    heads = SlowClients.open(
        ("127.0.0.1", server.http_port), args.heads, SLOW_HEAD_START, SLOW_HEAD_LINE
    )
    heads.run(args.seconds)
    print(f"slow heads: connections={args.heads} {_held(heads)}")
    heads.close()


def _held(clients: SlowClients) -> str:
    """How long the server held the connections, how many it still does, what it answered."""
    held = clients.held_seconds()
    answers = sorted({answer[:12].decode(errors="replace") or "closed"
                      for answer in clients.answers()})
    return (
        f"held_s min={min(held):.1f} median={statistics.median(held):.1f} max={max(held):.1f} "
        f"still_open={clients.open_count} answers={answers}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
