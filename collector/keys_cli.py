"""`statetrail keys create|list|revoke`: the operator's managed ingestion keys.

Invariant: a plain key exists only in this process and on the operator's
terminal. `create` generates it, prints it once, and hands only its SHA-256
digest on: straight to the database when the file is free, otherwise to the
running server that holds the file, through its admin route (loopback only,
with the admin token from the server's 0600 sidecar file).
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from collector.auth import digest
from collector.config import add_db_argument

if TYPE_CHECKING:
    # Imported for real only when a command runs: building the parser stays cheap.
    from collector.keyring import ManagedKeys
    from collector.store import ApiKey

_T = TypeVar("_T")
KEY_BYTES = 32
ADMIN_TIMEOUT_SECONDS = 30
_LIST_COLUMNS = ("name", "active", "created_at", "last_used_at", "revoked_at")


def add_keys_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], environ: Mapping[str, str]
) -> None:
    keys = commands.add_parser("keys", help="create, list and revoke ingestion API keys")
    actions = keys.add_subparsers(dest="keys_command", metavar="ACTION", required=True)

    create = actions.add_parser("create", help="make a key and print it (shown only once)")
    create.add_argument("name", help="who or what will use the key, e.g. billing-worker")
    create.set_defaults(handler=_create)

    listing = actions.add_parser("list", help="every key: created, last used, revoked")
    listing.add_argument("--json", action="store_true", help="print JSON lines")
    listing.set_defaults(handler=_list)

    revoke = actions.add_parser("revoke", help="refuse this key from the next request on")
    revoke.add_argument("name")
    revoke.set_defaults(handler=_revoke)

    for action in (create, listing, revoke):
        add_db_argument(action, environ)


def _create(args: argparse.Namespace) -> int:
    key = secrets.token_urlsafe(KEY_BYTES)
    _run(
        args.db,
        lambda keys: _key_json(keys.create(args.name, digest(key))),
        lambda admin: admin.call("POST", "/api/admin/keys",
                                 {"name": args.name, "digest": digest(key)})["key"],
    )
    print(key)
    print(
        f"statetrail: created key {args.name!r}; it is not stored and will not be shown again. "
        "Exporters send it as x-junjo-api-key or 'authorization: Bearer <key>'.",
        file=sys.stderr,
    )
    return 0


def _list(args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]] = _run(
        args.db,
        lambda keys: [_key_json(key) for key in keys.list()],
        lambda admin: admin.call("GET", "/api/admin/keys")["keys"],
        create=False,
    )
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    print("\t".join(_LIST_COLUMNS))
    for row in rows:
        print("\t".join(str(row[column]) for column in _LIST_COLUMNS))
    return 0


def _revoke(args: argparse.Namespace) -> int:
    quoted = urllib.parse.quote(args.name, safe="")

    def local(keys: ManagedKeys) -> dict[str, Any]:
        key = keys.revoke(args.name)
        if key is None:
            raise SystemExit(f"statetrail: no active key is named {args.name!r}")
        return _key_json(key)

    _run(args.db, local, lambda admin: admin.call("POST", f"/api/admin/keys/{quoted}/revoke"))
    print(f"statetrail: revoked key {args.name!r}", file=sys.stderr)
    return 0


def _run(
    db: Path,
    local: Callable[[ManagedKeys], _T],
    remote: Callable[[_Admin], _T],
    *,
    create: bool = True,
) -> _T:
    """Do it on the file if it is free, else ask the server that holds it."""
    from collector.keyring import KeyRequestInvalid, ManagedKeys
    from collector.store import KeyNameTaken, Store, StoreLocked

    if not create and not db.exists():
        raise SystemExit(f"statetrail: no database at {db}")
    try:
        store = Store(db)
    except StoreLocked:
        return remote(_Admin.for_db(db))
    try:
        return local(ManagedKeys(store))
    except (KeyRequestInvalid, KeyNameTaken) as exc:
        raise SystemExit(f"statetrail: {exc}") from exc
    finally:
        store.close()


def _key_json(key: ApiKey) -> dict[str, Any]:
    from studio.admin import key_json

    return key_json(key)


class _Admin:
    """The admin routes of the server named in a database's sidecar file."""

    def __init__(self, url: str, token: str) -> None:
        self._url = url
        self._token = token

    @classmethod
    def for_db(cls, db: Path) -> _Admin:
        from studio.app import sidecar_path

        try:
            sidecar = json.loads(sidecar_path(db).read_text(encoding="utf-8"))
            return cls(sidecar["url"], sidecar["admin_token"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SystemExit(
                f"statetrail: {db} is locked, and its server's sidecar file cannot be read "
                f"({exc}); run this as the user that started `statetrail serve`"
            ) from exc

    def call(self, method: str, path: str, body: dict[str, str] | None = None) -> Any:
        from studio.admin import ADMIN_TOKEN_HEADER

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
                raise SystemExit(f"statetrail: {_error_message(exc)}") from exc
        except (urllib.error.URLError, ValueError) as exc:
            raise SystemExit(
                f"statetrail: the server at {self._url} did not answer: {exc}"
            ) from exc


def _error_message(error: urllib.error.HTTPError) -> str:
    try:
        message: str = json.load(error)["error"]
    except (ValueError, KeyError, TypeError):
        return f"the server answered {error.code} {error.reason}"
    return message
