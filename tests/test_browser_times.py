"""Times in the viewer's zone, and runs that went quiet, as a person sees them in Chromium.

The server writes every time in UTC, labelled so; static/app.js shows them in
the browser's zone (here Asia/Kolkata, +05:30, so a wrong offset cannot pass by
a whole hour) with UTC in the tooltip, and a header toggle remembers UTC
instead. Data: `a_linear`, a run in flight whose trace received nothing for an
hour (`l_split_batches` without its last export, its spans aged in the file
while the server was stopped), and a run in flight that is still active.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

import duckdb
import pytest
from playwright.sync_api import Locator, Page, Request, expect
from support.otlp_craft import variant
from support.polling import wait_until
from support.servers import Server, export_raw, fixture_requests, manifest, send_scenario
from test_studio_pages import send, without_workflow_span

from studio.views.execution import POLL_SECONDS

if TYPE_CHECKING:  # imported by pytest as a plugin (pytest_plugins), not here
    from support.browser import PageFactory, Screenshot

pytestmark = pytest.mark.browser
pytest_plugins = ("support.browser",)

ZONE = "Asia/Kolkata"
ZONE_LABEL = "GMT+5:30"  # Chromium's short name for it in en-US
HOUR_NANOS = 3600 * 1_000_000_000


class Site:
    def __init__(self, server: Server, linear: str, quiet: str, active: str) -> None:
        self.server = server
        self.linear = linear
        self.quiet = quiet
        self.active = active


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    server = Server.on_free_ports(tmp_path_factory.mktemp("times") / "statetrail.duckdb").start()
    try:
        send_scenario(server.grpc_target, "a_linear")
        first, _ = fixture_requests("l_split_batches")
        export_raw(server.grpc_target, *first)
        server.wait_replayed()
        (quiet,) = server.get_json("/api/executions?verdict=in_flight")["executions"]
        server.stop()
        with duckdb.connect(str(server.db)) as db:
            db.execute("UPDATE spans SET received_unix_nano = received_unix_nano - ?",
                       [HOUR_NANOS])
        server.start()
        active = variant("active")
        active_run = without_workflow_span(active)
        send(server, active)
        server.wait_replayed()
        yield Site(server, manifest("a_linear")["outcome"]["run_id"], quiet["id"], active_run)
    finally:
        server.stop()


def local_text(iso: str) -> str:
    """What the page should show for an RFC 3339 UTC time, on a clock in ZONE."""
    moment = datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(ZoneInfo(ZONE))
    return moment.strftime("%Y-%m-%d %H:%M:%S") + iso[19:23]


def utc_text(iso: str) -> str:
    return f"{iso[:10]} {iso[11:23]}"


def zoned_page(new_page: PageFactory, **options: object) -> Page:
    return new_page(timezone_id=ZONE, locale="en-US", **options)


def open_list(site: Site, new_page: PageFactory) -> tuple[Page, Locator, str]:
    """The list in ZONE, the linear run's start time on it, and that time in UTC."""
    page = zoned_page(new_page)
    page.goto(site.server.url + "/")
    started = page.locator(f'tr:has(input[value="{site.linear}"]) time')
    return page, started, started.get_attribute("datetime") or ""


def test_browser_times_are_local_with_utc_a_hover_away_on_every_page(
    site: Site, new_page: PageFactory
) -> None:
    page, started, iso = open_list(site, new_page)
    assert iso.endswith("Z")
    expect(started).to_have_text(local_text(iso))
    expect(started).to_have_attribute("title", re.compile(re.escape(utc_text(iso)) + " UTC"))
    expect(page.locator("th", has_text="Started")).to_contain_text(f"({ZONE_LABEL})")
    expect(page.locator("section.in-flight th").nth(3)).to_contain_text(ZONE_LABEL)
    toggle = page.locator("button[data-time-toggle]")
    expect(toggle).to_have_text(f"Times: {ZONE_LABEL}")

    # Results htmx swaps in are shown the same way.
    page.fill("#where", "done = true")
    page.press("#where", "Enter")
    expect(page).to_have_url(re.compile(r"where=done"))
    expect(page.locator(f'tr:has(input[value="{site.linear}"]) time')).to_have_text(
        local_text(iso)
    )

    # The execution page: its start in the header, each step's time.
    page.goto(site.server.url + f"/executions/{site.linear}?step=1")
    header = page.locator("header.x-header .x-facts time").first
    start_iso = header.get_attribute("datetime") or ""
    expect(header).to_have_text(f"{local_text(start_iso)} {ZONE_LABEL}")
    expect(header).to_have_attribute("title", re.compile(re.escape(utc_text(start_iso)) + " UTC"))
    step = page.locator(".x-step-meta time")
    expect(step).to_have_text(f"{local_text(step.get_attribute('datetime') or '')} {ZONE_LABEL}")

    # A span's page.
    span_id = site.server.get_json(f"/api/executions/{site.linear}/timeline")[
        "transitions"][0]["span_id"]
    page.goto(site.server.url + f"/executions/{site.linear}/spans/{span_id}")
    span_start = page.locator("dl time").first
    expect(span_start).to_have_text(
        f"{local_text(span_start.get_attribute('datetime') or '')} {ZONE_LABEL}"
    )


def test_browser_utc_is_one_click_away_and_remembered(
    site: Site, new_page: PageFactory
) -> None:
    page, started, iso = open_list(site, new_page)
    toggle = page.locator("button[data-time-toggle]")
    toggle.click()
    expect(started).to_have_text(utc_text(iso))
    expect(started).to_have_attribute("title", re.compile(re.escape(local_text(iso))))
    expect(toggle).to_have_text("Times: UTC")
    expect(toggle).to_have_attribute("aria-pressed", "true")
    expect(page.locator("th", has_text="Started")).to_contain_text("(UTC)")
    # Remembered by the browser, on the next page too.
    page.goto(site.server.url + f"/executions/{site.linear}")
    header = page.locator("header.x-header .x-facts time").first
    expect(header).to_have_text(f"{utc_text(header.get_attribute('datetime') or '')} UTC")
    page.locator("button[data-time-toggle]").press("Enter")  # a button: the keyboard works
    expect(header).to_have_text(
        f"{local_text(header.get_attribute('datetime') or '')} {ZONE_LABEL}"
    )
    page.reload()
    expect(page.locator("header.x-header .x-facts time").first).to_contain_text(ZONE_LABEL)


def test_browser_without_javascript_times_are_utc_and_say_so(
    site: Site, new_page: PageFactory
) -> None:
    page = zoned_page(new_page, java_script_enabled=False)
    page.goto(site.server.url + "/")
    started = page.locator(f'tr:has(input[value="{site.linear}"]) time')
    expect(started).to_have_text(utc_text(started.get_attribute("datetime") or ""))
    expect(page.locator("th", has_text="Started")).to_contain_text("(UTC)")
    expect(page.locator("button[data-time-toggle]")).to_be_hidden()
    page.goto(site.server.url + f"/executions/{site.linear}")
    header = page.locator("header.x-header .x-facts time").first
    expect(header).to_have_text(f"{utc_text(header.get_attribute('datetime') or '')} UTC")


@pytest.mark.slow
def test_browser_a_run_with_no_activity_stops_refreshing_and_an_active_one_does_not(
    site: Site, new_page: PageFactory, screenshot: Screenshot
) -> None:
    page = zoned_page(new_page)
    polls: list[str] = []

    def on_request(request: Request) -> None:
        if "/executions/" in request.url and request.resource_type in ("xhr", "fetch"):
            polls.append(request.url)

    page.on("request", on_request)
    page.goto(site.server.url + "/")
    flights = page.locator("section.in-flight")
    quiet_row = flights.locator("tr", has_text=site.quiet)
    expect(quiet_row.locator(".status-quiet")).to_have_text("no activity")
    since = quiet_row.locator(".quiet-since time")
    expect(since).to_have_text(
        f"{local_text(since.get_attribute('datetime') or '')} {ZONE_LABEL}"
    )
    expect(flights.locator("tr", has_text=site.active).locator(".status-in_flight")).to_be_visible()
    screenshot(page, "executions-in-flight.png")

    page.goto(site.server.url + f"/executions/{site.quiet}")
    expect(page.locator("header.x-header .status-quiet")).to_have_text("no activity")
    expect(page.locator("#verdict")).to_contain_text("stopped refreshing itself")
    screenshot(page, "execution-no-activity.png")
    polls.clear()
    page.wait_for_timeout((2 * POLL_SECONDS + 1) * 1000)
    assert polls == []

    page.goto(site.server.url + f"/executions/{site.active}")
    expect(page.locator("header.x-header .status-in_flight")).to_be_visible()
    polls.clear()

    def polled() -> list[str]:
        page.wait_for_timeout(250)  # Playwright reports requests only while it is called
        return polls

    wait_until(polled, timeout=2 * POLL_SECONDS + 5, interval=0, what="the page to poll")
    assert polls and all(f"/executions/{site.active}" in url for url in polls)


def test_browser_a_viewer_in_utc_can_tell_the_two_modes_apart(
    site: Site, new_page: PageFactory
) -> None:
    # Both modes show the same times there: the toggle names the mode, not only the zone.
    page = new_page(timezone_id="UTC", locale="en-US")
    page.goto(site.server.url + "/")
    toggle = page.locator("button[data-time-toggle]")
    expect(toggle).to_have_text("Times: local (UTC)")
    expect(toggle).to_have_attribute("aria-pressed", "false")
    toggle.click()
    expect(toggle).to_have_text("Times: UTC")
    expect(toggle).to_have_attribute("aria-pressed", "true")
