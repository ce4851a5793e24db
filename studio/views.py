"""Thin HTML handlers: parse the request, ask the store, render a template."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from collector.store.listing import ExecutionQuery
from studio.api import store_of
from studio.templating import templates


async def executions_page(request: Request) -> Response:
    rows = store_of(request).search(ExecutionQuery(limit=50))
    return templates.TemplateResponse(request, "executions.html", {"executions": rows[:50]})


async def healthz(request: Request) -> Response:
    """Liveness plus counts; `replaying` says stored verdicts may still change."""
    replaying = not request.app.state.services.replayer.wait_idle(0)
    return JSONResponse({"status": "ok", "replaying": replaying, **store_of(request).counts()})
