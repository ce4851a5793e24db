"""`statetrail prune --older-than 30d`: delete old traces now, server running or not.

When the file is free the deletion runs here; when `statetrail serve` holds it,
the request goes to that server's admin route (loopback + the admin token from
its 0600 sidecar file), exactly as `statetrail keys` does.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping

from collector.config import add_db_argument
from collector.durations import RETENTION_UNITS, DurationError, parse_duration


def add_prune_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], environ: Mapping[str, str]
) -> None:
    prune = commands.add_parser(
        "prune", help="delete traces (and their executions) older than a limit"
    )
    prune.add_argument(
        "--older-than", required=True, metavar="AGE",
        help="delete traces whose newest span ended longer ago than this, e.g. 30d "
        "(units h, d, w)",
    )
    prune.add_argument("--json", action="store_true", help="print the counts as JSON")
    add_db_argument(prune, environ)
    prune.set_defaults(handler=_prune)


def _prune(args: argparse.Namespace) -> int:
    # Imported here so building the parser stays cheap for every other command.
    from collector.cli.admin_client import AdminClient
    from collector.jobs.pruner import prune_older_than
    from collector.store import Store, StoreError, StoreLocked

    try:
        age = parse_duration(args.older_than, RETENTION_UNITS)
    except DurationError as exc:
        print(f"statetrail: {exc}", file=sys.stderr)
        return 2
    if not args.db.exists():
        raise SystemExit(f"statetrail: no database at {args.db}")
    try:
        store = Store(args.db)
    except StoreLocked:
        counts = AdminClient.for_db(args.db).call(
            "POST", "/api/admin/prune", {"older_than": args.older_than}
        )["pruned"]
    else:
        try:
            counts = prune_older_than(store, age).as_dict()
        except StoreError as exc:
            raise SystemExit(f"statetrail: {exc}") from exc
        finally:
            store.close()
    if args.json:
        print(json.dumps(counts))
    else:
        print(", ".join(f"{name}: {count}" for name, count in counts.items()))
    return 0
