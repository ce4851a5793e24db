"""The sidecar file `<db>.server.json`: how the command line reaches a running server.

While `serve` runs DuckDB locks the file to it, so `executions`, `keys` and `prune` ask
that server instead, at the URL and with the admin token this file names. Invariant:
created afresh, exclusively, mode 0600: its token lets a caller change keys or delete
traces, so only the operator may read it.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

# Listening on every address includes loopback, the one a local command can always use.
_ALL_ADDRESSES = ("0.0.0.0", "")
_LOOPBACK = "127.0.0.1"


class SidecarUnreadable(Exception):
    """No usable sidecar file: none there, not ours to read, or not what a server writes."""


@dataclass(frozen=True, slots=True)
class Sidecar:
    """Where a running server answers, and the token its admin routes ask for."""

    url: str
    # repr=False keeps the secret out of logs and tracebacks.
    admin_token: str = field(repr=False)

    @classmethod
    def for_listener(cls, host: str, port: int, admin_token: str) -> Sidecar:
        """The URL a command on this machine uses for a server listening on `host:port`."""
        reachable = _LOOPBACK if host in _ALL_ADDRESSES else host
        return cls(f"http://{reachable}:{port}", admin_token)


def sidecar_path(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + ".server.json")


@contextlib.contextmanager
def published(db_path: Path, sidecar: Sidecar) -> Iterator[None]:
    """Write the sidecar file for the server holding `db_path`; remove it on exit.

    A file left by a server that was killed is replaced, not trusted: creating
    it exclusively after the unlink means the mode is always the one set here.
    """
    path = sidecar_path(db_path)
    document = {"url": sidecar.url, "pid": os.getpid(), "admin_token": sidecar.admin_token}
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        json.dump(document, file)
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


def read_sidecar(db_path: Path) -> Sidecar:
    """The sidecar of the server holding `db_path`; raise SidecarUnreadable if there is none.

    The exception's message is the underlying reason (a missing file, a
    permission error, bad JSON, a missing field), for the caller to show.
    """
    try:
        document = json.loads(sidecar_path(db_path).read_text(encoding="utf-8"))
        url, admin_token = document["url"], document["admin_token"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SidecarUnreadable(str(exc)) from exc
    if not isinstance(url, str) or not isinstance(admin_token, str):
        raise SidecarUnreadable("its url and admin_token are not strings")
    return Sidecar(url, admin_token)
