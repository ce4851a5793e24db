"""Shared pytest fixtures; the machinery behind them is in support/servers.py."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.servers import MakeServer, Server

# Set by .ci/run: there, a missing junjo is a broken set-up, not a reason to skip.
REQUIRE_JUNJO_ENV = "STATETRAIL_REQUIRE_JUNJO"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the live-junjo tests, saying why, where junjo cannot be installed.

    junjo 0.69.0 needs Python >= 3.11.9 (and not 3.12.0-3.12.2); the package
    itself supports 3.11.0 on, so its tests run there, all but these.
    """
    if importlib.util.find_spec("junjo") is not None or os.environ.get(REQUIRE_JUNJO_ENV):
        return
    skip = pytest.mark.skip(
        reason="junjo is not installed (it needs Python >= 3.11.9, not 3.12.0-3.12.2); "
        "`make test` picks such a Python when the machine has one"
    )
    for item in items:
        if "junjo" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[MakeServer]:
    """Factory: `make_server(*extra_args)` starts a server on a fresh DB file."""
    servers: list[Server] = []

    def make(*args: str, db: Path | None = None, start: bool = True) -> Server:
        server = Server.on_free_ports(db or tmp_path / f"statetrail-{len(servers)}.duckdb", *args)
        servers.append(server)
        return server.start() if start else server

    yield make
    for server in servers:
        if server.process is not None and server.process.poll() is None:
            server.stop()


@pytest.fixture
def server(make_server: MakeServer) -> Server:
    return make_server()


