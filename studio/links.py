"""Addresses of the studio's two main pages, built in one place.

Telemetry names runs, traces and stores, so every id is quoted whole: a run id
may hold "/", "?" or "#". The templates use the same functions (Jinja globals).
"""

from __future__ import annotations

from urllib.parse import quote, urlencode


def execution_href(run_id: str) -> str:
    """The page of one execution."""
    return f"/executions/{quote(run_id, safe='')}"


def executions_href(**filters: str) -> str:
    """The executions list with these exact-match filters (`trace=`, `store=`, ...)."""
    return f"/?{urlencode(filters)}" if filters else "/"
