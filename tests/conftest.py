"""Shared pytest fixtures; the machinery behind them is in support.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import Server


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[Any]:
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
def server(make_server: Any) -> Server:
    server: Server = make_server()
    return server


