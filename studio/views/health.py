"""GET /healthz: liveness, the store's counts, and whether stored answers may still change."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from studio.services import services_of


def healthz(request: Request) -> Response:
    """Liveness plus counts; `replaying` says stored rows or verdicts may still change.

    `backlog_bytes` is what was received and acknowledged (durable in the spool)
    but not stored in DuckDB yet, as the spool holds it: compressed.
    """
    write_side = services_of(request).write_side
    backlog = write_side.backlog_bytes()
    replaying = write_side.replaying()
    counts = write_side.store.counts()
    return JSONResponse(
        {"status": "ok", "replaying": replaying, "backlog_bytes": backlog, **counts}
    )
