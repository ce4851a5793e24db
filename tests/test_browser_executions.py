"""The executions and compare pages as a person uses them, in headless Chromium.

Same data as test_studio_pages (every capture plus edited, hostile and in-flight
copies of `a_linear`). The page fixture fails a test on any console error, so a
Content-Security-Policy violation or a script error fails here too.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import Browser, Page, expect
from support.accessibility import axe_violations, blocking
from support.servers import Server, manifest
from test_studio_pages import EDITED_STEP, Loaded, load

pytestmark = pytest.mark.browser
# The `browser` and `page` fixtures.
pytest_plugins = ("support.browser",)


@pytest.fixture(scope="module")
def studio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    server = Server.on_free_ports(
        tmp_path_factory.mktemp("browser-pages") / "statetrail.duckdb"
    ).start()
    try:
        yield load(server)
    finally:
        server.stop()


def test_browser_filter_by_field_value_then_open_a_result(
    studio: Loaded, page: Page
) -> None:
    page.goto(studio.server.url + "/")
    expect(page.locator("section.in-flight")).to_contain_text(studio.in_flight)

    page.fill("#where", 'title = "finished"')
    page.press("#where", "Enter")

    # htmx swaps #results and records the filter in the address bar.
    expect(page).to_have_url(re.compile(r"where=title"))
    # Only what was set: the empty time-range boxes add nothing to the address.
    assert "since=" not in page.url and "until=" not in page.url, page.url
    rows = page.locator("table.executions tbody tr")
    expect(rows).to_have_count(len(studio.linear))
    expect(page.locator("#filter-error")).to_have_count(0)
    # Each row shows the filtered field's end value; the run opens on that field's provenance.
    expect(page.locator("table.executions td.value-col").first).to_have_text('"finished"')
    page.locator("table.executions td.workflow a").first.click()
    expect(page).to_have_url(re.compile(r"/executions/[^/?]+\?path=/title#provenance$"))
    run_id = page.url.split("/executions/", 1)[1].split("?", 1)[0]
    assert run_id in studio.linear
    expect(page.locator("#provenance")).to_contain_text("Provenance of /title")
    expect(page.locator("#provenance")).to_contain_text('"finished"')


def test_browser_bad_filter_shows_the_caret_and_a_facet_narrows(
    studio: Loaded, page: Page
) -> None:
    page.goto(studio.server.url + "/")

    page.fill("#where", "title == 1")
    page.press("#where", "Enter")
    expect(page.locator("pre.caret")).to_have_text("title == 1\n      ^")

    page.fill("#where", "count exists")
    page.press("#where", "Enter")
    expect(page.locator("pre.caret")).to_have_count(0)
    page.locator("section.facet a", has_text="Linear Workflow").click()
    expect(page).to_have_url(re.compile(r"workflow=Linear\+Workflow"))
    expect(page.locator("table.executions tbody tr")).to_have_count(len(studio.linear))
    # The form picked up the facet, so the next search keeps it.
    expect(page.locator('#filter input[name="workflow"]')).to_have_value("Linear Workflow")


def test_browser_correlation_id_lists_the_runs_that_share_it(
    studio: Loaded, page: Page
) -> None:
    page.goto(studio.server.url + "/")
    ticket = page.locator("table.executions a.correlation", has_text="TICKET-42")
    expect(ticket).to_have_count(1)
    ticket.click()
    expect(page).to_have_url(re.compile(r"\?correlation=TICKET-42$"))
    expect(page.locator("table.executions tbody tr")).to_have_count(1)
    expect(page.locator(".active-filters")).to_contain_text("correlation: TICKET-42")
    page.locator("table.executions td.workflow a", has_text="Loop Workflow").click()
    expect(page.locator("header.x-header .x-facts")).to_contain_text("research.ticket")
    # The store links to every run that used it: here, this run alone.
    page.locator("header.x-header a", has_text=re.compile("^[A-Za-z0-9]{21}$")).click()
    expect(page).to_have_url(re.compile(r"\?store=[A-Za-z0-9]{21}$"))
    expect(page.locator("table.executions td.workflow a").first).to_have_text("Loop Workflow")
    expect(page.locator("table.executions tbody tr")).to_have_count(1)


def test_browser_a_run_id_in_a_filter_box_opens_the_run(studio: Loaded, page: Page) -> None:
    run_id = studio.edited
    page.goto(studio.server.url + "/")
    page.fill("#where", run_id)  # the page's own form: htmx, told to navigate
    page.press("#where", "Enter")
    expect(page).to_have_url(re.compile(rf"/executions/{run_id}$"))
    page.fill("header .top-search input", run_id)  # every page's search box
    page.press("header .top-search input", "Enter")
    expect(page).to_have_url(re.compile(rf"/executions/{run_id}$"))
    expect(page.locator("header.x-header h1")).to_have_text("Linear Workflow")


def test_browser_compare_two_ticked_runs(
    studio: Loaded, page: Page, screenshot: Callable[[Page, str], Path]
) -> None:
    original = manifest("a_linear")["outcome"]["run_id"]
    page.goto(studio.server.url + "/")
    button = page.locator("[data-compare-button]")
    expect(button).to_be_disabled()

    page.check(f'input[name="run"][value="{original}"]')
    page.check(f'input[name="run"][value="{studio.edited}"]')
    expect(button).to_be_enabled()
    screenshot(page, "executions.png")
    button.click()

    expect(page).to_have_url(re.compile(r"/compare\?run="))
    expect(page.locator("#divergence-title + p")).to_contain_text(f"step {EDITED_STEP}")
    expect(page.locator("table.diff").first).to_contain_text("/items/1")
    screenshot(page, "compare.png")


def test_browser_pages_work_without_javascript(
    studio: Loaded, browser: Browser
) -> None:
    context = browser.new_context(java_script_enabled=False)
    try:
        plain = context.new_page()
        plain.goto(studio.server.url + "/")
        plain.fill("#where", 'title = "finished"')
        plain.press("#where", "Enter")
        plain.wait_for_url(re.compile(r"where=title"))
        assert plain.locator("table.executions tbody tr").count() == len(studio.linear)
        plain.locator("section.facet a", has_text="Linear Workflow").click()
        plain.wait_for_url(re.compile(r"workflow=Linear"))
        assert plain.locator("table.executions tbody tr").count() == len(studio.linear)
        plain.check(f'input[name="run"][value="{studio.edited}"]')
        plain.locator("table.executions input[name=run]").first.check()
        plain.locator("[data-compare-button]").click()
        plain.wait_for_url(re.compile(r"/compare\?run="))
        assert "Outcomes" in plain.content()
    finally:
        context.close()


def test_browser_pages_fit_a_phone_screen(studio: Loaded, page: Page) -> None:
    # At 390x844 (a phone) nothing widens the page: not the list's runs, a run's
    # timeline or diff, nor the two runs compared side by side.
    page.set_viewport_size({"width": 390, "height": 844})
    run_id = manifest("g_large_state")["outcome"].get("run_id") or next(iter(studio.linear))
    a, b = sorted(studio.linear)[:2]
    for path in (
        "/", "/?where=count%20exists", "/?status=error", f"/executions/{run_id}?step=1",
        f"/executions/{next(iter(studio.linear))}?step=9", "/compare", f"/compare?a={a}&b={b}",
    ):
        page.goto(studio.server.url + path)
        width = page.evaluate("document.scrollingElement.scrollWidth")
        wide = page.evaluate(  # named in the failure: what sticks out
            "[...document.querySelectorAll('body *')]"
            ".filter(e => e.getBoundingClientRect().right > innerWidth + 1).slice(0, 5)"
            ".map(e => `${e.tagName}.${e.className} ${e.getBoundingClientRect().right}`)"
        )
        assert width <= page.evaluate("innerWidth"), (path, width, wide)


def test_browser_phone_facets_fold_above_the_results(
    studio: Loaded, page: Page, screenshot: Callable[[Page, str], Path]
) -> None:
    # On a phone the facets come first, folded to one line, and open on a tap; a
    # facet applied from there leaves them open for the next.
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(studio.server.url + "/")
    screenshot(page, "executions-phone.png")
    fold = page.locator("details[data-facets]")
    facets = page.locator("aside.facets").bounding_box()
    results = page.locator("section.listing").bounding_box()
    assert facets is not None and results is not None and facets["y"] < results["y"]
    expect(fold).not_to_have_attribute("open", "")
    expect(page.locator("section.facet a").first).to_be_hidden()
    fold.locator("summary").click()
    expect(page.locator("section.facet a").first).to_be_visible()
    page.locator("section.facet a", has_text="Linear Workflow").click()
    expect(page).to_have_url(re.compile(r"workflow=Linear\+Workflow"))
    expect(page.locator("details[data-facets]")).to_have_attribute("open", "")
    # Wide again, the facets stand open beside the results, with no toggle to show.
    page.set_viewport_size({"width": 1400, "height": 900})
    page.reload()
    expect(page.locator("details[data-facets]")).to_have_attribute("open", "")
    expect(page.locator("details[data-facets] > summary")).to_be_hidden()


def test_browser_executions_list_shows_the_key_columns_on_a_phone(
    studio: Loaded, page: Page
) -> None:
    # At 390 px each run is a card: its workflow, status, verdict, id, start and duration
    # are all on screen without scrolling sideways, with a failed run's error and with a
    # filter's value column.
    page.set_viewport_size({"width": 390, "height": 844})
    cells = ["td.workflow", "td.status", "td.verdict", "td.run-id", "td.started", "td.duration"]
    for path in ("/", "/?status=error", "/?where=count%20exists"):
        page.goto(studio.server.url + path)
        rows = page.locator("table.executions tbody tr")
        expect(rows.first).to_be_visible()
        assert rows.count() > 1
        boxes = page.evaluate(
            "cells => [...document.querySelectorAll('table.executions tbody tr')].map(tr =>"
            " cells.map(c => {"
            "   const r = tr.querySelector(c).getBoundingClientRect(); return [r.left, r.right];"
            " }))",
            cells,
        )
        for row in boxes:
            for left, right in row:
                assert 0 <= left < right <= 390, (path, boxes)
        assert page.evaluate("document.scrollingElement.scrollWidth") <= 390
    # The fixtures include failed runs, whose error text sits in the status cell.
    page.goto(studio.server.url + "/?status=error")
    error_text = page.locator("table.executions td.status .error-text").first
    # Scrolled down to (the box's help above the results may fill a phone's screen),
    # it shows whole: nothing of it off the side of the screen.
    error_text.scroll_into_view_if_needed()
    expect(error_text).to_be_in_viewport(ratio=1)
    # The sortable headers stay, as links above the cards.
    expect(page.locator("table.executions thead a.sort", has_text="Duration")).to_be_visible()
    # A run in flight is a card too: every cell of it on screen.
    page.goto(studio.server.url + "/")
    flight = page.evaluate(
        "[...document.querySelector('section.in-flight tbody tr').cells].map(td => {"
        "  const r = td.getBoundingClientRect(); return [r.left, r.right]; })"
    )
    assert len(flight) == 7 and all(0 <= left < right <= 390 for left, right in flight), flight


def test_browser_facet_applied_by_keyboard_keeps_the_focus(studio: Loaded, page: Page) -> None:
    # Enter on a facet swaps the results (the facet's own link included): the focus
    # stays on that facet, so the next Tab or Enter goes on from there.
    page.goto(studio.server.url + "/")
    facet = page.locator("section.facet a", has_text="Linear Workflow")
    key = facet.get_attribute("data-focus-key")
    facet.focus()
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"workflow=Linear\+Workflow"))
    expect(page.locator("section.facet li.selected a")).to_be_focused()
    assert page.evaluate("document.activeElement.dataset.focusKey") == key
    # Enter again removes the filter, and the focus still stays.
    page.keyboard.press("Enter")
    expect(page).not_to_have_url(re.compile(r"workflow="))
    expect(page.locator(f"section.facet a[data-focus-key='{key}']")).to_be_focused()
    # A sort header, replaced by the swap too, keeps it as well.
    page.locator("thead a.sort", has_text="Duration").focus()
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"sort="))
    expect(page.locator("thead a.sort", has_text="Duration")).to_be_focused()


@pytest.mark.parametrize("width", [1400, 390])
def test_browser_pages_have_no_serious_accessibility_violations(
    studio: Loaded, page: Page, width: int
) -> None:
    # axe-core on the list (plain, filtered, failed runs), a run (a step, a field's
    # provenance open), a comparison, on a desktop and a phone.
    page.set_viewport_size({"width": width, "height": 900})
    run_id = next(iter(studio.linear))
    a, b = sorted(studio.linear)[:2]
    paths = (
        "/", "/?where=count%20exists", "/?status=error", f"/executions/{run_id}?step=3",
        f"/executions/{run_id}?step=9&path=/title", f"/compare?a={a}&b={b}", "/compare",
    )
    found = {}
    for path in paths:
        page.goto(studio.server.url + path)
        found[path] = blocking(axe_violations(page, studio.server.url))
    assert not any(found.values()), found


def _focus_in(page: Page, selector: str) -> bool:
    """Whether the focused element is inside `selector`."""
    return bool(page.evaluate(f"!!document.activeElement.closest({selector!r})"))


def test_browser_keyboard_skips_the_facets_to_the_results(studio: Loaded, page: Page) -> None:
    # Dozens of facet links come before the runs in the page's order: from the top
    # and from the filter form, one link (shown when focused) skips to the results.
    page.goto(studio.server.url + "/")
    assert page.locator("aside.facets a").count() >= 10
    page.keyboard.press("Tab")
    expect(page.locator(":focus")).to_have_text("Skip to content")
    page.keyboard.press("Tab")
    skip = page.locator(":focus")
    expect(skip).to_have_text("Skip to results")
    expect(skip).to_be_in_viewport()
    page.keyboard.press("Enter")
    expect(page.locator("#listing")).to_be_focused()
    page.keyboard.press("Tab")
    assert _focus_in(page, "section.listing") and not _focus_in(page, "aside.facets")
    # From the last field of the filter form, the next Tab offers the same skip.
    page.locator("input[name=until]").focus()
    page.keyboard.press("Tab")
    inline = page.locator(":focus")
    expect(inline).to_have_text("Skip the facets to the results")
    expect(inline).to_be_in_viewport()
    box = inline.bounding_box()
    assert box is not None and box["width"] > 50  # shown, not clipped, while focused
    page.keyboard.press("Enter")
    page.keyboard.press("Tab")
    assert _focus_in(page, "section.listing") and not _focus_in(page, "aside.facets")
    # Without the skip, Tab walks into the facets.
    page.locator("input[name=until]").focus()
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    assert _focus_in(page, "aside.facets")


def test_browser_breadcrumb_returns_to_the_filtered_list(studio: Loaded, page: Page) -> None:
    # Filter the list (an htmx swap), open a run, step through it, then follow the
    # breadcrumb: the list comes back with its filter, however many steps later.
    page.goto(studio.server.url + "/")
    page.fill("#where", 'title = "finished"')
    page.press("#where", "Enter")
    expect(page).to_have_url(re.compile(r"where=title"))
    listed = page.url
    page.locator("table.executions td.run-id a").first.click()
    expect(page).to_have_url(re.compile(r"/executions/"))
    for _ in range(2):
        page.locator("#timeline tbody a").first.click()
        expect(page).to_have_url(re.compile(r"step=\d+"))
    crumb = page.locator("nav.x-crumbs a").first
    expect(crumb).to_have_attribute("title", re.compile(r'where: title = "finished"'))
    crumb.click()
    expect(page).to_have_url(re.compile(r"/\?where="))
    assert parse_qs(urlsplit(page.url).query) == parse_qs(urlsplit(listed).query)
    expect(page.locator("#where")).to_have_value('title = "finished"')
    expect(page.locator("table.executions tbody tr")).to_have_count(len(studio.linear))
    # The whole list again (clear all): the way back is the whole list too.
    page.get_by_role("link", name="clear all").click()
    expect(page).to_have_url(studio.server.url + "/")
    page.locator("table.executions td.run-id a").first.click()
    expect(page.locator("nav.x-crumbs a").first).to_have_attribute("href", "/")


def test_browser_breadcrumb_returns_each_tab_to_its_own_list(studio: Loaded, page: Page) -> None:
    # Two tabs share the cookie that remembers the list; each tab's breadcrumb still
    # leads back to the list that tab filtered, not to whichever tab listed last.
    page.goto(studio.server.url + "/")
    page.fill("#where", 'title = "finished"')
    page.press("#where", "Enter")
    expect(page).to_have_url(re.compile(r"where=title"))
    other = page.context.new_page()
    other.goto(studio.server.url + "/?status=ok")
    expect(other.locator("table.executions tbody tr").first).to_be_visible()

    page.locator("table.executions td.run-id a").first.click()
    crumb = page.locator("nav.x-crumbs a").first
    expect(crumb).to_have_attribute("title", re.compile(r'^[^;]*where: title = "finished"$'))
    assert parse_qs(urlsplit(crumb.get_attribute("href") or "").query) == {
        "where": ['title = "finished"']
    }
    other.locator("table.executions td.run-id a").first.click()
    expect(other.locator("nav.x-crumbs a").first).to_have_attribute(
        "title", "Back to the list as you left it: status: ok"
    )
    # A bad filter in one tab keeps that tab's last good list.
    other.goto(studio.server.url + "/?where=title%20%3D")
    expect(other.locator("#filter-error")).to_be_visible()
    other.go_back()
    expect(other.locator("nav.x-crumbs a").first).to_have_attribute("href", "/?status=ok")
    # The whole list, in a tab, is that tab's way back.
    page.goto(studio.server.url + "/")
    page.locator("table.executions td.run-id a").first.click()
    expect(page.locator("nav.x-crumbs a").first).to_have_attribute("href", "/")
    expect(page.locator("nav.x-crumbs a").first).not_to_have_attribute("title", re.compile("."))
