"""The studio's answer when the store cannot answer: 503, the reason, and when to retry.

A read fails when DuckDB does (out of memory, a full disk, a file that went
away, a store closed under a late request during shutdown). None of that is a
bug in the request, so it is not a 500: the page or the JSON says what the
store said, and `Retry-After` tells clients and probes to come back.
"""

from __future__ import annotations

import logging
from typing import Final

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from collector.store import StoreError
from studio.links import route_path
from studio.templating import templates

logger = logging.getLogger(__name__)

RETRY_AFTER_SECONDS: Final = 5
# Paths whose callers are programs: they get JSON, everyone else a page.
JSON_PATHS: Final = ("/api/", "/healthz", "/v1/")


async def store_unavailable(request: Request, exc: Exception) -> Response:
    """Starlette exception handler for StoreError."""
    assert isinstance(exc, StoreError)
    logger.warning("%s %s: store unavailable: %s", request.method, request.url.path, exc)
    headers = {"Retry-After": str(RETRY_AFTER_SECONDS)}
    if route_path(request.scope).startswith(JSON_PATHS):
        return JSONResponse(
            {"status": "unavailable", "error": str(exc)}, status_code=503, headers=headers
        )
    return templates.TemplateResponse(
        request,
        "unavailable.html",
        {"message": str(exc), "retry_after": RETRY_AFTER_SECONDS},
        status_code=503,
        headers=headers,
    )
