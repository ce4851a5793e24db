"""Addresses in the studio, built in one place.

Telemetry names runs, traces and stores, so every id is quoted whole: a run id
may hold "?", "#" or "%". Every address starts with the prefix the studio is
served under (`--root-path`, which uvicorn hands each request as the ASGI
`root_path`): behind a reverse proxy that serves it at /statetrail, a link to
"/executions/x" would leave the proxy's path. Templates get a `Links` as
`links` (studio/templating.py); pages rendered before routing build one from
the request themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote, urlencode

from starlette.requests import HTTPConnection
from starlette.types import Scope

ExecutionApi = Literal["", "timeline", "state", "provenance"]


@dataclass(frozen=True, slots=True)
class Links:
    """The studio's addresses under `root` ("" or "/prefix", no trailing slash)."""

    root: str = ""

    @classmethod
    def of(cls, connection: HTTPConnection) -> Links:
        root: str = connection.scope.get("root_path", "")
        return cls(root.rstrip("/"))

    def path(self, path: str) -> str:
        """A fixed studio path ("/login", "/static/app.css") under the root."""
        return self.root + path

    def execution(self, run_id: str) -> str:
        """The page of one execution."""
        return f"{self.root}/executions/{quote(run_id, safe='')}"

    def provenance(
        self, run_id: str, pointer: str, *, step: int | None = None, state: str | None = None
    ) -> str:
        """A run's page with the provenance panel of the field at `pointer` open.

        At step `step` (default: the last), showing `state` ("recorded") if given.
        The pointer keeps its slashes (`path=/a/b`), so the address reads like the field.
        """
        params = {"step": step, "path": pointer, "state": state}
        query = urlencode(
            {key: str(value) for key, value in params.items() if value is not None},
            safe="/", quote_via=quote,
        )
        return f"{self.execution(run_id)}?{query}#provenance"

    def execution_span(self, run_id: str, span_id: str) -> str:
        """Every attribute and event of one span of a run's trace."""
        return f"{self.execution(run_id)}/spans/{quote(span_id, safe='')}"

    def execution_api(self, run_id: str, view: ExecutionApi = "") -> str:
        """One execution's JSON: its detail, or its timeline, state or provenance."""
        base = f"{self.root}/api/executions/{quote(run_id, safe='')}"
        return f"{base}/{view}" if view else base

    def executions(self, **filters: str) -> str:
        """The executions list with these exact-match filters (`trace=`, `store=`, ...)."""
        return f"{self.root}/?{urlencode(filters)}" if filters else f"{self.root}/"

    def compare(self, a: str, b: str) -> str:
        """Runs `a` and `b` side by side."""
        return f"{self.root}/compare?{urlencode({'a': a, 'b': b})}"

    def compare_api(self, a: str, b: str) -> str:
        """The comparison of runs `a` and `b` as JSON."""
        return f"{self.root}/api/compare?{urlencode({'a': a, 'b': b})}"


def route_path(scope: Scope) -> str:
    """A request's path as the studio's routes name it: without the root it is served under.

    uvicorn puts the root in front of the path it received (ASGI `root_path`),
    so middleware that matches paths (the login, the foreground gate) reads
    them through here to see "/login" behind a proxy's "/statetrail/login" too.
    """
    path: str = scope["path"]
    root: str = scope.get("root_path", "").rstrip("/")
    if root and (path == root or path.startswith(root + "/")):
        return path[len(root) :] or "/"
    return path
