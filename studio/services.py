"""The running server's parts that request handlers use, reached from any request.

`studio/app.py` builds one `Services` when the server starts and keeps it as
`app.state.services`; handlers reach it through these typed accessors rather
than through the untyped state bag.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from starlette.requests import HTTPConnection

from collector.config import Config
from collector.intake.ingest import Ingestor
from collector.jobs.replayer import Replayer
from collector.receive.auth import KeyChecker
from collector.receive.keyring import ManagedKeys
from collector.receive.otlp_http import HttpTraceReceiver
from collector.store import Store
from studio.inspect import Inspector
from studio.render.suggestions import Suggestions


@dataclass(frozen=True, slots=True)
class Services:
    config: Config
    store: Store
    ingestor: Ingestor
    keys: KeyChecker
    managed_keys: ManagedKeys
    otlp_http: HttpTraceReceiver
    # Proves a caller of the admin routes can read the sidecar file (mode 0600).
    admin_token: str
    replayer: Replayer
    inspector: Inspector
    # The filter box's help and suggestions, kept for a minute (studio/render/suggestions.py).
    suggestions: Suggestions = field(default_factory=Suggestions)


def services_of(connection: HTTPConnection) -> Services:
    services: Services = connection.app.state.services
    return services


def store_of(connection: HTTPConnection) -> Store:
    return services_of(connection).store


def inspector_of(connection: HTTPConnection) -> Inspector:
    return services_of(connection).inspector


def suggestions_of(connection: HTTPConnection) -> Suggestions:
    return services_of(connection).suggestions
