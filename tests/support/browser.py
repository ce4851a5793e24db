"""Shared helpers for browser tests: Debian's Chromium driven by Playwright.

Get the fixtures in a test module with `pytest_plugins = ("support.browser",)` and mark the
tests `@pytest.mark.browser`. `page` is a fresh page (own context) that fails
the test on any console error or uncaught exception, so a CSP violation, a missing
asset or a script error cannot pass unnoticed; `new_page(**options)` makes such
pages in contexts with options (a time zone, JavaScript off). The `screenshot`
fixture saves full-page PNGs under $STATETRAIL_SCREENSHOTS, or the test's tmp_path
when that is unset.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Dialog,
    Page,
    ViewportSize,
    sync_playwright,
)

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
VIEWPORT: ViewportSize = {"width": 1400, "height": 900}
SCREENSHOTS_ENV = "STATETRAIL_SCREENSHOTS"
CLIENT_ERROR_LOG = "Failed to load resource: the server responded with a status of 4"


# Module scope, not session: while Playwright's sync API runs, an event loop is running
# in this thread, and later tests that call asyncio.run() would fail.
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=list(CHROMIUM_ARGS)
        )
        yield launched
        launched.close()


PageFactory = Callable[..., Page]


@pytest.fixture
def new_page(browser: Browser) -> Iterator[PageFactory]:
    """`new_page(**context_options)`: a page in a context of its own (a `timezone_id`, say,
    or `java_script_enabled=False`), failing the test on a console error like `page`."""
    contexts: list[BrowserContext] = []
    problems: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        # A 4xx answer is logged as a console error; tests assert HTTP statuses themselves.
        if message.type == "error" and not message.text.startswith(CLIENT_ERROR_LOG):
            problems.append(f"console error: {message.text}")

    def make(**options: Any) -> Page:
        context = browser.new_context(viewport=VIEWPORT, **options)
        contexts.append(context)
        opened = context.new_page()
        opened.on("console", on_console)
        opened.on("pageerror", lambda error: problems.append(f"page error: {error}"))
        return opened

    yield make
    for context in contexts:
        context.close()
    assert not problems, "\n".join(problems)


@pytest.fixture
def page(new_page: PageFactory) -> Page:
    return new_page()


@pytest.fixture
def dialogs(page: Page) -> list[str]:
    """The messages of every dialog (alert, confirm) `page` opens, each dismissed: a
    hostile value that ran as script shows up here."""
    seen: list[str] = []

    def on_dialog(dialog: Dialog) -> None:
        seen.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    return seen


Screenshot = Callable[[Page, str], Path]


@pytest.fixture
def screenshot(tmp_path: Path) -> Screenshot:
    """`screenshot(page, "name.png")` saves a full-page PNG and returns its path."""
    folder = Path(os.environ.get(SCREENSHOTS_ENV) or tmp_path)

    def save(shown: Page, name: str) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / name
        shown.screenshot(path=str(path), full_page=True)
        return path

    return save
