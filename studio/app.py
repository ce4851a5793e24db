"""The Starlette application and the one lifespan that starts and stops everything.

Start-up order matters for durability: the store opens (and migrates) first,
the ingestor (spool, its writer, the extractor, which stores whatever an
earlier run left in the spool) next, and only then do the receivers accept
exports. Shutdown runs the same stack backwards: receivers stop taking requests
and finish in-flight ones, the ingestor spools its queue and stores what it
can in a bounded time (the rest waits in the spool), and the store checkpoints
and closes.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import secrets
from collections.abc import AsyncIterator
from typing import Final

from starlette.applications import Starlette
from starlette.convertors import Convertor, register_url_convertor
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from collector.admission import Admission
from collector.allocators import release_free_memory
from collector.auth import KeyChecker
from collector.burst_memory import BurstMemory
from collector.config import Config
from collector.foreground import Foreground
from collector.ingest import Ingestor
from collector.keyring import ManagedKeys
from collector.otlp_grpc import GrpcReceiver, TraceExportHandler
from collector.otlp_http import TRACES_PATH, HttpTraceReceiver, UploadPace
from collector.pruner import Pruner
from collector.replayer import Replayer
from collector.sidecar import Sidecar, published
from collector.store import Store, StoreError
from studio import admin, api, compare_page, execution_page, health, views
from studio.access import StudioAccess
from studio.assets import STATIC_DIR
from studio.foreground_middleware import ForegroundRequests
from studio.inspect import Inspector
from studio.links import run_id_from_segment, run_id_segment
from studio.login_throttle import LoginThrottle
from studio.security import SecurityHeaders
from studio.services import Services, services_of
from studio.templating import compile_templates
from studio.unavailable import store_unavailable

logger = logging.getLogger(__name__)

# How long a stopping server lets calls in progress finish: the gRPC receiver's
# here, uvicorn's HTTP requests (collector/cli.py hands it the same bound).
SHUTDOWN_GRACE_SECONDS: Final = 30


def create_app(config: Config, *, grpc: bool = True) -> Starlette:
    """The studio and OTLP/HTTP app; its lifespan starts and stops everything else."""
    # Shared by the studio's requests (foreground) and ingest and replay, which
    # give way to them: see collector/foreground.py.
    foreground = Foreground()
    return Starlette(
        routes=ROUTES,
        lifespan=functools.partial(_lifespan, config=config, foreground=foreground, grpc=grpc),
        exception_handlers={StoreError: store_unavailable},
        middleware=[
            Middleware(SecurityHeaders),
            Middleware(ForegroundRequests, foreground=foreground),
            *_access(config),
        ],
    )


@contextlib.asynccontextmanager
async def _lifespan(
    app: Starlette, *, config: Config, foreground: Foreground, grpc: bool
) -> AsyncIterator[None]:
    """Open the store and start the threads and receivers, in order; stop them backwards."""
    with contextlib.ExitStack() as stack:
        compile_templates()
        store = Store(
            config.db_path,
            checkpoint_threshold=config.checkpoint_threshold,
            memory_limit=config.memory_limit,
            threads=config.duckdb_threads,
        )
        stack.callback(store.close)
        # Runs just before it, once everything else has stopped: the closing
        # checkpoint fills DuckDB's buffer pool, and would otherwise come on
        # top of what the stopped threads freed but the allocators still hold.
        stack.callback(release_free_memory)
        # The replayer hands long histories to the inspector, so the first
        # view of a long run that was just ingested does not replay it again.
        inspector = Inspector(store, limits=config.document_limits)
        replayer = Replayer(
            store,
            foreground,
            sink=inspector,
            burst=BurstMemory(store, config.burst_memory_limit),
            limits=config.document_limits,
        )
        stack.callback(replayer.close)
        ingestor = Ingestor(
            store,
            config.spool_path,
            on_commit=replayer.notify,
            foreground=foreground,
            max_backlog_bytes=config.max_backlog_bytes,
            extraction_worker=config.extraction_worker,
        )
        stack.callback(ingestor.close)
        if config.retain_nanos is not None:
            # Registered after the writer, so it stops before the store closes.
            pruner = Pruner(
                store,
                config.retain_nanos,
                interval_seconds=config.prune_interval_seconds,
                first_delay_seconds=config.prune_first_delay_seconds,
            )
            stack.callback(pruner.close)
        managed_keys = ManagedKeys(store)
        keys = KeyChecker(
            config.api_keys,
            managed_keys.accepts,
            extra_required=managed_keys.any_exist,
        )
        # One budget for both transports: --max-inflight bounds the memory that
        # exports in progress hold, whichever way they arrive.
        admission = Admission(
            config.max_inflight_requests, config.max_inflight_bytes, config.client_share
        )
        if grpc:
            receiver = _start_grpc(config, ingestor, keys, admission)
            stack.callback(receiver.stop, SHUTDOWN_GRACE_SECONDS)
        admin_token = secrets.token_urlsafe(32)
        app.state.services = Services(
            config, store, ingestor, keys, managed_keys,
            _otlp_http(config, ingestor, keys, admission), admin_token,
            replayer, inspector,
        )
        stack.enter_context(
            published(
                config.db_path,
                Sidecar.for_listener(config.host, config.http_port, admin_token),
            )
        )
        logger.info("statetrail ready: db=%s", config.db_path)
        yield


def _access(config: Config) -> list[Middleware]:
    """The studio login (studio/access.py), when the config asks for one."""
    if not config.studio_auth_required:
        return []
    # check_studio_access refused to build such a config without a password.
    assert config.studio_password
    throttle = LoginThrottle(
        address_failures=config.login_failures,
        global_failures=config.login_failures_global,
        window_seconds=config.login_window_seconds,
    )
    return [Middleware(StudioAccess, password=config.studio_password, throttle=throttle)]


def _start_grpc(
    config: Config, ingestor: Ingestor, keys: KeyChecker, admission: Admission
) -> GrpcReceiver:
    handler = TraceExportHandler(
        ingestor,
        keys,
        admission,
        retry_after_seconds=config.retry_after_seconds,
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


def _otlp_http(
    config: Config, ingestor: Ingestor, keys: KeyChecker, admission: Admission
) -> HttpTraceReceiver:
    return HttpTraceReceiver(
        ingestor,
        keys,
        admission,
        max_receive_bytes=config.max_receive_bytes,
        retry_after_seconds=config.retry_after_seconds,
        pace=UploadPace(
            grace_seconds=config.upload_grace_seconds,
            min_bytes_per_second=config.min_upload_bytes_per_second,
            max_seconds=config.max_upload_seconds,
        ),
    )


async def _export_traces(request: Request) -> Response:
    return await services_of(request).otlp_http.export(request)


class RunIdConvertor(Convertor[str]):
    """A run id in a route, tilde encoded (studio/links.py) or as it is.

    The studio's own addresses tilde-encode every run id, so they hold no "/"
    or dot segment. One typed with the id percent-encoded arrives decoded
    (the server decodes %2F and %0A before routing), so any text matches,
    "/" and line breaks included: Starlette's `str` stops at "/" and its
    `path` at a line break.
    """

    regex = "(?s:.+)"

    def convert(self, value: str) -> str:
        return run_id_from_segment(value)

    def to_string(self, value: str) -> str:
        return run_id_segment(value)


register_url_convertor("run_id", RunIdConvertor())

# Every route of the app, shared by every app built (routes hold no state). The
# more specific run routes come first: an id typed as it is that ends in
# "/provenance" is read as that view of the run before it (the studio's own links
# tilde-encode the "/", so every run has an address).
ROUTES: Final = [
    Route("/", views.executions_page, name="executions"),
    Route("/executions/{run_id:run_id}/provenance", execution_page.provenance_partial,
          name="execution_provenance"),
    Route("/executions/{run_id:run_id}/spans/{span_id}", execution_page.span_page,
          name="execution_span"),
    Route("/executions/{run_id:run_id}", execution_page.execution_page, name="execution"),
    Route("/api/executions", api.list_executions, name="api_executions"),
    Route(
        "/api/executions/{run_id:run_id}/timeline", api.execution_timeline,
        name="api_timeline",
    ),
    Route("/api/executions/{run_id:run_id}/state", api.execution_state, name="api_state"),
    Route(
        "/api/executions/{run_id:run_id}/provenance",
        api.execution_provenance,
        name="api_provenance",
    ),
    Route("/api/executions/{run_id:run_id}", api.execution_detail, name="api_execution"),
    Route("/api/fields", api.field_paths, name="api_fields"),
    Route("/api/fields/values", api.field_values, name="api_field_values"),
    Route("/compare", compare_page.compare_page, name="compare"),
    Route("/api/compare", compare_page.compare_json, name="api_compare"),
    Route("/healthz", health.healthz, name="healthz"),
    Route(TRACES_PATH, _export_traces, methods=["POST"], name="otlp_http_traces"),
    Route("/api/admin/keys", admin.list_keys, methods=["GET"], name="admin_keys"),
    Route("/api/admin/keys", admin.create_key, methods=["POST"], name="admin_create_key"),
    Route("/api/admin/keys/{name}/revoke", admin.revoke_key, methods=["POST"],
          name="admin_revoke_key"),
    Route("/api/admin/prune", admin.prune, methods=["POST"], name="admin_prune"),
    Route("/api/admin/executions", admin.list_executions, methods=["GET"],
          name="admin_executions"),
    Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
]
