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
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from collector.cli.admin_client import AdminClient
from collector.config import add_db_argument
from collector.receive.auth import digest
from collector.row_json import key_json

if TYPE_CHECKING:
    # Imported for real only when a command runs: building the parser stays cheap.
    from collector.receive.keyring import ManagedKeys

_T = TypeVar("_T")
KEY_BYTES = 32
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
        lambda keys: key_json(keys.create(args.name, digest(key))),
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
        lambda keys: [key_json(key) for key in keys.list()],
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
        return key_json(key)

    _run(args.db, local, lambda admin: admin.call("POST", f"/api/admin/keys/{quoted}/revoke"))
    print(f"statetrail: revoked key {args.name!r}", file=sys.stderr)
    return 0


def _run(
    db: Path,
    local: Callable[[ManagedKeys], _T],
    remote: Callable[[AdminClient], _T],
    *,
    create: bool = True,
) -> _T:
    """Do it on the file if it is free, else ask the server that holds it."""
    from collector.receive.keyring import KeyRequestInvalid, ManagedKeys
    from collector.store import KeyNameTaken, Store, StoreLocked

    if not create and not db.exists():
        raise SystemExit(f"statetrail: no database at {db}")
    try:
        store = Store(db)
    except StoreLocked:
        return remote(AdminClient.for_db(db))
    try:
        return local(ManagedKeys(store))
    except (KeyRequestInvalid, KeyNameTaken) as exc:
        raise SystemExit(f"statetrail: {exc}") from exc
    finally:
        store.close()

