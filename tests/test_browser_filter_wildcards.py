"""An `[*]` filter typed into the box in Chromium: `[*]` suggestions, then the array preview.

Data as tests/test_filter_wildcards_api.py loads it: `a_linear`, and copies whose
items are `{"sku": ...}` objects and `{"role": ...}` messages.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect
from test_browser_filter_suggestions import expect_options, options
from test_filter_wildcards_api import Runs, served_runs

pytestmark = pytest.mark.browser
pytest_plugins = ("support.browser",)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    yield from served_runs(tmp_path_factory)


def test_browser_type_an_any_element_filter_and_see_the_matches_previewed(
    site: Runs, page: Page
) -> None:
    page.goto(site.server.url + "/")
    # The server's datalist: one `[*]` path per array, no per-index paths.
    assert {"items[*]", "items[*].sku", "messages[*].role"} <= set(options(page))
    assert not [option for option in options(page) if re.search(r"\[[0-9]", option)]
    expect(page.locator("#where-help")).not_to_contain_text("[0]")
    box = page.get_by_role("combobox", name="Filter or search")
    box.focus()
    page.keyboard.type("items[*].s")
    expect_options(page, ["items[*].sku"])
    page.keyboard.type("ku = ")
    expect_options(page, ['items[*].sku = "laser"', 'items[*].sku = "horse"'])
    box.fill('items[*].sku = "laser"')  # what picking the option does
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"where=items%5B\*%5D\.sku"))
    rows = page.locator("table.executions tbody tr")
    expect(rows).to_have_count(1)
    expect(page.locator(f'input[name="run"][value="{site.skus}"]')).to_have_count(1)
    expect(page.locator("th.value-col")).to_have_text("items[*].sku")
    cell = rows.first.locator("td.value-col a")
    expect(cell).to_have_text('["horse", "laser", "coffee"]')
    # The cell links to the provenance of the array the matches are in.
    expect(cell).to_have_attribute("href", re.compile(r"path=/items#"))

    # An array's own column previews its elements, objects named by their kind.
    box.fill("items exists")
    page.keyboard.press("Enter")
    expect(rows).to_have_count(2)
    texts = page.locator("td.value-col a").all_inner_texts()
    assert sorted(texts) == ['["horse", "laser", "coffee"]', "[{…}, {…}, {…}]"]


def test_browser_a_last_element_filter_in_ever_finds_the_run(site: Runs, page: Page) -> None:
    page.goto(site.server.url + "/")
    box = page.get_by_role("combobox", name="Filter or search")
    box.fill('ever messages[-1].role = "tool"')
    page.keyboard.press("Enter")
    expect(page.locator("table.executions tbody tr")).to_have_count(1)
    expect(page.locator(f'input[name="run"][value="{site.messages}"]')).to_have_count(1)
    expect(page.locator("td.value-col a")).to_have_text('"assistant"')  # the end value
    box.fill("items[-2] = 1")
    page.keyboard.press("Enter")
    expect(page.locator("body")).to_contain_text("did you mean [-1] or [*]?")
