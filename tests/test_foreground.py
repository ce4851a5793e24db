"""Studio requests come first: background work gives way to them, within a bound."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from support.servers import export_raw, fixture_requests, free_port, serving_in_thread

from collector.foreground import Foreground
from collector.intake.ingest import Ingestor
from collector.receive.admission import Admission
from collector.receive.auth import KeyChecker
from collector.receive.otlp_grpc import GrpcReceiver, TraceExportHandler
from collector.receive.otlp_http import HttpTraceReceiver
from collector.store import Store
from studio.foreground_middleware import ForegroundRequests


def test_give_way_returns_at_once_when_no_request_is_in_progress() -> None:
    assert Foreground(max_yield_seconds=5).give_way() == 0.0


def test_give_way_waits_until_the_request_ends() -> None:
    foreground = Foreground(max_yield_seconds=10)
    waited: list[float] = []
    with foreground.serving():
        worker = threading.Thread(target=lambda: waited.append(foreground.give_way()))
        worker.start()
        time.sleep(0.3)
        assert worker.is_alive(), "background work ran during a foreground request"
    worker.join(timeout=5)
    assert not worker.is_alive()
    assert 0.2 <= waited[0] < 5


def test_give_way_is_bounded_however_long_the_request() -> None:
    foreground = Foreground(max_yield_seconds=0.2)
    with foreground.serving(), foreground.serving():
        began = time.monotonic()
        foreground.give_way()
        assert 0.15 <= time.monotonic() - began < 2


@pytest.mark.slow
def test_studio_requests_are_foreground_and_exports_and_health_checks_are_not() -> None:
    foreground = Foreground(max_yield_seconds=10)
    seen: dict[str, bool] = {}

    def handler(request: Request) -> PlainTextResponse:
        # A request in progress shows as a wait for background work.
        seen[request.url.path] = _blocks(foreground)
        return PlainTextResponse("ok")

    paths = ("/", "/api/executions", "/v1/traces", "/healthz")
    app = Starlette(routes=[Route(path, handler, methods=["GET", "POST"]) for path in paths])
    with serving_in_thread(ForegroundRequests(app, foreground), free_port()) as base:
        httpx.get(base + "/")
        httpx.get(base + "/api/executions")
        httpx.post(base + "/v1/traces")
        httpx.get(base + "/healthz")
    assert seen == {"/": True, "/api/executions": True, "/v1/traces": False, "/healthz": False}
    assert foreground.give_way() == 0.0  # every request ended


def _blocks(foreground: Foreground) -> bool:
    """Whether background work would wait now (asked from another thread)."""
    worker = threading.Thread(target=foreground.give_way, daemon=True)
    worker.start()
    worker.join(timeout=1.0)  # far longer than an unblocked give_way takes
    return worker.is_alive()


@pytest.fixture
def receivers(tmp_path: Path) -> Iterator[tuple[Foreground, Ingestor, str, str]]:
    """A real ingestor behind both receivers, sharing a Foreground the test controls:
    (foreground, ingestor, gRPC target, OTLP/HTTP URL)."""
    foreground = Foreground(max_yield_seconds=30)
    store = Store(tmp_path / "f.duckdb")
    ingestor = Ingestor(store, tmp_path / "spool", foreground=foreground)
    keys = KeyChecker(())
    max_receive_bytes = 64 * 2**20
    grpc_receiver = GrpcReceiver(
        TraceExportHandler(ingestor, keys, Admission(8, 256 * 2**20), retry_after_seconds=1),
        "127.0.0.1:0", workers=4, max_receive_bytes=max_receive_bytes,
    )
    grpc_receiver.start()
    http_receiver = HttpTraceReceiver(
        ingestor, keys, Admission(8, 256 * 2**20),
        max_receive_bytes=max_receive_bytes, retry_after_seconds=1,
    )
    app = Starlette(routes=[Route("/v1/traces", http_receiver.export, methods=["POST"])])
    try:
        with serving_in_thread(app, free_port()) as base:
            yield foreground, ingestor, f"127.0.0.1:{grpc_receiver.port}", base + "/v1/traces"
    finally:
        grpc_receiver.stop(5)
        ingestor.close()
        store.close()


def test_receivers_wait_to_decode_while_a_studio_request_is_served(
    receivers: tuple[Foreground, Ingestor, str, str],
) -> None:
    foreground, ingestor, grpc_target, http_url = receivers
    body, _ = fixture_requests("a_linear")[0]
    exports = {
        "grpc": lambda: export_raw(grpc_target, body),
        "http": lambda: httpx.post(
            http_url, content=body, headers={"content-type": "application/x-protobuf"},
            timeout=60,
        ).raise_for_status(),
    }
    for name, export in exports.items():
        done = threading.Event()

        def send(export: Callable[[], object] = export, done: threading.Event = done) -> None:
            export()
            done.set()

        with foreground.serving():
            sender = threading.Thread(target=send, daemon=True)
            sender.start()
            # The wait is bounded at 30 s here: the export must still be waiting, and
            # not in the spool yet (the extractor, which also gives way, would hold
            # back its acknowledgement even if the receiver had decoded it).
            assert not done.wait(1.0), f"{name}: acknowledged during a studio request"
            assert ingestor.backlog_bytes() == 0, f"{name}: decoded during a studio request"
        assert done.wait(10), f"{name}: the export did not go on once the request ended"
        sender.join(timeout=5)
