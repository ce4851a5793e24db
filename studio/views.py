"""Thin request handlers: parse the request, ask the store, render."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from collector.store import ExecutionSummary, Store
from studio.templating import rfc3339, templates

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500


def _store(request: Request) -> Store:
    store: Store = request.app.state.services.store
    return store


def _limit(request: Request) -> int:
    try:
        limit = int(request.query_params.get("limit", DEFAULT_PAGE_SIZE))
    except ValueError:
        return DEFAULT_PAGE_SIZE
    return max(1, min(limit, MAX_PAGE_SIZE))


def execution_json(summary: ExecutionSummary) -> dict[str, Any]:
    return {
        "id": summary.run_id,
        "kind": summary.kind,
        "workflow": summary.name,
        "service": summary.service,
        "status": summary.status,
        "started_at": rfc3339(summary.start_unix_nano),
        "ended_at": rfc3339(summary.end_unix_nano),
        "start_unix_nano": summary.start_unix_nano,
        "end_unix_nano": summary.end_unix_nano,
        "transition_count": summary.transition_count,
        "received_transitions": summary.received_transitions,
        "trace_id": summary.trace_id,
        "store_id": summary.store_id,
    }


async def executions_api(request: Request) -> Response:
    summaries = _store(request).list_executions(limit=_limit(request))
    return JSONResponse({"executions": [execution_json(s) for s in summaries], "next": None})


async def executions_page(request: Request) -> Response:
    summaries = _store(request).list_executions(limit=_limit(request))
    return templates.TemplateResponse(request, "executions.html", {"executions": summaries})


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok", **_store(request).counts()})
