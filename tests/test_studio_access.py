"""Studio access: login, sessions, CSRF and bearer tokens, against a real `serve --auth`.

The route list is read from the application itself, so a route added later is
covered by the "nothing answers without a login" test without editing it.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import BaseRoute, Mount, Route
from support.servers import MakeServer, Server, fixture_requests

from collector.config import Config
from studio import access
from studio.access import StudioAccess, is_exempt
from studio.app import create_app

PASSWORD = "correct horse battery staple"
_PARAM = re.compile(r"\{[^}]+\}")


def _auth_server(make_server: MakeServer) -> Server:
    server: Server = make_server("--auth", "--studio-password", PASSWORD)
    return server


def _client(server: Server) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=30, follow_redirects=False)


def _login_form(client: httpx.Client) -> str:
    page = client.get("/login")
    assert page.status_code == 200
    match = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert match is not None
    return match.group(1)


def _login(client: httpx.Client, server: Server, password: str = PASSWORD) -> httpx.Response:
    token = _login_form(client)
    return client.post(
        "/login",
        data={"csrf_token": token, "password": password, "next": "/api/executions"},
        headers={"origin": server.url},
    )


def _session_csrf(client: httpx.Client) -> str:
    """The session's CSRF token, as the sign-out form carries it."""
    page = client.get("/logout")
    assert page.status_code == 200
    match = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert match is not None
    return match.group(1)


def _guarded_routes() -> list[tuple[str, str]]:
    """(method, concrete path) for every route of the app that needs a login."""
    app = create_app(Config(auth=True, studio_password=PASSWORD), grpc=False)
    found: list[tuple[str, str]] = []

    def visit(routes: list[BaseRoute], prefix: str) -> None:
        for route in routes:
            if isinstance(route, Route):
                path = prefix + _PARAM.sub("x", route.path)
                for method in sorted(route.methods or {"GET"}):
                    if method != "HEAD" and not is_exempt(path):
                        found.append((method, path))
            elif isinstance(route, Mount):
                path = prefix + route.path
                if not is_exempt(path + "/"):
                    found.append(("GET", path + "/"))
                    visit(list(route.routes), path)
    visit(list(app.routes), "")
    return found


def test_studio_access_every_route_refuses_without_login(make_server: MakeServer) -> None:
    routes = _guarded_routes()
    assert any(path.startswith("/api/") for _, path in routes)
    assert any(not path.startswith("/api/") for _, path in routes)
    server = _auth_server(make_server)
    with _client(server) as client:
        for method, path in routes:
            response = client.request(method, path)
            if path.startswith("/api/"):
                assert response.status_code == 401, (method, path)
                assert "error" in response.json()
                assert response.headers["www-authenticate"].startswith("Bearer")
            else:
                assert response.status_code == 303, (method, path)
                assert response.headers["location"].startswith("/login?next=")
        # The routes with their own rules keep answering.
        assert client.get("/healthz").status_code == 200
        assert client.get("/static/app.css").status_code == 200
        assert client.get("/api/admin/keys").status_code == 401  # wants the admin token
        body, metadata = fixture_requests("a_linear")[0]
        export = client.post("/v1/traces", content=body,
                             headers={"content-type": "application/x-protobuf", **dict(metadata)})
        assert export.status_code == 200


def test_studio_access_login_opens_pages_and_api(make_server: MakeServer) -> None:
    server = _auth_server(make_server)
    with _client(server) as client:
        response = _login(client, server)
        assert response.status_code == 303
        assert response.headers["location"] == "/api/executions"
        cookie = response.headers["set-cookie"]
        assert "HttpOnly" in cookie and "samesite=lax" in cookie.lower()
        assert "Secure" not in cookie  # plain http on loopback
        assert client.get("/api/executions").status_code == 200
        assert client.get("/").status_code == 200
        # Signed in, /login sends you on instead of asking again.
        assert client.get("/login").status_code == 303


def test_studio_access_wrong_password_is_refused(make_server: MakeServer) -> None:
    server = _auth_server(make_server)
    with _client(server) as client:
        response = _login(client, server, password="not it")
        assert response.status_code == 401
        assert "Wrong password" in response.text
        assert access.SESSION_COOKIE not in response.headers.get("set-cookie", "")
        assert client.get("/api/executions").status_code == 401


def test_studio_access_post_without_csrf_is_refused(make_server: MakeServer) -> None:
    server = _auth_server(make_server)
    with _client(server) as client:
        _login_form(client)
        no_token = client.post("/login", data={"password": PASSWORD},
                               headers={"origin": server.url})
        assert no_token.status_code == 403
        token = _login_form(client)
        other_site = client.post("/login", data={"csrf_token": token, "password": PASSWORD},
                                 headers={"origin": "https://evil.example"})
        assert other_site.status_code == 403
        no_origin = client.post("/login", data={"csrf_token": token, "password": PASSWORD})
        assert no_origin.status_code == 403
        assert client.get("/api/executions").status_code == 401

        assert _login(client, server).status_code == 303
        csrf = _session_csrf(client)
        assert client.post("/logout", headers={"origin": server.url}).status_code == 403
        assert client.post("/logout", data={"csrf_token": "forged"},
                           headers={"origin": server.url}).status_code == 403
        assert client.post("/logout", data={"csrf_token": csrf},
                           headers={"origin": "https://evil.example"}).status_code == 403
        # None of those signed the session out.
        assert client.get("/api/executions").status_code == 200


def test_studio_access_logout_invalidates_the_old_cookie(make_server: MakeServer) -> None:
    server = _auth_server(make_server)
    with _client(server) as client:
        assert _login(client, server).status_code == 303
        old_cookie = client.cookies[access.SESSION_COOKIE]
        csrf = _session_csrf(client)
        out = client.post("/logout", data={"csrf_token": csrf}, headers={"referer": server.url})
        assert out.status_code == 303
    with _client(server) as replayed:
        replayed.cookies.set(access.SESSION_COOKIE, old_cookie)
        assert replayed.get("/api/executions").status_code == 401
        assert replayed.get("/").status_code == 303


def test_studio_access_bearer_token_opens_the_api(make_server: MakeServer) -> None:
    server = _auth_server(make_server)
    with _client(server) as client:
        good = client.get("/api/executions", headers={"authorization": f"Bearer {PASSWORD}"})
        assert good.status_code == 200
        assert "executions" in good.json()
        bad = client.get("/api/executions", headers={"authorization": "Bearer wrong"})
        assert bad.status_code == 401


def test_serve_refuses_beyond_loopback_without_a_password(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "collector", "serve", "--db", str(tmp_path / "x.duckdb"),
         "--host", "0.0.0.0", "--insecure"],
        capture_output=True, text=True, timeout=60, check=False,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 2
    assert "--studio-password" in result.stderr
    assert not (tmp_path / "x.duckdb").exists()


def test_serve_reads_the_studio_password_from_a_file(tmp_path: Path) -> None:
    from collector.cli import _parser
    from collector.config import serve_config

    secret = tmp_path / "password"
    secret.write_text("from-a-file\n")
    args = _parser({}).parse_args(["serve", "--auth", "--studio-password-file", str(secret)])
    config = serve_config(args)
    assert config.studio_password == "from-a-file"
    assert "from-a-file" not in repr(config)


def test_studio_access_rate_limits_failed_logins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(access, "FAILED_LOGIN_DELAY_SECONDS", 0.0)
    asyncio.run(_guess_passwords())


async def _guess_passwords() -> None:
    inner = Starlette(routes=[Route("/", lambda request: PlainTextResponse("in"))])
    app = StudioAccess(inner, password=PASSWORD)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://studio") as client:
        statuses = []
        for _ in range(access.MAX_FAILURES + 1):
            page = await client.get("/login")
            match = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
            assert match is not None
            answer = await client.post(
                "/login", data={"csrf_token": match.group(1), "password": "guess"},
                headers={"origin": "http://studio"},
            )
            statuses.append(answer.status_code)
        assert statuses[:-1] == [401] * access.MAX_FAILURES
        assert statuses[-1] == 429
