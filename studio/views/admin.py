"""Operator routes: what the command line asks while `statetrail serve` holds the database.

Invariant: a request is served only from a loopback peer carrying the admin token this
server wrote into its sidecar file (mode 0600), so only the operator can change keys
or prune; every route is wrapped in `admin_only`, so none can forget the gate. The
plain key never reaches the server (`keys create` sends its SHA-256 digest). The
routes are listed in docs/api.md, "Operator routes".
"""

from __future__ import annotations

import functools
import hmac
from collections.abc import Callable, Coroutine
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from collector.config import is_loopback
from collector.durations import RETENTION_UNITS, DurationError, parse_duration
from collector.row_json import key_json
from collector.server import ADMIN_TOKEN_HEADER, KeyRequestInvalid, ManagedKeys
from collector.store import KeyNameTaken, StoreError
from studio.json_errors import json_error
from studio.services import services_of
from studio.views import api

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


def admin_only(handler: Handler) -> Handler:
    """`handler`, run only for requests `_refusal` lets through."""

    @functools.wraps(handler)
    async def gated(request: Request) -> Response:
        refusal = _refusal(request)
        return refusal if refusal is not None else await handler(request)

    return gated


def _refusal(request: Request) -> Response | None:
    """Why this request may not use the admin routes, or None if it may."""
    if request.client is None or not is_loopback(request.client.host):
        return json_error(403, "the admin routes answer only on loopback")
    expected = services_of(request).write_side.admin_token
    presented = request.headers.get(ADMIN_TOKEN_HEADER, "")
    # Constant time, so the token cannot be guessed a byte at a time.
    if not hmac.compare_digest(presented.encode(), expected.encode()):
        return json_error(
            401, f"send the admin token from the server's sidecar file as {ADMIN_TOKEN_HEADER}"
        )
    return None


@admin_only
async def list_keys(request: Request) -> Response:
    found = await run_in_threadpool(_keys(request).list)
    return JSONResponse({"keys": [key_json(key) for key in found]})


@admin_only
async def create_key(request: Request) -> Response:
    try:
        document = await request.json()
        name, key_digest = document["name"], document["digest"]
    except (ValueError, KeyError, TypeError):
        return json_error(400, 'send a JSON object {"name": ..., "digest": <sha256 hex>}')
    if not isinstance(name, str) or not isinstance(key_digest, str):
        return json_error(400, "name and digest must be strings")
    try:
        key = await run_in_threadpool(_keys(request).create, name, key_digest)
    except KeyRequestInvalid as exc:
        return json_error(400, str(exc))
    except KeyNameTaken as exc:
        return json_error(409, str(exc))
    return JSONResponse({"key": key_json(key)}, status_code=201)


@admin_only
async def revoke_key(request: Request) -> Response:
    name = request.path_params["name"]
    key = await run_in_threadpool(_keys(request).revoke, name)
    if key is None:
        return json_error(404, f"no active key is named {name!r}")
    return JSONResponse({"key": key_json(key)})


@admin_only
async def list_executions(request: Request) -> Response:
    return await run_in_threadpool(api.list_executions, request)


@admin_only
async def prune(request: Request) -> Response:
    try:
        document = await request.json()
        age = parse_duration(str(document["older_than"]), RETENTION_UNITS)
    except DurationError as exc:
        return json_error(400, str(exc))
    except (ValueError, KeyError, TypeError):
        return json_error(400, 'send a JSON object {"older_than": "30d"}')
    try:
        counts = await run_in_threadpool(services_of(request).write_side.prune, age)
    except StoreError as exc:
        return json_error(503, str(exc))
    return JSONResponse({"pruned": counts.as_dict()})


def _keys(request: Request) -> ManagedKeys:
    return services_of(request).write_side.managed_keys
