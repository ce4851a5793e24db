"""The Starlette application: routes, middleware, and a lifespan that runs the write side.

The lifespan enters collector/server.py's `running`, which starts the store,
spool, extractor, replayer, pruner and receivers in order and stops them
backwards; the studio reads through what it yields.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator
from typing import Final

from starlette.applications import Starlette
from starlette.convertors import Convertor, register_url_convertor
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from collector.config import Config
from collector.foreground import Foreground
from collector.server import TRACES_PATH, running
from collector.store import Store, StoreError
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
from studio.views import admin, api, health
from studio.views import compare as compare_page
from studio.views import execution as execution_page
from studio.views import executions as views


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
    """Run the write side (collector/server.py) for as long as the app serves."""
    compile_templates()
    def inspector(store: Store) -> Inspector:
        return Inspector(store, limits=config.document_limits)

    with running(config, foreground, history_sink=inspector, grpc=grpc) as (write_side, inspect):
        app.state.services = Services(config, write_side, inspect)
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


async def _export_traces(request: Request) -> Response:
    return await services_of(request).write_side.export_http(request)


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
