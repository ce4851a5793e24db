"""Addresses in the studio, built in one place.

Telemetry names runs, traces and stores, so every id is quoted whole. A run id in a
path segment is tilde encoded (`run_id_segment`, as Datasette writes table names):
the server decodes %2F before routing ("x/provenance" would read as run "x"'s panel)
and browsers drop "." and ".." segments, %2E%2E included; Junjo's nanoids read the
same either way. Every address starts with the `--root-path` prefix, so links stay
under a reverse proxy's path. Templates get a `Links` as `links`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal
from urllib.parse import quote, urlencode

from starlette.requests import HTTPConnection
from starlette.types import Scope

ExecutionApi = Literal["", "timeline", "state", "provenance"]

# What a run id's segment keeps as it is (":" too, for an agent's application-store
# run, "<agent run id>:application"): everything else is "~" and two hex digits a
# byte of its UTF-8 (so "~" itself is "~7E").
_PLAIN: Final = re.compile(r"[A-Za-z0-9_:-]*")
_UNPLAIN: Final = re.compile(r"[^A-Za-z0-9_:-]")
_ENCODED: Final = re.compile(r"(?:~[0-9A-F]{2})+")


def run_id_segment(run_id: str) -> str:
    """A run id as one path segment that no server or browser rewrites: tilde encoded."""
    if _PLAIN.fullmatch(run_id):
        return run_id
    return _UNPLAIN.sub(_tilde_bytes, run_id)


def run_id_from_segment(segment: str) -> str:
    """The run id a path segment names: `run_id_segment` undone.

    Text that is not tilde encoding stays as it is, so an address typed with
    the id percent-encoded (or as it is) still finds a run whose id holds no "~".
    """
    return _ENCODED.sub(_tilde_text, segment) if "~" in segment else segment


def _tilde_bytes(match: re.Match[str]) -> str:
    # surrogatepass: a lone surrogate (JSON allows one) round-trips too.
    return "".join(f"~{byte:02X}" for byte in match.group().encode("utf-8", "surrogatepass"))


def _tilde_text(match: re.Match[str]) -> str:
    encoded = match.group()
    try:
        return bytes.fromhex(encoded.replace("~", "")).decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:  # not something run_id_segment writes: keep it as text
        return encoded


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
        return f"{self.root}/executions/{run_id_segment(run_id)}"

    def provenance(
        self, run_id: str, pointer: str, *, step: int | None = None, state: str | None = None
    ) -> str:
        """A run's page at `step` (default: the last) with the provenance panel of the
        field at `pointer` open; the pointer keeps its slashes, to read like the field."""
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
        base = f"{self.root}/api/executions/{run_id_segment(run_id)}"
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
    """A request's path as the studio's routes name it, without the root uvicorn puts in
    front, so middleware matching paths sees "/login" behind a proxy's prefix too."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "").rstrip("/")
    if root and (path == root or path.startswith(root + "/")):
        return path[len(root) :] or "/"
    return path
