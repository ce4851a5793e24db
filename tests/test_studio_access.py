"""Studio access: login, sessions, CSRF and bearer tokens, against a real `serve --auth`.

The route list is read from the application itself, so a route added later is
covered by the "nothing answers without a login" test without editing it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
from starlette.routing import BaseRoute, Mount, Route
from support.servers import MakeServer, Server, fixture_requests

from collector.config import Config
from studio import access
from studio.access import is_exempt
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
    from collector.cli.main import _parser
    from collector.config import serve_config

    secret = tmp_path / "password"
    secret.write_text("from-a-file\n")
    args = _parser({}).parse_args(["serve", "--auth", "--studio-password-file", str(secret)])
    config = serve_config(args)
    assert config.studio_password == "from-a-file"
    assert "from-a-file" not in repr(config)


def _throttled_server(make_server: MakeServer, *args: str, window: str = "10m") -> Server:
    """A login server whose throttle allows 5 wrong passwords an address, 12 in all."""
    server: Server = make_server(
        "--auth", "--studio-password", PASSWORD, "--login-failures", "5",
        "--login-failures-global", "12", "--login-window", window, *args,
    )
    return server


def _form_login(
    client: httpx.Client, server: Server, password: str, headers: dict[str, str] | None = None
) -> httpx.Response:
    token = _login_form(client)
    return client.post(
        "/login", data={"csrf_token": token, "password": password},
        headers={"origin": server.url, **(headers or {})},
    )


def _bearer(client: httpx.Client, password: str, headers: dict[str, str] | None = None
            ) -> httpx.Response:
    return client.get(
        "/api/executions", headers={"authorization": f"Bearer {password}", **(headers or {})}
    )


def _is_throttled(response: httpx.Response) -> bool:
    retry_after = int(response.headers.get("retry-after", "0"))
    return response.status_code == 429 and retry_after >= 1


def test_studio_access_bearer_and_form_share_one_throttle(make_server: MakeServer) -> None:
    server = _throttled_server(make_server)
    with _client(server) as client:
        assert [_bearer(client, f"guess-{n}").status_code for n in range(5)] == [401] * 5
        locked = _bearer(client, "guess-5")
        assert _is_throttled(locked), locked.text
        assert "not checked" in locked.json()["error"]
        # While locked out the password is not checked: the right one is refused too,
        # so a lockout tells a guesser nothing.
        assert _is_throttled(_bearer(client, PASSWORD))
        form = _form_login(client, server, PASSWORD)
        assert _is_throttled(form)
        assert "Too many wrong passwords" in form.text
    with _client(server) as other:
        assert _is_throttled(_form_login(other, server, "guess"))


def test_studio_access_session_survives_a_lockout(make_server: MakeServer) -> None:
    server = _throttled_server(make_server)
    with _client(server) as signed_in, _client(server) as guesser:
        assert _login(signed_in, server).status_code == 303
        for n in range(6):
            _bearer(guesser, f"guess-{n}")
        assert _is_throttled(_bearer(guesser, "guess"))
        assert signed_in.get("/api/executions").status_code == 200


def test_studio_access_lockout_expires_for_the_right_password(make_server: MakeServer) -> None:
    # The first lockout lasts a sixteenth of the window: 2 s.
    server = _throttled_server(make_server, window="32s")
    with _client(server) as client:
        for n in range(5):
            assert _form_login(client, server, f"guess-{n}").status_code == 401
        locked = _bearer(client, PASSWORD)
        assert _is_throttled(locked)
        assert int(locked.headers["retry-after"]) <= 2
        time.sleep(int(locked.headers["retry-after"]) + 0.5)
        assert _bearer(client, PASSWORD).status_code == 200


def test_studio_access_ignores_forwarded_for_from_unnamed_proxies(
    make_server: MakeServer,
) -> None:
    server = _throttled_server(make_server)
    with _client(server) as client:
        answers = [
            _form_login(client, server, "guess", {"x-forwarded-for": f"10.0.0.{n}"})
            for n in range(7)
        ]
        # Every guess counted against the real peer, 127.0.0.1, whatever the header said.
        assert [a.status_code for a in answers[:5]] == [401] * 5
        assert all(_is_throttled(a) for a in answers[5:])


def test_studio_access_named_proxy_keys_on_the_forwarded_address_within_a_global_budget(
    make_server: MakeServer,
) -> None:
    server = _throttled_server(make_server, "--forwarded-allow-ips", "127.0.0.1")
    with _client(server) as client:
        # The operator signs in from 192.0.2.1 (through the proxy) before the attack.
        assert _bearer(client, PASSWORD, {"x-forwarded-for": "192.0.2.1"}).status_code == 200
        # One forwarded address is locked out on its own budget...
        for _ in range(5):
            assert _bearer(client, "guess", {"x-forwarded-for": "10.0.0.1"}).status_code == 401
        assert _is_throttled(_bearer(client, "guess", {"x-forwarded-for": "10.0.0.1"}))
        # ...and each other one has its own, but the global budget
        # (12 wrong passwords) stops the rotation.
        statuses = [
            _bearer(client, "guess", {"x-forwarded-for": f"10.1.0.{n}"}).status_code
            for n in range(40)
        ]
        assert statuses.count(401) == 12 - 5
        assert set(statuses[7:]) == {429}
        fresh = _bearer(client, PASSWORD, {"x-forwarded-for": "10.2.0.1"})
        assert _is_throttled(fresh)
        assert "everywhere" in fresh.json()["error"]
        # An address that signed in before still may, during the global lockout.
        assert _bearer(client, PASSWORD, {"x-forwarded-for": "192.0.2.1"}).status_code == 200
