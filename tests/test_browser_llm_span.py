"""An LLM span's page in Chromium: the conversation shown, the raw JSON one click away.

The raw attributes sit in a <details>, so they open with JavaScript off too; the
markup in the chat's texts never runs (no dialog opens) and no CSP violation is
logged (the `page` fixture fails the test on a console error).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import Page, expect
from support.servers import MakeServer
from test_llm_span_page import SCRIPT, run_with_llm_spans

if TYPE_CHECKING:  # imported by pytest as a plugin (pytest_plugins), not here
    from support.browser import PageFactory, Screenshot

pytestmark = pytest.mark.browser
pytest_plugins = ("support.browser",)


def test_browser_llm_span_page_shows_the_chat_and_expands_the_raw_json(
    make_server: MakeServer, page: Page, dialogs: list[str], new_page: PageFactory,
    screenshot: Screenshot,
) -> None:
    server = make_server()
    run_id, spans = run_with_llm_spans(server)
    url = f"{server.url}/executions/{run_id}/spans/{spans['genai']}"
    page.goto(url)

    chat = page.locator("#llm")
    expect(chat.locator(".x-llm-role")).to_have_text(["system", "user", "assistant"])
    expect(chat.locator(".x-llm-content").first).to_have_text(f"Line one\nline two {SCRIPT}")
    expect(chat.locator(".x-llm-call-name")).to_have_text([f"refund{SCRIPT}"])
    raw_key = page.locator("#raw-attributes th", has_text="gen_ai.completion")
    expect(raw_key).to_be_hidden()
    page.locator("#raw-attributes > summary").click()
    expect(raw_key).to_be_visible()
    expect(page.locator("#raw-attributes")).to_have_attribute("open", "")
    screenshot(page, "llm-span.png")
    assert dialogs == []

    # Without JavaScript the <details> opens the same way.
    plain = new_page(java_script_enabled=False)
    plain.goto(url)
    hidden = plain.locator("#raw-attributes th", has_text="gen_ai.prompt")
    expect(hidden).to_be_hidden()
    plain.locator("#raw-attributes > summary").click()
    expect(hidden).to_be_visible()
