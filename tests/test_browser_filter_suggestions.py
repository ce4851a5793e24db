"""Building a filter from suggestions, as a person does it in Chromium.

The box's datalist starts as the stored runs' paths (the server's); as the user
types, static/app.js turns it into completions of the clause at the end: a
path, then `path = value` with the values runs ended with. Headless Chromium
draws no datalist popup, so the tests read the options the popup would offer
and take one as a user picking it would. Data: `a_linear`, `b_graph_loop`, and
a copy of `a_linear` whose `title` key is hostile markup with both quotes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect
from support.servers import Server, manifest
from test_filter_suggestions import HOSTILE_LABEL, Suggesting, load_suggesting

pytestmark = pytest.mark.browser
pytest_plugins = ("support.browser",)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Suggesting]:
    server = Server.on_free_ports(
        tmp_path_factory.mktemp("suggest") / "statetrail.duckdb"
    ).start()
    try:
        yield load_suggesting(server)
    finally:
        server.stop()


def options(page: Page) -> list[str]:
    values: list[str] = page.locator("#where-paths option").evaluate_all(
        "options => options.map(option => option.value)"
    )
    return values


def expect_options(page: Page, wanted: list[str]) -> None:
    """Wait until the datalist offers at least `wanted` (values arrive by fetch)."""
    page.wait_for_function(
        "wanted => { const got = Array.from(document.querySelectorAll('#where-paths option'),"
        " o => o.value); return wanted.every(w => got.includes(w)); }",
        arg=wanted,
    )


def test_browser_build_a_filter_from_suggested_paths_and_values(
    site: Suggesting, page: Page
) -> None:
    page.goto(site.server.url + "/")
    box = page.get_by_role("combobox", name="Filter or search")  # <input list>: a combobox
    expect(box).to_have_attribute("list", "where-paths")
    expect(page.locator("#where-help")).to_contain_text("done = true")
    box.focus()
    page.keyboard.type("profile.addr")
    expect_options(page, ["profile.address", "profile.address.city", "profile.address.zip"])
    assert all(option.startswith("profile.addr") for option in options(page))
    page.keyboard.type("ess.city ")
    expect_options(page, ['profile.address.city = "London"', "profile.address.city exists"])
    page.keyboard.type("= ")
    expect_options(page, ['profile.address.city = "London"'])

    # A second clause is completed on its own, the first kept as typed.
    box.fill("")
    page.keyboard.type('profile.address.city = "London" and do')
    expect_options(page, ['profile.address.city = "London" and done'])
    page.keyboard.type("ne = ")
    wanted = 'profile.address.city = "London" and done = true'
    expect_options(page, [wanted])
    box.fill(wanted)  # what picking the option does
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"where=profile"))
    linear = manifest("a_linear")["outcome"]["run_id"]
    expect(page.locator("table.executions tbody tr")).to_have_count(2)
    expect(page.locator(f'input[name="run"][value="{linear}"]')).to_have_count(1)


def test_browser_suggestions_follow_the_workflow_facet(site: Suggesting, page: Page) -> None:
    page.goto(site.server.url + "/")
    assert "title" in options(page)
    page.locator("section.facet a", has_text="Loop Workflow").click()
    expect(page).to_have_url(re.compile(r"workflow=Loop\+Workflow"))
    expect(page.locator("#where-fields")).to_contain_text("of Loop Workflow")
    assert "verdict" in options(page) and "title" not in options(page)
    page.locator("#where").focus()
    page.keyboard.type("verdict = ")
    expect_options(page, ['verdict = "even"'])
    # Values too are Loop's: its count ended 4, Linear's 1.
    page.locator("#where").fill("")
    page.keyboard.type("count = ")
    expect_options(page, ["count = 4"])
    assert "count = 1" not in options(page)


def test_browser_a_hostile_path_is_suggested_as_text_and_filters(
    site: Suggesting, page: Page, dialogs: list[str]
) -> None:
    page.goto(site.server.url + "/")
    assert HOSTILE_LABEL in options(page)  # the server's datalist, read back as text
    page.locator("#where").focus()
    page.keyboard.type('"<scr')
    expect_options(page, [HOSTILE_LABEL])
    page.keyboard.type(HOSTILE_LABEL[len('"<scr'):] + " = ")
    wanted = f'{HOSTILE_LABEL} = "finished"'
    expect_options(page, [wanted])
    page.locator("#where").fill(wanted)
    page.keyboard.press("Enter")
    expect(page.locator("table.executions tbody tr")).to_have_count(1)
    expect(page.locator(f'input[name="run"][value="{site.hostile}"]')).to_have_count(1)
    # Text all along: no script ran, none was added to the page.
    assert dialogs == []
    assert page.locator("script:not([src])").count() == 0
