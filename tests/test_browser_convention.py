"""What a person sees of convention runs, in headless Chromium: a LangGraph superstep with
its writers and reducers, a journal's rollback and rejection on the timeline, hostile
values shown as text, and the way from an interrupted run to its resume."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from support.servers import MakeServer, Server
from test_live_convention import KEY, _replayed

pytestmark = pytest.mark.browser
pytest_plugins = ("support.browser",)


def test_browser_convention_superstep_notes_and_store_runs(
    make_server: MakeServer, page: Page, dialogs: list[str], screenshot: Callable[[Page, str], Path]
) -> None:
    server: Server = make_server("--api-key", KEY)
    outcomes = _replayed(server, "lg_fanout", "lg_interrupt", "journal", "hostile")
    (fan,) = outcomes["lg_fanout"]["runs"]
    page.goto(f"{server.url}/executions/{fan['run_id']}?step=2")
    superstep = page.locator("#superstep")
    expect(superstep).to_contain_text("Superstep 1")
    expect(superstep.locator(".x-writers tbody tr")).to_have_count(2)
    expect(superstep).to_contain_text("test_producer_langgraph.biggest")
    expect(page.locator("#timeline .mark-digest")).to_have_count(3)
    # The graph the start event sent, each node marked with how often it wrote.
    expect(page.locator("#graph")).to_contain_text("critic")
    expect(page.locator("#graph")).not_to_contain_text("cannot be drawn")
    screenshot(page, "convention-superstep.png")

    (journal,) = outcomes["journal"]["runs"]
    page.goto(f"{server.url}/executions/{journal['run_id']}")
    notes = page.locator("#timeline .x-note-row")
    expect(notes).to_have_count(2)
    expect(notes.first).to_contain_text("card declined")
    screenshot(page, "convention-journal.png")

    (hostile,) = outcomes["hostile"]["runs"]
    page.goto(f"{server.url}/executions/{hostile['run_id']}?step=1")
    expect(page.locator("#step")).to_contain_text("<script>alert('x')</script>")
    assert page.locator("#execution script, #execution img").count() == 0
    page.wait_for_timeout(200)
    assert dialogs == []

    interrupted = min(
        (r for r in outcomes["lg_interrupt"]["runs"] if r["kind"] == "graph"),
        key=lambda r: r["start"],
    )
    page.goto(f"{server.url}/executions/{interrupted['run_id']}")
    page.locator(".x-store-runs a[rel=next]").click()
    expect(page.locator(".x-store-runs")).to_contain_text("run 2 of 2")
