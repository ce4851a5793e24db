"""The `statetrail` command line: serve, and inspect what arrived."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from collector.cli.keys import add_keys_command
from collector.cli.prune import add_prune_command
from collector.config import (
    Config,
    ConfigError,
    add_db_argument,
    add_serve_arguments,
    serve_config,
    spool_path_for,
)
from collector.private_files import owner_only_umask

GIL_SWITCH_INTERVAL_SECONDS = 0.001


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    environ = os.environ if environ is None else environ
    parser = _parser(environ)
    args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    if args.command is None:
        parser.print_help()
        return 2
    try:
        # Whatever a command creates (the database, its WAL, the spool) holds
        # telemetry: see collector/private_files.py.
        with owner_only_umask():
            result: int = args.handler(args)
    except BrokenPipeError:
        # `statetrail executions | head`: the reader left, so stop quietly. As
        # Python's docs advise, point stdout at devnull so the flush at exit
        # cannot fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    return result


def _parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="statetrail",
        description="Collect Junjo/OpenTelemetry traces and inspect workflow state histories.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = commands.add_parser(
        "serve", help="run the OTLP receiver and the studio on one DuckDB file"
    )
    add_serve_arguments(serve, environ)
    serve.add_argument("--log-level", default=environ.get("STATETRAIL_LOG_LEVEL", "info"))
    serve.set_defaults(handler=_serve)

    executions = commands.add_parser("executions", help="list the executions that arrived")
    add_db_argument(executions, environ)
    executions.add_argument("--json", action="store_true", help="print JSON lines")
    executions.add_argument("--limit", type=int, default=50)
    executions.set_defaults(handler=_executions)

    add_keys_command(commands, environ)
    add_prune_command(commands, environ)
    return parser


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from collector.process.allocators import tune_for_server
    from collector.process.gc_settings import freeze_startup

    # The collector's one import of the studio: serving is where the two sides meet.
    from studio.app import create_app

    try:
        config = serve_config(args)
    except ConfigError as exc:
        print(f"statetrail: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    tune_for_server()
    # A studio request waits up to one switch interval per CPU-bound thread after each
    # DuckDB query; at the default, page latency under full ingest was mostly waiting.
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_SECONDS)
    app = create_app(config)
    freeze_startup()
    uvicorn.run(app, log_level=args.log_level, **http_server_settings(config))
    return 0


def http_server_settings(config: Config) -> dict[str, Any]:
    """uvicorn's settings for the studio and OTLP/HTTP port (tests serve with them too).

    The protocol is named, not left to uvicorn's "auto" (httptools when
    installed), because the request-head deadline is a subclass of its h11 one.
    """
    from collector.receive.http_deadlines import head_deadline_protocol
    from collector.server import SHUTDOWN_GRACE_SECONDS

    return {
        "host": config.host,
        "port": config.http_port,
        "timeout_graceful_shutdown": SHUTDOWN_GRACE_SECONDS,
        "root_path": config.root_path,
        "http": head_deadline_protocol(config.head_timeout_seconds),
        "timeout_keep_alive": config.idle_timeout_seconds,
        # uvicorn would otherwise believe X-Forwarded-For from 127.0.0.1 (or its
        # own FORWARDED_ALLOW_IPS): any local client could then pick the address
        # the sign-in throttle counts it under.
        "proxy_headers": bool(config.forwarded_allow_ips),
        "forwarded_allow_ips": list(config.forwarded_allow_ips) or None,
    }


def _executions(args: argparse.Namespace) -> int:
    try:
        rows = _executions_from_file(args.db, args.limit)
    except _Locked:
        rows = _executions_from_server(args.db, args.limit)
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    columns = ("id", "workflow", "service", "status", "started_at", "transition_count", "store_id")
    print("\t".join(columns))
    for row in rows:
        print("\t".join("" if row.get(c) is None else str(row.get(c)) for c in columns))
    return 0


class _Locked(Exception):
    pass


def _executions_from_file(db: Path, limit: int) -> list[dict[str, Any]]:
    from collector.intake.spool import Position, unstored_bytes
    from collector.row_json import execution_json
    from collector.store import Store, StoreLocked
    from collector.store.listing import ExecutionQuery

    if not db.exists():
        raise SystemExit(f"statetrail: no database at {db}")
    try:
        store = Store(db, read_only=True)
    except StoreLocked as exc:
        raise _Locked from exc
    spool = spool_path_for(db)
    try:
        rows = [execution_json(row) for row in store.search(ExecutionQuery(limit=limit))]
        unstored = unstored_bytes(spool, Position(*store.stored_spool_position()))
    finally:
        store.close()
    if unstored:
        # A server stopped with a backlog leaves acknowledged exports in the spool;
        # they are stored when it starts again, and this listing cannot show them.
        print(
            f"statetrail: {_size(unstored)} of received exports are in "
            f"{spool} and not stored yet; `statetrail serve --db {db}` "
            "stores them when it starts",
            file=sys.stderr,
        )
    return rows[:limit]


def _size(count: int) -> str:
    if count >= 2**20:
        return f"{count / 2**20:.1f} MiB"
    return f"{count / 2**10:.1f} KiB" if count >= 2**10 else f"{count} bytes"


def _executions_from_server(db: Path, limit: int) -> list[dict[str, Any]]:
    """The file is locked by a running server: ask it, through its admin route.

    That route takes the sidecar's admin token, so this works on a server
    whose studio needs a login too.
    """
    from collector.cli.admin_client import AdminClient

    body: dict[str, Any] = AdminClient.for_db(db).call(
        "GET", f"/api/admin/executions?limit={limit}"
    )
    executions: list[dict[str, Any]] = body["executions"]
    return executions
