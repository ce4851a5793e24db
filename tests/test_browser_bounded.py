"""What a person sees of a hostile run in Chromium: the cuts are marked, nothing runs.

A run whose state nests past the page's depth, whose failing node's message is
a script probe followed by JSON 10,000 levels deep, and whose start state holds
a probe repeated to 88,000 characters: the page shows "… deeper levels not shown" and
"not shown in full" where it cut, the probes as text, and no script runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from hostile_values import (
    SCRIPT_PROBE,
    deep_object,
    node_error,
    spoiled_run,
    stacked_patches,
    workflow_attribute,
)
from playwright.sync_api import Page, expect
from support import FIXTURE_API_KEY, MakeServer, export_raw

from collector import junjo

pytestmark = pytest.mark.browser
# The `browser`, `page`, `dialogs` and `screenshot` fixtures.
pytest_plugins = ("browser",)
Screenshot = Callable[[Page, str], Path]


def test_browser_bounded_truncation_is_marked_and_hostile_strings_stay_text(
    make_server: MakeServer, page: Page, dialogs: list[str], screenshot: Screenshot
) -> None:
    server = make_server()
    start = json.dumps({"probe": SCRIPT_PROBE * 2_000, "x": {}})
    body = spoiled_run(
        "hostile",
        workflow_attribute(junjo.WORKFLOW_STATE_START, start),
        stacked_patches(12),
        node_error(SCRIPT_PROBE + deep_object(10_000)),
    )
    export_raw(server.grpc_target, body, [("x-junjo-api-key", FIXTURE_API_KEY)], timeout=60)
    server.wait_replayed()
    run_id = server.get_json("/api/executions")["executions"][0]["id"]

    # Step 13 wrote 156 levels down, so the tree opens along that path to its cut.
    page.goto(f"{server.url}/executions/{run_id}?step=13")
    expect(page.get_by_text("deeper levels not shown").first).to_be_visible()
    # The failed node's message, in its row of the waterfall (closed, but in the page).
    spans = page.locator("#spans")
    expect(spans).to_contain_text(SCRIPT_PROBE)
    expect(spans).to_contain_text("not shown in full")
    page.get_by_text("show all").first.click()
    expect(page.get_by_text("value of 88,000 characters not shown in full")).to_be_visible()
    screenshot(page, "execution-bounded.png")

    assert page.locator("img[src='x']").count() == 0
    assert page.title() != "pwned"
    assert dialogs == []
