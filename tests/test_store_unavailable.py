"""When DuckDB cannot answer, every reader gets a clear 503 (not a bare 500) and data stays.

The fault is a real one: the store is closed under the running app, as happens
to a request that arrives while `serve` shuts down. Every read then fails
inside DuckDB ("connection already closed").
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from support.servers import fixture_requests, free_port, serving_in_thread

from collector.config import Config
from collector.store import Store, StoreError
from studio.app import create_app
from studio.services import Services

SCRIPT = "<img src=x onerror=alert(1)>"


@pytest.fixture
def studio(tmp_path: Path) -> Iterator[tuple[httpx.Client, Services]]:
    port = free_port()
    app = create_app(Config(db_path=tmp_path / "s.duckdb", http_port=port), grpc=False)
    with (
        serving_in_thread(app, port) as base,
        httpx.Client(base_url=base, timeout=10) as client,
    ):
        yield client, app.state.services


def test_store_reads_raise_store_error_once_duckdb_fails(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.duckdb")
    assert store.counts() == {"spans": 0, "executions": 0, "transitions": 0}
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.counts()
    with pytest.raises(StoreError):
        store.get_execution("anything")


def test_studio_answers_503_with_the_reason_when_the_store_fails(
    studio: tuple[httpx.Client, Services],
) -> None:
    client, services = studio
    _export(client)
    assert client.get("/healthz").json()["spans"] > 0
    services.write_side.store.close()

    health = client.get("/healthz")
    assert health.status_code == 503
    assert health.headers["retry-after"] == "5"
    assert health.json()["status"] == "unavailable"
    assert "closed" in health.json()["error"]

    api = client.get("/api/executions")
    assert api.status_code == 503
    assert "closed" in api.json()["error"]

    page = client.get("/executions/" + quote(SCRIPT, safe=""))
    assert page.status_code == 503
    assert page.headers["content-type"].startswith("text/html")
    assert "The store cannot answer right now" in page.text
    assert "closed" in page.text
    assert SCRIPT not in page.text


def test_data_committed_before_the_failure_is_all_there_after_a_restart(
    studio: tuple[httpx.Client, Services],
) -> None:
    client, services = studio
    _export(client)
    stored = client.get("/healthz").json()["spans"]
    services.write_side.store.close()
    assert client.get("/healthz").status_code == 503
    reopened = Store(services.write_side.store.path, read_only=True)
    try:
        assert reopened.counts()["spans"] == stored
    finally:
        reopened.close()


def _export(client: httpx.Client) -> None:
    for body, _ in fixture_requests("a_linear"):
        reply = client.post(
            "/v1/traces", content=body, headers={"content-type": "application/x-protobuf"}
        )
        assert reply.status_code == 200
