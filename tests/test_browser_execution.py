"""The execution page as a person uses it, in headless Chromium.

Stepping through a timeline with the keyboard (a 250-step run fetches only each step's
panel, and the address is replaced so Back leaves the run), opening a field's provenance, a
run whose state holds hostile strings (a <script>, an <img onerror>, a javascript:
URL) that must show as text and run nothing, and a run nested and sized past every
bound, whose cuts must be marked where a person sees them. The `page` fixture
(tests/support/browser.py)
fails a test on any console error, so a Content-Security-Policy violation counts.

Screenshots: run with STATETRAIL_SCREENSHOTS=docs/screenshots to refresh
docs/screenshots/execution.png and execution-partial.png.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from playwright.sync_api import Browser, Page, expect
from support.hostile_values import (
    SCRIPT_PROBE,
    deep_object,
    node_error,
    spoiled_run,
    stacked_patches,
    workflow_attribute,
)
from support.otlp_craft import long_run
from support.servers import (
    FIXTURE_API_KEY,
    MakeServer,
    Server,
    export_raw,
    fixture_requests,
    manifest,
    send_scenario,
)

from collector.producers import junjo

pytestmark = pytest.mark.browser
# The `browser`, `page` and `screenshot` fixtures.
pytest_plugins = ("support.browser",)
# tests/support/browser.py's Screenshot, spelled out: importing it here would import the
# plugin before pytest can rewrite its asserts.
Screenshot = Callable[[Page, str], Path]

HOSTILE_SCRIPT = "<script>alert('script')</script>"
HOSTILE_IMG = "<img src=x onerror=alert('img')>"
HOSTILE_URL = "javascript:alert('url')"
HOSTILE_KEY = "<b onmouseover=alert('key')>bio</b>"
# The loop fixture's path entries, each replaced by a hostile string in its patch
# and in the recorded end state, so the run stays verified.
REPLACED = {"increment:1": HOSTILE_SCRIPT, "increment:2": HOSTILE_IMG, "increment:3": HOSTILE_URL}
# More steps than the timeline shows rows around the selected one (TIMELINE_WINDOW).
LONG_RUN_STEPS = 250


def hostile_loop_request() -> tuple[bytes, list[tuple[str, str]]]:
    """b_graph_loop's capture with hostile strings in its states and set_state patches."""
    body, metadata = fixture_requests("b_graph_loop")[0]
    request = trace_service_pb2.ExportTraceServiceRequest()
    request.ParseFromString(body)
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                for attribute in span.attributes:
                    if attribute.key in ("junjo.workflow.state.start", "junjo.workflow.state.end"):
                        attribute.value.string_value = _hostile_state(
                            attribute.value.string_value
                        )
                for event in span.events:
                    for attribute in event.attributes:
                        if attribute.key == "junjo.state_json_patch":
                            attribute.value.string_value = _replace_values(
                                attribute.value.string_value
                            )
    return request.SerializeToString(), metadata


def _hostile_state(text: str) -> str:
    state = json.loads(_replace_values(text))
    state[HOSTILE_KEY] = HOSTILE_IMG
    return json.dumps(state, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _replace_values(text: str) -> str:
    value = json.loads(text)
    encoded = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for plain, hostile in REPLACED.items():
        encoded = encoded.replace(json.dumps(plain), json.dumps(hostile))
    return encoded


@pytest.fixture(scope="module")
def studio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    db = tmp_path_factory.mktemp("browser-execution") / "statetrail.duckdb"
    server = Server.on_free_ports(db).start()
    try:
        for scenario in ("a_linear", "g_large_state"):
            send_scenario(server.grpc_target, scenario)
        export_raw(server.grpc_target, *hostile_loop_request())
        export_raw(server.grpc_target, long_run("browser", LONG_RUN_STEPS).SerializeToString())
        server.wait_replayed()
        yield server
    finally:
        server.stop()


def _run_id(server: Server, workflow: str) -> str:
    rows = server.get_json("/api/executions?limit=100")["executions"]
    return str(next(row["id"] for row in rows if row["workflow"] == workflow))


def test_browser_execution_keyboard_steps_through_the_timeline(
    studio: Server, page: Page, screenshot: Screenshot
) -> None:
    run_id = manifest("a_linear")["outcome"]["run_id"]
    page.goto(f"{studio.url}/executions/{run_id}?step=1")
    step = page.locator("#step h2")
    state = page.locator("#state .x-tree")
    expect(step).to_contain_text("Step 1")
    before = state.inner_text()

    page.keyboard.press("ArrowRight")
    expect(step).to_contain_text("Step 2")
    expect(page).to_have_url(re.compile(r"step=2$"))
    expect(page.locator("tr.is-selected td").first).to_have_text("2")
    assert state.inner_text() != before

    page.keyboard.press("ArrowRight")
    expect(step).to_contain_text("Step 3")
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("ArrowLeft")
    expect(step).to_contain_text("Step 1")
    assert state.inner_text() == before
    expect(page.locator("#scrubber")).to_have_value("1")

    page.goto(f"{studio.url}/executions/{run_id}?step=9")
    screenshot(page, "execution.png")


def _steps_to(page: Page, sequence: int) -> None:
    expect(page.locator("#step h2")).to_have_text(re.compile(rf"^Step {sequence}\b"))
    expect(page).to_have_url(re.compile(rf"step={sequence}$"))


def test_browser_execution_stepping_fetches_only_the_step_and_replaces_the_address(
    studio: Server, page: Page
) -> None:
    run_id = _run_id(studio, "Long Workflow")
    page.goto(f"{studio.url}/")
    page.goto(f"{studio.url}/executions/{run_id}?step=100")
    whole_page = len(page.content().encode())
    entries = page.evaluate("history.length")
    asked: list[str] = []
    sizes: list[int] = []
    page.on("request", lambda request: asked.append(request.url))
    page.on("response", lambda response: sizes.append(len(response.body())))
    rows_before = page.locator("tr.x-step-row").count()

    for sequence in range(101, 111):
        page.keyboard.press("ArrowRight")
        _steps_to(page, sequence)
    # Each step asked for its panel alone, a fraction of the page, and the rows stayed.
    assert len(asked) == 10 and all(url.endswith("&partial=step") for url in asked), asked
    assert max(sizes) * 4 < whole_page, (sizes, whole_page)
    assert page.locator("tr.x-step-row").count() == rows_before
    expect(page.locator("tr.is-selected")).to_have_count(1)
    expect(page.locator("tr.is-selected td").first).to_have_text("110")
    expect(page.locator("tr[aria-current=step]")).to_have_attribute("data-sequence", "110")
    expect(page.locator("#scrubber")).to_have_value("110")
    expect(page.locator("#state .x-tree")).to_contain_text('"item 110"')
    # Replaced, not pushed: Back returns to the list in one press.
    assert page.evaluate("history.length") == entries
    page.go_back()
    expect(page).to_have_url(f"{studio.url}/")


def test_browser_execution_step_outside_the_rows_brings_the_timeline(
    studio: Server, page: Page
) -> None:
    run_id = _run_id(studio, "Long Workflow")
    page.goto(f"{studio.url}/executions/{run_id}?step=100")
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    # The last step has no row in the window around step 100: the explorer comes whole.
    assert page.locator(f"tr[data-sequence='{LONG_RUN_STEPS}']").count() == 0
    page.locator("p.x-window a", has_text="end").click()
    _steps_to(page, LONG_RUN_STEPS)
    assert [url.rsplit("&", 1)[-1] for url in asked] == ["partial=explorer"]
    expect(page.locator("tr.is-selected")).to_have_attribute(
        "data-sequence", str(LONG_RUN_STEPS)
    )
    # Three quick presses are queued, not lost, and land three steps back.
    for _ in range(3):
        page.keyboard.press("ArrowLeft")
    _steps_to(page, LONG_RUN_STEPS - 3)
    # The scrubber goes where it is released.
    page.locator("#scrubber").fill("7")
    _steps_to(page, 7)
    expect(page.locator("tr.is-selected td").first).to_have_text("7")


def test_browser_execution_step_link_keeps_focus_and_opens_whole_in_a_new_tab(
    studio: Server, page: Page, browser: Browser
) -> None:
    run_id = _run_id(studio, "Long Workflow")
    page.goto(f"{studio.url}/executions/{run_id}?step=5")
    page.locator("#step-next").focus()
    page.keyboard.press("Enter")
    _steps_to(page, 6)
    expect(page.locator("#step-next")).to_be_focused()
    # A step's link is a real address: opened on its own, it is the whole page at that step.
    href = page.locator("tr[data-sequence='9'] a").get_attribute("href")
    assert href is not None and href.endswith("?step=9")
    context = browser.new_context(java_script_enabled=False)
    try:
        alone = context.new_page()
        alone.goto(studio.url + href)
        expect(alone.locator("#step h2")).to_have_text(re.compile(r"^Step 9\b"))
        expect(alone.locator("#graph")).to_be_visible()
        expect(alone.locator("#spans")).to_be_visible()
        # Without JavaScript the prev/next links navigate.
        alone.locator("#step-next").click()
        expect(alone.locator("#step h2")).to_have_text(re.compile(r"^Step 10\b"))
    finally:
        context.close()


def test_browser_execution_field_opens_its_provenance_in_place(
    studio: Server, page: Page
) -> None:
    run_id = manifest("a_linear")["outcome"]["run_id"]
    page.goto(f"{studio.url}/executions/{run_id}")
    page.locator("#state a.x-key", has_text=re.compile(r"^title$")).click()
    panel = page.locator("#provenance")
    expect(panel).to_contain_text("Provenance of /title")
    expect(panel).to_contain_text("Last written at step")
    expect(page).to_have_url(re.compile(r"path=/title"))
    # Back closes the panel again, and Forward reopens it.
    page.go_back()
    expect(page.locator("#provenance")).to_contain_text("Select a field name")
    expect(page).not_to_have_url(re.compile(r"path="))
    page.go_forward()
    expect(page.locator("#provenance")).to_contain_text("Provenance of /title")
    # A #fragment link fires popstate too; the panel on screen already answers the URL.
    fetched: list[str] = []
    page.on("request", lambda request: fetched.append(request.url))
    page.locator("a[href='#spans']").first.click()
    expect(page).to_have_url(re.compile(r"#spans$"))
    page.wait_for_timeout(300)
    assert not [url for url in fetched if "/provenance" in url]
    expect(page.locator("#provenance")).to_contain_text("Provenance of /title")
    # Following a write goes to its step, with the panel still open.
    panel.locator("ol.x-writes a").first.click()
    expect(page.locator("#provenance")).to_contain_text("Provenance of /title")
    expect(page.locator("#step h2")).to_contain_text("Step")


def test_browser_execution_stepping_keeps_a_fields_provenance_open(
    studio: Server, page: Page
) -> None:
    run_id = manifest("a_linear")["outcome"]["run_id"]
    api = studio.get_json(f"/api/executions/{run_id}/provenance?path=/title")
    written = sorted({w["sequence"] for w in api["writes"] if w["before"] != w["after"]})
    page.goto(f"{studio.url}/executions/{run_id}")
    page.locator("#state a.x-key", has_text=re.compile(r"^title$")).click()
    panel = page.locator("#provenance")
    expect(panel).to_contain_text("Provenance of /title")
    # Opened in place, the timeline marks the field's writes as the page does.
    marks = page.locator("tr.x-step-row.is-write")
    expect(marks).to_have_count(len(written))
    steps = marks.evaluate_all("rows => rows.map(r => r.dataset.sequence)")
    assert [int(m) for m in steps] == written
    # Stepping back with the keyboard keeps the panel open, told from each step.
    page.keyboard.press("ArrowLeft")
    expect(page).to_have_url(re.compile(r"step=\d+&path=/title$"))
    expect(page.locator("#provenance")).to_contain_text("Provenance of /title")
    expect(page.locator("tr.x-step-row.is-write")).to_have_count(len(written))
    page.goto(f"{studio.url}/executions/{run_id}?step={written[0] - 1}&path=/title")
    expect(page.locator("#provenance")).to_contain_text(f"Next written at step {written[0]}")
    page.keyboard.press("ArrowRight")
    expect(page.locator("#provenance")).to_contain_text(f"Last written at step {written[0]}")


def test_browser_execution_hostile_state_values_render_as_text(
    studio: Server, page: Page, dialogs: list[str]
) -> None:
    run_id = _run_id(studio, "Loop Workflow")
    page.goto(f"{studio.url}/executions/{run_id}?step=9")
    tree = page.locator("#state .x-tree")
    for path in ("1", "2", "3"):
        tree.locator("a.x-key", has_text=re.compile(rf"^{path}$")).first.wait_for()
    text = tree.inner_text()
    assert HOSTILE_SCRIPT in text and HOSTILE_IMG in text and HOSTILE_URL in text
    assert HOSTILE_KEY in text
    # The diff, the patch and the provenance show the same strings as text.
    page.goto(f"{studio.url}/executions/{run_id}?step=3")
    expect(page.locator("#step")).to_contain_text(HOSTILE_SCRIPT)
    page.locator("#state a.x-key", has_text=re.compile(r"^1$")).first.click()
    expect(page.locator("#provenance")).to_contain_text(HOSTILE_SCRIPT)
    page.locator("#state a.x-key", has_text=HOSTILE_KEY).hover()
    # Nothing hostile became markup: no injected elements, no javascript: links.
    assert page.locator("#execution script, #execution img").count() == 0
    assert page.locator("a[href^='javascript:']").count() == 0
    assert page.locator("b[onmouseover]").count() == 0
    page.wait_for_timeout(200)
    assert dialogs == []


def test_browser_execution_partial_run_screenshot(
    studio: Server, page: Page, screenshot: Screenshot
) -> None:
    run_id = _run_id(studio, "Large State Workflow (single)")
    page.goto(f"{studio.url}/executions/{run_id}")
    expect(page.locator("#verdict")).to_contain_text("1,872 events were dropped")
    expect(page.locator("#state h2")).to_contain_text("Recorded end state")
    screenshot(page, "execution-partial.png")


def test_browser_execution_copy_buttons_put_the_whole_id_on_the_clipboard(
    studio: Server, page: Page
) -> None:
    run_id = manifest("a_linear")["outcome"]["run_id"]
    trace_id = studio.get_json(f"/api/executions/{run_id}")["trace_id"]
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=studio.url)
    page.goto(f"{studio.url}/executions/{run_id}")
    facts = page.locator(".x-facts")
    # Shown once the script runs; the trace id is cut on screen, never in what is copied.
    button = facts.get_by_role("button", name="Copy the trace id")
    expect(button).to_be_visible()
    button.click()
    expect(button).to_have_text("copied")
    assert page.evaluate("navigator.clipboard.readText()") == trace_id
    expect(button).to_have_text("copy", timeout=3000)
    facts.get_by_role("button", name="Copy the run id").click()
    assert page.evaluate("navigator.clipboard.readText()") == run_id
    # Keyboard only: Tab reaches the button and Enter copies.
    page.evaluate("navigator.clipboard.writeText('')")
    facts.get_by_role("button", name="Copy the trace id").focus()
    page.keyboard.press("Enter")
    expect(facts.get_by_role("button", name="Copy the trace id")).to_have_text("copied")
    assert page.evaluate("navigator.clipboard.readText()") == trace_id


def test_browser_execution_copy_buttons_stay_hidden_without_javascript(
    studio: Server, browser: Browser
) -> None:
    context = browser.new_context(java_script_enabled=False)
    try:
        shown = context.new_page()
        run_id = manifest("a_linear")["outcome"]["run_id"]
        shown.goto(f"{studio.url}/executions/{run_id}")
        assert shown.locator("button[data-copy]").count() == 3
        expect(shown.locator("button[data-copy]").first).to_be_hidden()
    finally:
        context.close()


def test_browser_execution_span_names_stay_readable_on_a_phone(
    studio: Server, browser: Browser
) -> None:
    context = browser.new_context(viewport={"width": 390, "height": 844})
    try:
        shown = context.new_page()
        run_id = manifest("a_linear")["outcome"]["run_id"]
        shown.goto(f"{studio.url}/executions/{run_id}")
        names = shown.locator("#spans summary .x-wf-name.depth-1 .x-span-name")
        expect(names).to_have_count(4)
        # Each node's name is shown whole: the flags beside it give way first.
        cut = names.evaluate_all(
            "els => els.filter(e => e.scrollWidth > e.clientWidth).map(e => e.textContent)"
        )
        assert cut == [], cut
        # And nothing spills out of the name column into the durations.
        spill = shown.locator("#spans summary .x-wf-name").evaluate_all(
            "els => els.filter(e => e.scrollWidth > e.clientWidth + 1).length"
        )
        assert spill == 0
    finally:
        context.close()


def test_browser_execution_cuts_are_marked_and_hostile_strings_in_them_stay_text(
    make_server: MakeServer, page: Page, dialogs: list[str], screenshot: Screenshot
) -> None:
    # A state nested past the page's depth, a failing node whose message is a probe
    # then JSON 10,000 levels deep, and a start state holding the probe 2,000 times.
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
