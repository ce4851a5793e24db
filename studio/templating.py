"""The one Jinja environment: autoescape everywhere, undefined names are errors.

Telemetry is hostile input. Nothing rendered from it is ever marked safe; the
filters here return plain strings that autoescape then escapes.
"""

from __future__ import annotations

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from starlette.requests import Request
from starlette.templating import Jinja2Templates

from collector.index.fields import MAX_ROWS
from collector.store.in_flight import IN_FLIGHT_QUIET_NANOS
from collector.timestamps import rfc3339
from studio.assets import TEMPLATES_DIR
from studio.links import Links
from studio.render.text import key_label, path_breaks, pointer_label


def duration(nanos: int | None) -> str:
    if nanos is None or nanos < 0:
        return ""
    if nanos < 1_000_000:
        return f"{nanos // 1000} µs"
    if nanos < 1_000_000_000:
        return f"{nanos / 1_000_000:.1f} ms"
    return f"{nanos / 1_000_000_000:.2f} s"


def _environment() -> Environment:
    environment = Environment(
        loader=FileSystemLoader(TEMPLATES_DIR),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
    )
    environment.filters["rfc3339"] = rfc3339
    environment.filters["duration"] = duration
    # Pointers and member names shown so that "" and " a " cannot pass for others.
    environment.filters["pointer_label"] = pointer_label
    environment.filters["key_label"] = key_label
    environment.filters["path_breaks"] = path_breaks
    # The field index's per-run row cap, which the list names when it cuts a run off.
    environment.globals["max_index_rows"] = MAX_ROWS
    # When the list calls an in-flight run quiet (its owner span probably lost).
    environment.globals["in_flight_quiet_minutes"] = IN_FLIGHT_QUIET_NANOS // 60_000_000_000
    return environment


def _links(request: Request) -> dict[str, Links]:
    # Per request: the prefix the studio is served under comes with the request.
    return {"links": Links.of(request)}


templates = Jinja2Templates(env=_environment(), context_processors=[_links])


def compile_templates() -> None:
    """Compile every template now, at startup.

    Jinja compiles a template on first use; the execution page's templates take
    about a second to compile, which would otherwise land on some user's first
    page view. Compiling early also makes a broken template fail the start.
    """
    for name in templates.env.list_templates():
        templates.env.get_template(name)
