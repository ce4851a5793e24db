"""Operator route behind `statetrail prune` while `statetrail serve` holds the database.

Same gate as the key routes in studio/admin.py (loopback peer + the admin token
from the 0600 sidecar file), reused rather than repeated so the two can never
drift apart.

- POST /api/admin/prune {"older_than": "30d"} -> {"pruned": {"traces": N, "spans": N, ...}}
"""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from collector.durations import RETENTION_UNITS, DurationError, parse_duration
from collector.pruner import prune_older_than
from collector.store import StoreError
from studio import admin
from studio.services import store_of


async def prune(request: Request) -> Response:
    refusal = admin.admin_refusal(request)
    if refusal is not None:
        return refusal
    try:
        document = await request.json()
        age = parse_duration(str(document["older_than"]), RETENTION_UNITS)
    except DurationError as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)
    except (ValueError, KeyError, TypeError):
        return JSONResponse(
            {"error": 'send a JSON object {"older_than": "30d"}'}, status_code=400
        )
    store = store_of(request)
    try:
        counts = await run_in_threadpool(prune_older_than, store, age)
    except StoreError as exc:
        return JSONResponse({"error": str(exc)}, status_code=503)
    return JSONResponse({"pruned": counts.as_dict()})
