"""Search end to end: captured Junjo runs sent over gRPC to a real `statetrail serve`,
found by what a user knows of them through `/api/executions?q=`, the list page's box,
and the box in headless Chromium."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Page, expect
from support.servers import FIXTURE_API_KEY, Server, manifest, send_scenario

# The `browser` and `page` fixtures.
pytest_plugins = ("support.browser",)

SCENARIOS = ("a_linear", "b_graph_loop", "e_exception")
LINEAR = manifest("a_linear")["outcome"]["run_id"]
LOOP = manifest("b_graph_loop")["outcome"]["run_id"]
FAILING = manifest("e_exception")["outcome"]["run_id"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    db = tmp_path_factory.mktemp("search") / "statetrail.duckdb"
    started = Server.on_free_ports(db, "--api-key", FIXTURE_API_KEY).start()
    try:
        for scenario in SCENARIOS:
            assert all(reply == b"" for reply in send_scenario(started.grpc_target, scenario))
        started.wait_replayed()
        yield started
    finally:
        started.stop()


def _get(server: Server, route: str, **params: str) -> tuple[int, Any]:
    url = f"{server.url}{route}?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(url, timeout=30) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()


def found(server: Server, **params: str) -> set[str]:
    status, body = _get(server, "/api/executions", limit="500", **params)
    assert status == 200, body
    return {e["id"] for e in json.loads(body)["executions"]}


def test_search_finds_a_run_by_a_string_of_its_end_state(server: Server) -> None:
    # a_linear ends with profile.name "Ada" and profile.address.city "London".
    assert found(server, q="london") == {LINEAR}
    assert found(server, q="profile.name:ada") == {LINEAR}


def test_search_finds_a_failing_run_by_its_error_text(server: Server) -> None:
    # e_exception's node raised RuntimeError("model returned garbage: 'unexpected token <'").
    assert found(server, q='"returned garbage"') == {FAILING}
    assert found(server, q='error:"unexpected token"') == {FAILING}
    assert found(server, q="error:runtimeerror") == {FAILING}
    assert found(server, q="status:failed") == {FAILING}


def test_search_finds_a_run_by_a_node_name(server: Server) -> None:
    assert found(server, q="explodingnode") == {FAILING}
    node = _a_node_name(server, LOOP)
    assert LOOP in found(server, q=f"node:{node}")
    assert LINEAR not in found(server, q=f"node:{node}")


def _a_node_name(server: Server, run_id: str) -> str:
    status, body = _get(server, f"/api/executions/{run_id}/timeline")
    assert status == 200
    nodes: set[str] = {t["node"] for t in json.loads(body)["transitions"] if t["node"]}
    assert nodes
    return min(nodes)


def test_search_finds_a_run_by_the_start_of_its_id(server: Server) -> None:
    assert found(server, q=LINEAR[:5]) == {LINEAR}
    assert found(server, q=f"id:{FAILING[:4]}") == {FAILING}


def test_the_filter_language_stays_exact(server: Server) -> None:
    assert found(server, q='title = "finished"') == {LINEAR}
    assert found(server, where='title = "finished"') == {LINEAR}
    # `where` takes the filter language only; `q` says what it tried.
    status, body = _get(server, "/api/executions", where="london")
    assert status == 400 and "not a search" not in json.loads(body)["error"]
    status, body = _get(server, "/api/executions", q='error:"timed out')
    error = json.loads(body)
    assert status == 400 and error["parameter"] == "q"
    assert "not a filter: " in error["error"] and "this quote is never closed" in error["error"]


def test_the_list_page_searches_what_its_box_holds(server: Server) -> None:
    status, body = _get(server, "/", where="london")
    page = body.decode()
    assert status == 200
    assert f"/executions/{LINEAR}" in page and f"/executions/{FAILING}" not in page
    # Its JSON twin carries the search as `q`.
    assert "/api/executions?q=london" in page
    status, body = _get(server, "/", where='"timed out')
    assert status == 400 and "not a search: this quote is never closed" in body.decode()
    # `q`, as the JSON link writes it, means the same on the page.
    status, body = _get(server, "/", q="london")
    assert status == 200 and f"/executions/{LINEAR}" in body.decode()
    status, body = _get(server, "/", q='"timed out')
    assert status == 400 and 'class="caret"' in body.decode()


@pytest.mark.browser
def test_browser_typing_free_text_in_the_box_lists_the_run(server: Server, page: Page) -> None:
    page.goto(server.url + "/")
    page.fill("#where", "London")
    page.press("#where", "Enter")
    expect(page).to_have_url(re.compile(r"where=London"))
    rows = page.locator("table.executions tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("Linear")
    expect(page.locator("#filter-error")).to_have_count(0)
