"""The command line's client for a running server's admin routes.

While `serve` holds the database, `keys` and `prune` send their request to its admin
routes (studio/views/admin.py), found through the sidecar file, with the admin token
in `ADMIN_TOKEN_HEADER`. Every failure ends the command with a message the operator
can act on (SystemExit).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Final

from collector.cli.sidecar import Sidecar, SidecarUnreadable, read_sidecar

ADMIN_TOKEN_HEADER: Final = "x-statetrail-admin-token"
ADMIN_TIMEOUT_SECONDS: Final = 30


class AdminClient:
    """The admin routes of the server named in a database's sidecar file."""

    def __init__(self, sidecar: Sidecar) -> None:
        self._url = sidecar.url
        self._token = sidecar.admin_token

    @classmethod
    def for_db(cls, db: Path) -> AdminClient:
        try:
            return cls(read_sidecar(db))
        except SidecarUnreadable as exc:
            raise SystemExit(
                f"statetrail: {db} is locked, and its server's sidecar file cannot be read "
                f"({exc}); run this as the user that started `statetrail serve`"
            ) from exc

    def call(self, method: str, path: str, body: dict[str, str] | None = None) -> Any:
        """The route's JSON answer; an error answer ends the command with its message."""
        request = urllib.request.Request(
            self._url + path,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={ADMIN_TOKEN_HEADER: self._token, "content-type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=ADMIN_TIMEOUT_SECONDS) as reply:
                return json.load(reply)
        except urllib.error.HTTPError as exc:
            with exc:
                raise SystemExit(f"statetrail: {error_message(exc)}") from exc
        except (urllib.error.URLError, ValueError) as exc:
            raise SystemExit(
                f"statetrail: the server at {self._url} did not answer: {exc}"
            ) from exc


def error_message(error: urllib.error.HTTPError) -> str:
    """The route's own `{"error": ...}` message, or the bare HTTP status without one."""
    try:
        message: str = json.load(error)["error"]
    except (ValueError, KeyError, TypeError):
        return f"the server answered {error.code} {error.reason}"
    return message
