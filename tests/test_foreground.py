"""Studio requests come first: background work gives way to them, within a bound."""

from __future__ import annotations

import threading
import time

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from support import free_port

from collector.foreground import Foreground
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


def test_studio_requests_are_foreground_and_exports_and_health_checks_are_not() -> None:
    foreground = Foreground(max_yield_seconds=10)
    seen: dict[str, bool] = {}

    def handler(request: Request) -> PlainTextResponse:
        # A request in progress shows as a wait for background work.
        seen[request.url.path] = _blocks(foreground)
        return PlainTextResponse("ok")

    paths = ("/", "/api/executions", "/v1/traces", "/healthz")
    app = Starlette(routes=[Route(path, handler, methods=["GET", "POST"]) for path in paths])
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(ForegroundRequests(app, foreground), port=port, log_level="warning")
    )
    serving = threading.Thread(target=server.run, daemon=True)
    serving.start()
    try:
        while not server.started:
            time.sleep(0.01)
        base = f"http://127.0.0.1:{port}"
        httpx.get(base + "/")
        httpx.get(base + "/api/executions")
        httpx.post(base + "/v1/traces")
        httpx.get(base + "/healthz")
    finally:
        server.should_exit = True
        serving.join(timeout=10)
    assert seen == {"/": True, "/api/executions": True, "/v1/traces": False, "/healthz": False}
    assert foreground.give_way() == 0.0  # every request ended


def _blocks(foreground: Foreground) -> bool:
    """Whether background work would wait now (asked from another thread)."""
    worker = threading.Thread(target=foreground.give_way, daemon=True)
    worker.start()
    worker.join(timeout=1.0)  # far longer than an unblocked give_way takes
    return worker.is_alive()
