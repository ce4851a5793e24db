"""The running server's parts that request handlers use, reached from any request.

`studio/app.py` builds one `Services` when the server's write side
(collector/server.py) has started and keeps it as
`app.state.services`; handlers reach it through these typed accessors rather
than through the untyped state bag.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from starlette.requests import HTTPConnection

from collector.config import Config
from collector.server import WriteSide
from collector.store import Store
from studio.inspect import Inspector
from studio.render.suggestions import Suggestions


@dataclass(frozen=True, slots=True)
class Services:
    config: Config
    write_side: WriteSide
    inspector: Inspector
    # The filter box's help and suggestions, kept for a minute (studio/render/suggestions.py).
    suggestions: Suggestions = field(default_factory=Suggestions)


def services_of(connection: HTTPConnection) -> Services:
    services: Services = connection.app.state.services
    return services


def store_of(connection: HTTPConnection) -> Store:
    return services_of(connection).write_side.store


def inspector_of(connection: HTTPConnection) -> Inspector:
    return services_of(connection).inspector


def suggestions_of(connection: HTTPConnection) -> Suggestions:
    return services_of(connection).suggestions
