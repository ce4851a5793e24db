"""Managed ingestion keys: `statetrail keys`, with and without a running server.

The CLI runs as a real subprocess. While `statetrail serve` holds the DuckDB
lock it must go through the server's admin route, and a key revoked there must
be refused on the very next export, over HTTP and gRPC alike.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import duckdb
import grpc
import httpx
import pytest
from starlette.requests import Request
from support.servers import MakeServer, Server, export_raw, fixture_requests

from collector.cli.admin_client import ADMIN_TOKEN_HEADER
from collector.cli.sidecar import sidecar_path
from studio.views import admin

PROTOBUF = {"content-type": "application/x-protobuf"}


def _keys(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "collector", "keys", *args, "--db", str(db)],
        capture_output=True, text=True, timeout=60, check=False,
    )


def _create(db: Path, name: str) -> str:
    created = _keys(db, "create", name)
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    assert key and "\n" not in key
    return key


def _listed(db: Path) -> dict[str, dict[str, Any]]:
    listed = _keys(db, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    return {row["name"]: row for row in rows}


def _linear() -> bytes:
    body, _ = fixture_requests("a_linear")[0]
    return body


def _export(server: Server, key: str | None) -> int:
    headers = dict(PROTOBUF)
    if key is not None:
        headers["authorization"] = f"Bearer {key}"
    response = httpx.post(f"{server.url}/v1/traces", content=_linear(), headers=headers,
                          timeout=30)
    return response.status_code


def test_keys_cli_stores_only_a_digest_without_a_server(tmp_path: Path) -> None:
    db = tmp_path / "keys.duckdb"
    key = _create(db, "billing-worker")
    with duckdb.connect(str(db), read_only=True) as connection:
        rows = connection.execute("SELECT * FROM api_keys").fetchall()
    assert len(rows) == 1
    assert hashlib.sha256(key.encode()).hexdigest() in rows[0]
    assert key not in json.dumps(rows, default=str)
    listed = _listed(db)["billing-worker"]
    assert listed["active"] is True
    assert listed["created_at"] and not listed["last_used_at"] and not listed["revoked_at"]

    again = _keys(db, "create", "billing-worker")
    assert again.returncode != 0
    assert "already named" in again.stderr

    assert _keys(db, "revoke", "billing-worker").returncode == 0
    revoked = _listed(db)["billing-worker"]
    assert revoked["active"] is False and revoked["revoked_at"]
    missing = _keys(db, "revoke", "billing-worker")
    assert missing.returncode != 0 and "no active key" in missing.stderr


def test_keys_cli_rejects_unusable_names(tmp_path: Path) -> None:
    db = tmp_path / "keys.duckdb"
    for name in ("two words", "x" * 101, "<script>"):
        result = _keys(db, "create", name)
        assert result.returncode != 0
        assert "key name" in result.stderr
        assert not result.stdout
    assert _listed(db) == {}


@pytest.mark.slow
def test_keys_created_while_serving_are_required_and_revocable(server: Server) -> None:
    assert _export(server, None) == 200  # no keys anywhere yet: loopback is open

    key = _create(server.db, "ci")  # the server holds the file: via the admin route
    assert _export(server, None) == 401
    assert _export(server, "not-the-key") == 401
    assert _export(server, key) == 200
    export_raw(server.grpc_target, _linear(), [("x-junjo-api-key", key)])
    with pytest.raises(grpc.RpcError) as error:
        export_raw(server.grpc_target, _linear())
    assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert _listed(server.db)["ci"]["last_used_at"]

    revoked = _keys(server.db, "revoke", "ci")
    assert revoked.returncode == 0, revoked.stderr
    assert _export(server, key) == 401
    with pytest.raises(grpc.RpcError) as error:
        export_raw(server.grpc_target, _linear(), [("x-junjo-api-key", key)])
    assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED
    # Revoking the last key does not reopen the server to anonymous exports.
    assert _export(server, None) == 401


def test_keys_created_before_serving_are_enforced(make_server: MakeServer, tmp_path: Path) -> None:
    db = tmp_path / "prepared.duckdb"
    key = _create(db, "prepared")
    server: Server = make_server(db=db)
    assert _export(server, None) == 401
    assert _export(server, key) == 200
    server.stop()
    assert _listed(db)["prepared"]["last_used_at"]


def test_keys_configured_and_managed_keys_both_work(make_server: MakeServer) -> None:
    server: Server = make_server("--api-key", "configured-key")
    managed = _create(server.db, "managed")
    assert _export(server, "configured-key") == 200
    assert _export(server, managed) == 200
    assert _export(server, None) == 401


def test_keys_admin_route_needs_the_sidecar_token(server: Server) -> None:
    sidecar = sidecar_path(server.db)
    assert stat.S_IMODE(sidecar.stat().st_mode) == 0o600
    token = json.loads(sidecar.read_text())["admin_token"]
    url = f"{server.url}/api/admin/keys"
    body = {"name": "sneaky", "digest": hashlib.sha256(b"k").hexdigest()}
    assert httpx.post(url, json=body).status_code == 401
    guessed = httpx.post(url, json=body, headers={ADMIN_TOKEN_HEADER: "guess"})
    assert guessed.status_code == 401
    assert httpx.get(url).status_code == 401
    allowed = httpx.get(url, headers={ADMIN_TOKEN_HEADER: token})
    assert allowed.status_code == 200 and allowed.json() == {"keys": []}
    bad_digest = httpx.post(url, json={"name": "x", "digest": "k"},
                            headers={ADMIN_TOKEN_HEADER: token})
    assert bad_digest.status_code == 400
    assert _export(server, None) == 200  # nothing was created


def test_keys_admin_route_refuses_non_loopback_peers() -> None:
    token = "operator-token"
    services = SimpleNamespace(admin_token=token)
    request = Request(
        {
            "type": "http",
            "method": "GET",
            "path": "/api/admin/keys",
            "headers": [(ADMIN_TOKEN_HEADER.encode(), token.encode())],
            "client": ("203.0.113.7", 40000),
            "app": SimpleNamespace(state=SimpleNamespace(services=services)),
        }
    )
    response = asyncio.run(admin.list_keys(request))
    assert response.status_code == 403
