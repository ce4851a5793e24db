"""Marks studio requests as foreground work (collector/foreground.py), as ASGI middleware.

Every HTTP request counts except OTLP/HTTP exports (they are the background
work that gives way), static files and health checks (both cheap, and health
checks are polled by machines, not people).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from collector.foreground import Foreground
from collector.server import TRACES_PATH
from studio.links import route_path

BACKGROUND_PATHS = frozenset({TRACES_PATH, "/healthz"})


class ForegroundRequests:
    def __init__(self, app: ASGIApp, foreground: Foreground) -> None:
        self.app = app
        self.foreground = foreground

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = route_path(scope)
        if path in BACKGROUND_PATHS or path.startswith("/static/"):
            await self.app(scope, receive, send)
            return
        with self.foreground.serving():
            await self.app(scope, receive, send)
