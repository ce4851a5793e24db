"""The Starlette application and the one lifespan that starts and stops everything.

Start-up order matters for durability: the store opens (and migrates) first, the
writer thread next, and only then do the receivers accept exports. Shutdown runs
the same stack backwards: receivers stop taking requests and finish in-flight
ones, the writer drains its queue, and the store checkpoints and closes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

from starlette.applications import Starlette
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from collector.auth import KeyChecker
from collector.config import Config
from collector.ingest import Ingestor
from collector.otlp_grpc import GrpcReceiver, Limits, TraceExportHandler
from collector.store import Store
from studio import views
from studio.assets import STATIC_DIR

logger = logging.getLogger(__name__)

SHUTDOWN_GRACE_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class Services:
    """What request handlers may use, reachable as `request.app.state.services`."""

    config: Config
    store: Store
    ingestor: Ingestor
    keys: KeyChecker


def sidecar_path(db_path: Path) -> Path:
    """Where a running server says how to reach it (the DB file is locked to it)."""
    return db_path.with_name(db_path.name + ".server.json")


def create_app(config: Config, *, grpc: bool = True) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        with contextlib.ExitStack() as stack:
            store = Store(config.db_path, checkpoint_threshold=config.checkpoint_threshold)
            stack.callback(store.close)
            ingestor = Ingestor(store)
            stack.callback(ingestor.close)
            keys = KeyChecker(config.load_api_keys())
            if grpc:
                receiver = _start_grpc(config, ingestor, keys)
                stack.callback(receiver.stop, SHUTDOWN_GRACE_SECONDS)
            app.state.services = Services(config, store, ingestor, keys)
            stack.enter_context(_sidecar(config))
            logger.info("statetrail ready: db=%s", config.db_path)
            yield

    routes = [
        Route("/", views.executions_page, name="executions"),
        Route("/api/executions", views.executions_api, name="api_executions"),
        Route("/healthz", views.healthz, name="healthz"),
        Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


def _start_grpc(config: Config, ingestor: Ingestor, keys: KeyChecker) -> GrpcReceiver:
    handler = TraceExportHandler(
        ingestor,
        keys,
        Limits(
            max_receive_bytes=config.max_receive_bytes,
            max_inflight_requests=config.max_inflight_requests,
            max_inflight_bytes=config.max_inflight_bytes,
            retry_after_seconds=config.retry_after_seconds,
        ),
    )
    receiver = GrpcReceiver(
        handler,
        f"{config.host}:{config.grpc_port}",
        workers=config.grpc_workers,
        max_receive_bytes=config.max_receive_bytes,
    )
    receiver.start()
    logger.info("OTLP/gRPC listening on %s:%d", config.host, receiver.port)
    return receiver


@contextlib.contextmanager
def _sidecar(config: Config) -> Iterator[None]:
    path = sidecar_path(config.db_path)
    host = "127.0.0.1" if config.host in ("0.0.0.0", "") else config.host
    path.write_text(
        json.dumps({"url": f"http://{host}:{config.http_port}", "pid": os.getpid()}),
        encoding="utf-8",
    )
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
