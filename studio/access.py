"""Studio access: a login in front of every page and API route, as a pure ASGI middleware.

Installed when the studio listens beyond loopback or `--auth` is given. Every request
needs a live session cookie or `Authorization: Bearer <studio password>`, except the
routes with their own rules (`EXEMPT_PATHS`, /static, the admin routes); state-changing
cookie requests must also pass the origin and CSRF checks; every password check goes
through one `LoginThrottle` (429 with Retry-After while it refuses). The rules are
specified in docs/security.md, "Sessions and CSRF".
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from studio.json_errors import json_error
from studio.links import Links, route_path
from studio.login_throttle import LoginThrottle, Refusal
from studio.templating import templates

LOGIN_PATH: Final = "/login"
LOGOUT_PATH: Final = "/logout"
SESSION_COOKIE: Final = "statetrail_session"
LOGIN_CSRF_COOKIE: Final = "statetrail_login_csrf"
CSRF_FIELD: Final = "csrf_token"
CSRF_HEADER: Final = "x-csrf-token"
# Exact paths and path prefixes that keep their own access rules.
EXEMPT_PATHS: Final = frozenset({"/healthz", "/v1/traces"})
EXEMPT_PREFIXES: Final = ("/static/", "/api/admin/")

SESSION_SECONDS: Final = 12 * 3600
LOGIN_FORM_SECONDS: Final = 3600
MAX_SESSIONS: Final = 10_000
# A studio form is small; a bigger body is not a form this middleware reads.
MAX_FORM_BYTES: Final = 1024 * 1024
SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})


def csrf_token(request: Request) -> str:
    """The CSRF token a studio form must send back, or "" when no login is required."""
    token: str = getattr(request.state, "csrf_token", "")
    return token


def is_exempt(path: str) -> bool:
    """Whether a path keeps its own access rules instead of the studio login."""
    return path in EXEMPT_PATHS or path.startswith(EXEMPT_PREFIXES)


@dataclass(slots=True)
class _Session:
    csrf_token: str
    expires_at: float


class _Refused(Exception):
    def __init__(self, response: Response) -> None:
        super().__init__(response.status_code)
        self.response = response


class StudioAccess:
    """ASGI middleware: sessions, bearer tokens, CSRF, and the /login and /logout pages."""

    def __init__(self, app: ASGIApp, *, password: str, throttle: LoginThrottle) -> None:
        self._app = app
        self._password_digest = _digest(password)
        self._throttle = throttle
        # Per process: restarting the server signs every session out.
        secret = secrets.token_bytes(32)
        self._session_signer = URLSafeTimedSerializer(secret, salt="statetrail-session")
        self._login_signer = URLSafeTimedSerializer(secret, salt="statetrail-login-form")
        self._sessions: dict[str, _Session] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._app(scope, receive, send)
            return
        path = route_path(scope)
        if scope["type"] == "websocket":
            if is_exempt(path) or isinstance(self._authenticated(Request(scope)), str):
                await self._app(scope, receive, send)
            else:
                await send({"type": "websocket.close", "code": 1008})
            return
        request = Request(scope, receive)
        try:
            if path == LOGIN_PATH:
                response = await self._login(request)
            elif path == LOGOUT_PATH:
                response = await self._logout(request)
            elif is_exempt(path):
                await self._app(scope, receive, send)
                return
            else:
                await self._guarded(request, send)
                return
        except _Refused as refused:
            response = refused.response
        await response(scope, receive, send)

    # -- the guarded app ---------------------------------------------------------

    async def _guarded(self, request: Request, send: Send) -> None:
        via = self._authenticated(request)
        if isinstance(via, Refusal):
            raise _Refused(_throttled(via))
        if via is None:
            raise _Refused(_unauthenticated(request))
        receive: Receive = request.receive
        if via == "cookie":
            session = self._session(request)
            assert session is not None
            request.scope.setdefault("state", {})["csrf_token"] = session.csrf_token
            if request.method not in SAFE_METHODS:
                _check_origin(request)
                body = await _read_body(request)
                receive = _replay(body, request.receive)
                presented = request.headers.get(CSRF_HEADER) or str(
                    (await _form(request.scope, body)).get(CSRF_FIELD, "")
                )
                if not _same(presented, session.csrf_token):
                    raise _Refused(_forbidden("missing or wrong CSRF token; reload the page"))
        await self._app(request.scope, receive, send)

    def _authenticated(self, request: Request) -> str | Refusal | None:
        """"bearer" or "cookie" when the request may pass; the throttle's refusal; else None."""
        authorization = request.headers.get("authorization", "")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() == "bearer" and token:
            checked = self._check_password(request, token.strip())
            if isinstance(checked, Refusal):
                return checked
            return "bearer" if checked else None
        return "cookie" if self._session(request) is not None else None

    def _check_password(self, request: Request, presented: str) -> bool | Refusal:
        """Whether `presented` is the password, or the throttle's refusal to check it."""
        address = request.client.host if request.client else ""
        refusal = self._throttle.refusal(address)
        if refusal is not None:
            return refusal
        if _same_digest(_digest(presented), self._password_digest):
            self._throttle.succeeded(address)
            return True
        self._throttle.failed(address)
        return False

    def _session(self, request: Request) -> _Session | None:
        cookie = request.cookies.get(SESSION_COOKIE)
        if not cookie:
            return None
        try:
            session_id = self._session_signer.loads(cookie, max_age=SESSION_SECONDS)
        except BadSignature:
            return None
        session = self._sessions.get(str(session_id))
        if session is None or session.expires_at < time.monotonic():
            return None
        return session

    # -- /login and /logout ----------------------------------------------------------

    async def _login(self, request: Request) -> Response:
        links = Links.of(request)
        next_path = _local_path(request.query_params.get("next", ""), links)
        if request.method in SAFE_METHODS:
            if self._session(request) is not None:
                return RedirectResponse(next_path, status_code=303)
            return self._login_page(request, next_path)
        if request.method != "POST":
            return Response(status_code=405, headers={"allow": "GET, POST"})
        _check_origin(request)
        form = await _form(request.scope, await _read_body(request))
        next_path = _local_path(str(form.get("next", next_path)), links)
        if not self._login_form_genuine(request, str(form.get(CSRF_FIELD, ""))):
            return self._login_page(
                request, next_path, "The sign-in form expired; try again.", status_code=403
            )
        checked = self._check_password(request, str(form.get("password", "")))
        if isinstance(checked, Refusal):
            response = self._login_page(
                request, next_path,
                f"Too many wrong passwords; try again in {checked.retry_after_seconds} s.",
                status_code=429,
            )
            response.headers["retry-after"] = str(checked.retry_after_seconds)
            return response
        if not checked:
            return self._login_page(request, next_path, "Wrong password.", status_code=401)
        response = RedirectResponse(next_path, status_code=303)
        response.set_cookie(
            SESSION_COOKIE,
            self._session_signer.dumps(self._new_session()),
            max_age=SESSION_SECONDS,
            path=links.path("/"),
            httponly=True,
            samesite="lax",
            secure=request.url.scheme == "https",
        )
        response.delete_cookie(LOGIN_CSRF_COOKIE, path=links.path(LOGIN_PATH))
        return response

    async def _logout(self, request: Request) -> Response:
        links = Links.of(request)
        session = self._session(request)
        if session is None:
            return RedirectResponse(links.path(LOGIN_PATH), status_code=303)
        if request.method in SAFE_METHODS:
            # Signing out changes state, so it takes a POST with the CSRF token.
            return _render("login.html", links, mode="logout", csrf_token=session.csrf_token,
                           next=links.executions(), error=None)
        if request.method != "POST":
            return Response(status_code=405, headers={"allow": "GET, POST"})
        _check_origin(request)
        form = await _form(request.scope, await _read_body(request))
        presented = request.headers.get(CSRF_HEADER) or str(form.get(CSRF_FIELD, ""))
        if not _same(presented, session.csrf_token):
            raise _Refused(_forbidden("missing or wrong CSRF token; reload the page"))
        cookie = request.cookies[SESSION_COOKIE]
        self._sessions.pop(str(self._session_signer.loads(cookie)), None)
        response = RedirectResponse(links.path(LOGIN_PATH), status_code=303)
        response.delete_cookie(SESSION_COOKIE, path=links.path("/"))
        return response

    def _login_page(
        self, request: Request, next_path: str, error: str | None = None, *, status_code: int = 200
    ) -> Response:
        token = secrets.token_urlsafe(32)
        links = Links.of(request)
        response = _render("login.html", links, mode="login", csrf_token=token, next=next_path,
                           error=error, status_code=status_code)
        response.set_cookie(
            LOGIN_CSRF_COOKIE,
            self._login_signer.dumps(token),
            max_age=LOGIN_FORM_SECONDS,
            path=links.path(LOGIN_PATH),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    def _login_form_genuine(self, request: Request, presented: str) -> bool:
        cookie = request.cookies.get(LOGIN_CSRF_COOKIE, "")
        try:
            expected = self._login_signer.loads(cookie, max_age=LOGIN_FORM_SECONDS)
        except BadSignature:
            return False
        return _same(presented, str(expected))

    def _new_session(self) -> str:
        now = time.monotonic()
        if len(self._sessions) >= MAX_SESSIONS:
            # Drop expired sessions, then the oldest, so the table stays bounded.
            for key in [k for k, s in self._sessions.items() if s.expires_at < now]:
                del self._sessions[key]
            while len(self._sessions) >= MAX_SESSIONS:
                del self._sessions[next(iter(self._sessions))]
        session_id = secrets.token_urlsafe(32)
        self._sessions[session_id] = _Session(secrets.token_urlsafe(32), now + SESSION_SECONDS)
        return session_id


def _digest(secret: str) -> bytes:
    # Comparing digests keeps the comparison constant-time whatever the lengths.
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


def _same_digest(left: bytes, right: bytes) -> bool:
    return hmac.compare_digest(left, right)


def _same(presented: str, expected: str) -> bool:
    return bool(presented) and _same_digest(_digest(presented), _digest(expected))


def _check_origin(request: Request) -> None:
    """Refuse a state-changing request that a page of another site may have sent."""
    origin = request.headers.get("origin")
    source = origin if origin is not None else request.headers.get("referer")
    host = request.headers.get("host", "")
    if not source or source == "null" or urllib.parse.urlsplit(source).netloc != host:
        raise _Refused(_forbidden("this form must be sent from the studio's own pages"))


def _local_path(candidate: str, links: Links) -> str:
    """Where to go after signing in: a studio page under the root path, never another
    host or app (a ".." segment, which could climb out of the root, is refused)."""
    path = urllib.parse.urlsplit(candidate).path
    local = candidate.startswith("/") and not candidate.startswith(("//", "/\\"))
    inside = path == links.root or path.startswith(links.root + "/")
    if local and inside and ".." not in path.split("/"):
        return candidate
    return links.executions()


def _unauthenticated(request: Request) -> Response:
    links = Links.of(request)
    path = route_path(request.scope)
    wants_json = path == "/api" or path.startswith("/api/") or path.endswith(".json") or (
        "application/json" in request.headers.get("accept", "")
    )
    if wants_json:
        return json_error(
            401,
            f"sign in at {links.path(LOGIN_PATH)}, or send "
            "'Authorization: Bearer <studio password>'",
            headers={"www-authenticate": 'Bearer realm="statetrail"'},
        )
    # The whole path the browser asked for, the root included, so it comes back to it.
    asked = request.url.path
    target = asked + (f"?{request.url.query}" if request.url.query else "")
    query = urllib.parse.urlencode({"next": target})
    login = f"{links.path(LOGIN_PATH)}?{query}"
    if request.headers.get("hx-request") == "true":
        # htmx would follow a redirect and swap the login page's parts into this
        # page (a stale tab after signing out); it navigates on HX-Redirect instead.
        return Response(status_code=200, headers={"HX-Redirect": login})
    return RedirectResponse(login, status_code=303)


def _throttled(refusal: Refusal) -> Response:
    return json_error(
        429,
        f"{refusal.reason}; the password is not checked for {refusal.retry_after_seconds} s",
        headers={"retry-after": str(refusal.retry_after_seconds)},
    )


def _forbidden(message: str) -> Response:
    return json_error(403, message)


def _render(
    name: str, links: Links, *, status_code: int = 200, **context: object
) -> HTMLResponse:
    # Rendered before routing, so without the templates' per-request context.
    html = templates.env.get_template(name).render(links=links, **context)
    return HTMLResponse(html, status_code=status_code, headers={"cache-control": "no-store"})


async def _read_body(request: Request) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_FORM_BYTES:
            raise _Refused(json_error(413, "request body too large"))
        chunks.append(chunk)
    return b"".join(chunks)


async def _form(scope: Scope, body: bytes) -> FormData:
    """The form in a body already read, or an empty form if it is not one."""
    content_type = Request(scope).headers.get("content-type", "")
    if not content_type.startswith(("application/x-www-form-urlencoded", "multipart/form-data")):
        return FormData()
    return await Request(scope, _replay(body)).form()


def _replay(body: bytes, then: Receive | None = None) -> Callable[[], Awaitable[Message]]:
    """A `receive` that hands the app the body already read, then defers to `then` (which
    reports a disconnect), or never answers again."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        if then is not None:
            return await then()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    return receive
