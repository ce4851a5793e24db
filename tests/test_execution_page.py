"""The execution page over HTTP, against a real `statetrail serve` fed real Junjo captures.

What a person sees is checked in test_browser_execution.py; here the HTML is read as
text: the right facts, links, panels and status codes for each kind of run.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from html import unescape
from types import SimpleNamespace
from typing import Any

import duckdb
import httpx
import pytest
from opentelemetry.proto.trace.v1 import trace_pb2
from support.history_records import NODE_SPAN, OWNER_SPAN, STORE, TRACE, Patch, scenario
from support.otlp_craft import new_span_id, new_trace_id, plain_request, spans_of, variant
from support.servers import (
    MakeServer,
    Server,
    export_raw,
    fixture_requests,
    manifest,
    send_scenario,
)
from test_studio_pages import run_id_of

from collector.model import EvidenceSpan
from collector.producers import junjo
from collector.replay.walk import replay
from collector.store.in_flight import IN_FLIGHT_QUIET_NANOS, InFlightRow
from collector.store.spans import SpanRow
from studio.inspect import Inspection
from studio.links import Links
from studio.render.graph import layout, node_runs, spans_lost
from studio.render.provenance import PROVENANCE_WINDOW, provenance_view
from studio.render.state_tree import state_view
from studio.render.text import items_text, keys_text, pointer_label
from studio.render.timeline import build_timeline, step_detail
from studio.render.verdict import verdict_sentences
from studio.render.waterfall import build_waterfall, owning_runs
from studio.render.writers import Writers
from studio.templating import templates
from studio.views import execution as execution_page
from studio.views.api import provenance_json

SCENARIOS = ("a_linear", "g_large_state", "d_subflow", "e_exception", "e2_concurrent_failure")


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server holding a verified, a partial, a subflow and a failing run."""
    server = Server.on_free_ports(tmp_path_factory.mktemp("execution-page") / "st.duckdb").start()
    try:
        for scenario in SCENARIOS:
            send_scenario(server.grpc_target, scenario)
        server.wait_replayed()
        yield server
    finally:
        server.stop()


DAY_NANOS = 24 * 3600 * 1_000_000_000


def _get(server: Server, url_path: str, **params: Any) -> httpx.Response:
    return httpx.get(server.url + url_path, params=params, timeout=30)


def _run_id(server: Server, workflow: str) -> str:
    rows = server.get_json("/api/executions?limit=100")["executions"]
    return str(next(row["id"] for row in rows if row["workflow"] == workflow))


def _text(html: str) -> str:
    """The page's text, roughly as read: tags dropped, whitespace collapsed; a line-break
    opportunity (<wbr>) is no space."""
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html.replace("<wbr>", ""))))


def test_execution_page_verified_run_shows_header_verdict_graph_and_spans(
    loaded: Server,
) -> None:
    run_id = manifest("a_linear")["outcome"]["run_id"]
    page = _get(loaded, f"/executions/{run_id}")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    html, text = page.text, _text(page.text)
    assert "Linear Workflow" in text and "junjo-research" in text
    assert "Verified: all 14 transitions" in text
    assert f'href="/api/executions/{run_id}"' in html
    # The graph is server-rendered SVG with every node marked as run.
    graph = html[html.index('id="graph"') : html.index('id="spans"')]
    assert "<svg" in graph and "4 of 4 nodes ran" in _text(graph)
    for node in ("StartNode", "ListNode", "NestedNode", "FinishNode"):
        assert node in graph
    # Spans: a tree (depth classes), to-scale SVG bars, type badges.
    spans = html[html.index('id="spans"') :]
    assert spans.count('<details class="x-span') == 5
    assert re.search(r'<rect x="\d+" y="1" width="\d+"', spans)
    assert "depth-1" in spans and "type-workflow" in spans and "type-node" in spans
    # No inline styles or scripts anywhere: the content security policy forbids them.
    assert "style=" not in html and not re.search(r"<script(?![^>]*\bsrc=)", html)


def test_execution_page_step_selects_a_transition_with_its_diff(loaded: Server) -> None:
    run_id = manifest("a_linear")["outcome"]["run_id"]
    timeline = loaded.get_json(f"/api/executions/{run_id}/timeline")["transitions"]
    step = next(t for t in timeline if t["action"] == "set_metadata")
    html = _get(loaded, f"/executions/{run_id}", step=step["sequence"]).text
    text = _text(html)
    assert f"Step {step['sequence']} set_metadata" in text
    assert f"State after step {step['sequence']}" in text
    assert 'aria-current="step"' in html
    for path in step["changed_paths"]:
        assert path in html
    # prev/next links work without JavaScript and name the neighbouring steps.
    assert 'data-step-prev rel="prev"' in html
    assert re.search(rf'href="[^"]*step={step["sequence"] - 1}"[^>]*data-step-prev', html)
    assert re.search(rf'href="[^"]*step={step["sequence"] + 1}"[^>]*data-step-next', html)
    # The state viewer at that step agrees with the JSON twin.
    state = loaded.get_json(f"/api/executions/{run_id}/state?sequence={step['sequence']}")
    assert f'"{state["state"]["title"]}"' in html.replace("&#34;", '"')


def test_execution_page_field_provenance_lists_every_write(loaded: Server) -> None:
    run_id = manifest("a_linear")["outcome"]["run_id"]
    api = loaded.get_json(f"/api/executions/{run_id}/provenance?path=/title")
    html = _get(loaded, f"/executions/{run_id}", step=3, path="/title").text
    panel = html[html.index('id="provenance"') :]
    panel = panel[: panel.index("</section>")]
    assert "Provenance of" in panel and "/title" in panel
    assert panel.count("<li") == len(api["writes"]) > 0
    assert f"step {api['last_writer']['sequence']}" in _text(panel)
    # The same panel alone, for in-place swaps.
    partial = _get(loaded, f"/executions/{run_id}/provenance", step=3, path="/title")
    assert partial.status_code == 200
    assert partial.text.lstrip().startswith("<section") and "<html" not in partial.text


def test_execution_page_provenance_writes_link_to_their_spans(loaded: Server) -> None:
    # Each write names the node whose span carried it: that name opens the span's
    # row in the waterfall, in the page and in the panel swapped in alone.
    run_id = manifest("a_linear")["outcome"]["run_id"]
    api = loaded.get_json(f"/api/executions/{run_id}/provenance?path=/title")
    html = _get(loaded, f"/executions/{run_id}", path="/title").text
    panel = html[html.index('id="provenance"') :]
    panel = panel[: panel.index("</section>")]
    items = re.findall(r"<li.*?</li>", panel, re.S)
    assert len(items) == len(api["writes"]) > 0
    for item, write in zip(items, api["writes"], strict=True):
        link = f'<a class="x-span-link" href="#span-{write["span_id"]}"'
        assert f'{link} title="The span in the waterfall below">{write["node"]}</a>' in item
        assert f'id="span-{write["span_id"]}"' in html
    last = api["last_writer"]
    writer = panel[panel.index('class="x-last-writer"') :]
    assert f'in <a class="x-span-link" href="#span-{last["span_id"]}"' in writer
    assert_span_anchors_resolve(html)
    alone = _get(loaded, f"/executions/{run_id}/provenance", path="/title").text
    assert re.findall(r'class="x-span-link" href="([^"]+)"', alone) == re.findall(
        r'class="x-span-link" href="([^"]+)"', panel
    )


def test_execution_page_provenance_is_told_from_the_selected_step(loaded: Server) -> None:
    run_id = _run_id(loaded, "Linear Workflow")
    api = loaded.get_json(f"/api/executions/{run_id}/provenance?path=/title")
    writes = [w for w in api["writes"] if w["before"] != w["after"]]
    first, last = writes[0], writes[-1]
    assert first["sequence"] < last["sequence"]

    def panel(step: int, path: str) -> str:
        html = _get(loaded, f"/executions/{run_id}", step=step, path=path).text
        section = html[html.index('id="provenance"') :]
        return _text(section[: section.index("</section>")])

    assert first["sequence"] == 1  # so the step before it is the start state
    before_any = panel(0, "/title")
    assert f"At the start: {json.dumps(first['before'])}" in before_any
    assert "As recorded in the start state" in before_any
    assert f"Next written at step {first['sequence']}" in before_any
    assert f"last at step {last['sequence']}" in before_any
    at_first = panel(first["sequence"], "/title")
    assert f"Last written at step {first['sequence']}" in at_first
    assert json.dumps(first["after"]) in at_first
    assert f"after step {first['sequence']}" in at_first  # later writes are marked
    at_end = panel(last["sequence"], "/title")
    assert f"Last written at step {last['sequence']}" in at_end and "Next written" not in at_end
    nowhere = panel(last["sequence"], "/no/such/field")
    assert "is in no state of this run that the evidence shows" in nowhere
    assert "comes from the start state" not in nowhere


def test_execution_page_timeline_marks_the_open_fields_writes_and_keeps_it_open(
    loaded: Server,
) -> None:
    run_id = manifest("a_linear")["outcome"]["run_id"]
    api = loaded.get_json(f"/api/executions/{run_id}/provenance?path=/title")
    written = {w["sequence"] for w in api["writes"] if w["before"] != w["after"]}
    step = sorted(written)[1]
    html = _get(loaded, f"/executions/{run_id}", step=step, path="/title").text
    timeline = html[html.index('id="timeline"') : html.index('id="step"')]
    marked = {
        int(n)
        for n in re.findall(r'x-step-row[^"]*is-write[^"]*" data-sequence="(\d+)"', timeline)
    }
    assert marked == written, (marked, written)
    # Every step link keeps the panel open, so stepping tells the field's story from there.
    step_links = re.findall(r'<a href="([^"]+)" data-step>', timeline)
    assert step_links and all(
        unescape(link).endswith("&path=/title") for link in step_links
    ), step_links
    assert '<input type="hidden" name="path" value="/title">' in timeline
    # A changed path is never cut without its whole self in the tooltip.
    for path in re.findall(r"<td class=\"x-paths\">(.*?)</td>", timeline):
        for title, text in re.findall(r'<code title="([^"]+)">([^<]+)</code>', path):
            assert title == text
    # Without a field open, no marks and plain step links.
    plain = _get(loaded, f"/executions/{run_id}", step=step).text
    plain_timeline = plain[plain.index('id="timeline"') : plain.index('id="step"')]
    assert "is-write" not in plain_timeline and "path=" not in plain_timeline


def test_provenance_panel_links_to_every_run_with_the_same_value(loaded: Server) -> None:
    run_id = manifest("a_linear")["outcome"]["run_id"]
    api = loaded.get_json(f"/api/executions/{run_id}/provenance?path=/title")
    first = next(w for w in api["writes"] if w["before"] != w["after"])
    end = _get(loaded, f"/executions/{run_id}", path="/title").text
    ((link, shown),) = re.findall(
        r'class="x-similar" href="([^"]+)"[^>]*>Runs where <code>([^<]+)<', end
    )
    # At the last step: the end state (`final`, left implicit), as the list's filter reads it.
    final_title = manifest("a_linear")["outcome"]["final_state"]["title"]
    assert unescape(shown) == f"title = {json.dumps(final_title)}"
    listed = httpx.get(loaded.url + unescape(link), timeout=30)
    assert listed.status_code == 200
    assert f"/executions/{run_id}?path=/title" in listed.text  # this run, on this field
    assert "Failing Workflow" not in _text(listed.text)  # and only runs that match
    # At an earlier step: any state the run passed through.
    earlier = _get(loaded, f"/executions/{run_id}", step=first["sequence"], path="/title").text
    (shown_then,) = re.findall(r'class="x-similar"[^>]*>Runs where <code>([^<]+)<', earlier)
    assert unescape(shown_then) == f"ever title = {json.dumps(first['after'])}"
    # A container is no single value: no link.
    whole = _get(loaded, f"/executions/{run_id}", path="/metadata").text
    assert "x-similar" not in whole


def test_execution_page_partial_run_explains_what_is_missing(loaded: Server) -> None:
    run_id = _run_id(loaded, "Large State Workflow (single)")
    started = time.perf_counter()
    html = _get(loaded, f"/executions/{run_id}").text
    elapsed = time.perf_counter() - started
    text = _text(html)
    assert "1,872 of 2,000 transitions never arrived" in text
    assert "1,872 events were dropped by the OpenTelemetry SDK's 128-events-per-span" in text
    assert "states from step 1873 on are replayed but unverified" in text
    assert "The recorded end state is shown as recorded" in text
    # By default an unverified run opens on its end state exactly as recorded.
    assert "Recorded end state" in text
    integrity = html[html.index('id="integrity"') : html.index('id="state-explorer"')]
    for code in ("otlp_data_dropped", "sequence_gap", "end_state_mismatch"):
        assert code in integrity
    assert re.search(r'href="[^"]*step=1"[^>]*>step 1<', integrity)
    assert "unverified" in text
    assert elapsed < 5


def test_execution_page_marks_transitions_that_never_arrived_where_they_belong(
    loaded: Server,
) -> None:
    run_id = _run_id(loaded, "Large State Workflow (single)")
    api = loaded.get_json(f"/api/executions/{run_id}/timeline")
    assert api["missing"] == [{"first": 1, "last": 1872}]
    received = [t["sequence"] for t in api["transitions"]]
    assert received[0] == 1873 and len(received) == 128
    # Asking for a step that never arrived says so, and shows the state before it.
    html = _get(loaded, f"/executions/{run_id}", step=1).text
    step = _text(html[html.index('id="step"') : html.index('id="provenance"')])
    assert "Step 1 never arrived" in step and "Showing the start state" in step
    timeline = html[html.index('id="timeline"') : html.index('id="step"')]
    gap = re.search(r'<tr class="x-gap-row">(.*?)</tr>', timeline, re.S)
    assert gap is not None
    assert "1\u20131872" in gap.group(1)
    assert "1,872 transitions never arrived" in _text(gap.group(1))
    # The hole sits between the start row and the first step received.
    assert timeline.index("is-start") < gap.start() < timeline.index(">1873<")
    assert "of 128 received · 1,872 never arrived" in _text(timeline)
    # A received step carries no such notice.
    html = _get(loaded, f"/executions/{run_id}", step=1900).text
    assert "never arrived, so there is nothing" not in html


def test_execution_page_subflows_link_parent_and_children(loaded: Server) -> None:
    parent_id = manifest("d_subflow")["outcome"]["run_id"]
    detail = loaded.get_json(f"/api/executions/{parent_id}")
    children = detail["children"]
    assert children
    html = _get(loaded, f"/executions/{parent_id}").text
    for child in children:
        assert f'href="/executions/{child["id"]}"' in html
    # The subflow box in the graph opens the child run, too.
    graph = html[html.index('id="graph"') : html.index('id="spans"')]
    assert f'<a href="/executions/{children[0]["id"]}">' in graph
    child_html = _get(loaded, f"/executions/{children[0]['id']}").text
    assert f'href="/executions/{parent_id}"' in child_html
    # The span waterfall opens each child run from its span's row.
    spans = html[html.index('id="spans"') :]
    for child in children:
        assert f'class="x-run-link" href="/executions/{child["id"]}"' in spans
    # A grandchild's breadcrumb names every ancestor, outermost first, then itself.
    grandchildren = [
        (child, grand)
        for child in children
        for grand in loaded.get_json(f"/api/executions/{child['id']}")["children"]
    ]
    assert grandchildren, "d_subflow nests a subflow in a subflow"
    child, grand = grandchildren[0]
    crumbs = _get(loaded, f"/executions/{grand['id']}").text
    crumbs = crumbs[crumbs.index('class="x-crumbs"') :]
    crumbs = crumbs[: crumbs.index("</nav>")]
    links = re.findall(r'href="/executions/([^"]+)"', crumbs)
    assert links == [parent_id, child["id"]]
    assert _text(crumbs).strip().endswith(f"{grand['workflow']} subflow")


def test_execution_page_failed_run_shows_error_and_stack_trace(loaded: Server) -> None:
    run_id = manifest("e_exception")["outcome"]["run_id"]
    html = _get(loaded, f"/executions/{run_id}").text
    text = _text(html)
    assert "RuntimeError" in text
    assert "model returned garbage: &#39;unexpected token &lt;&#39;" in html
    assert "<summary>Stack trace</summary>" in html and "Traceback" in html
    graph = html[html.index('id="graph"') : html.index('id="spans"')]
    assert "is-failed" in graph and "2 of 3 nodes ran" in _text(graph)
    # The banner names the node that raised, linked to its span below.
    (span,) = re.findall(r'Raised in node <a href="#span-(\w+)">ExplodingNode</a>\.', html)
    assert f'id="span-{span}"' in html
    # The JSON twin tells the same.
    ended = loaded.get_json(f"/api/executions/{run_id}")["outcome"]
    assert (ended["status"], ended["error_type"]) == ("error", "RuntimeError")
    (culprit,) = ended["culprits"]
    assert (culprit["name"], culprit["kind"], culprit["span_id"]) == ("ExplodingNode", "node", span)
    assert culprit["error_type"] == "RuntimeError" and ended["stopped"] == []
    ok_run = manifest("a_linear")["outcome"]["run_id"]
    assert loaded.get_json(f"/api/executions/{ok_run}")["outcome"] is None


def test_execution_page_graph_marks_the_failed_and_the_cancelled_concurrent_child(
    loaded: Server,
) -> None:
    rows = loaded.get_json("/api/executions?limit=100")["executions"]
    (run,) = [r for r in rows if r["error"] and "fast branch failed" in r["error"]]
    html = _get(loaded, f"/executions/{run['id']}").text
    graph = html[html.index('id="graph"') : html.index('id="spans"')]
    children = re.findall(r'<g class="x-gchild([^"]*)">\s*<title>([^<]*)</title>', graph)
    states = {title.split(":")[0]: classes for classes, title in children}
    assert len(states) == 2, children
    failed = [name for name, classes in states.items() if "is-failed" in classes]
    cancelled = [name for name, classes in states.items() if "is-cancelled" in classes]
    assert len(failed) == len(cancelled) == 1 and failed != cancelled
    assert any(title.endswith("ran, cancelled") for _, title in children)
    # The banner names the same two: the child that raised, and the sibling it stopped.
    banner = _text(html[html.index('id="outcome"') : html.index('id="verdict"')])
    assert f"Raised in node {failed[0]} ." in banner
    assert f"Cancelled as a result: node {cancelled[0]} (sibling_failed)" in banner
    ended = loaded.get_json(f"/api/executions/{run['id']}")["outcome"]
    assert [c["name"] for c in ended["culprits"]] == failed
    assert [(c["name"], c["cancelled_reason"]) for c in ended["stopped"]] == [
        (cancelled[0], "sibling_failed")
    ]


def test_execution_page_span_details_page(loaded: Server) -> None:
    run_id = manifest("a_linear")["outcome"]["run_id"]
    detail = loaded.get_json(f"/api/executions/{run_id}")
    page = _get(loaded, f"/executions/{run_id}/spans/{detail['span_id']}")
    assert page.status_code == 200
    assert "junjo.workflow.state.start" in page.text and "junjo.span_type" in page.text
    missing = _get(loaded, f"/executions/{run_id}/spans/0000000000000000")
    assert missing.status_code == 404


def test_span_page_says_where_the_span_sits_when_and_how_it_ended(loaded: Server) -> None:
    run_id = manifest("e_exception")["outcome"]["run_id"]
    html = _get(loaded, f"/executions/{run_id}").text
    (span_id,) = re.findall(r'Raised in node <a href="#span-(\w+)">ExplodingNode</a>', html)
    trace_id = loaded.get_json(f"/api/executions/{run_id}")["trace_id"]
    page = _get(loaded, f"/executions/{run_id}/spans/{span_id}").text
    facts = _text(page[page.index('class="x-facts"') : page.index("Dropped attributes")])
    assert "Kind internal" in facts and "Status error" in facts and "Duration" in facts
    # The trace id is whole in the text (a select-and-copy takes all of it), with a
    # copy button, and lists the trace's runs.
    assert f'href="/?trace={trace_id}"' in page and f">{trace_id}</a>" in page
    assert f'data-copy="{trace_id}"' in page and f'data-copy="{span_id}"' in page
    # The parent is in the trace: its own page, which names this span's trace too.
    (parent,) = re.findall(rf'href="/executions/{run_id}/spans/(\w+)"[^>]*>\w+</a>', page)
    parent_page = _get(loaded, f"/executions/{run_id}/spans/{parent}")
    assert parent_page.status_code == 200 and trace_id in parent_page.text
    # The workflow span is the root.
    root = loaded.get_json(f"/api/executions/{run_id}")["span_id"]
    assert "none (root)" in _text(_get(loaded, f"/executions/{run_id}/spans/{root}").text)


def test_execution_page_ids_are_whole_with_copy_buttons(loaded: Server) -> None:
    run_id = manifest("a_linear")["outcome"]["run_id"]
    detail = loaded.get_json(f"/api/executions/{run_id}")
    html = _get(loaded, f"/executions/{run_id}").text
    facts = html[html.index('class="x-facts"') : html.index("</dl>")]
    for value in (run_id, detail["trace_id"], detail["store_id"]):
        assert f">{value}</" in facts, value  # never cut in the text itself
        assert f'data-copy="{value}"' in facts, value
    assert "…" not in _text(facts)
    # Shown by static/app.js: without JavaScript there is nothing to click.
    assert facts.count("hidden>copy</button>") == 3


def test_execution_page_unknown_run_is_404_and_bad_step_is_400(loaded: Server) -> None:
    missing = _get(loaded, "/executions/no-such-run")
    assert missing.status_code == 404
    assert "Execution not found" in missing.text and "no-such-run" in missing.text
    run_id = manifest("a_linear")["outcome"]["run_id"]
    bad = _get(loaded, f"/executions/{run_id}", step="three")
    assert bad.status_code == 400 and "step" in bad.text
    bad_path = _get(loaded, f"/executions/{run_id}", path="/a~2b")
    assert bad_path.status_code == 400
    bad_partial = _get(loaded, f"/executions/{run_id}", step=2, partial="header")
    assert bad_partial.status_code == 400 and "explorer, step" in bad_partial.text
    assert _get(loaded, "/executions/no-such-run", partial="step").status_code == 404


def test_execution_page_partials_hold_the_step_or_the_explorer_alone(loaded: Server) -> None:
    # What static/execution.js swaps in while stepping: the step panel and the stepper
    # (`partial=step`), or the whole explorer (`partial=explorer`), told as the page tells
    # them, without the header, graph and spans around them.
    run_id = manifest("a_linear")["outcome"]["run_id"]
    whole = _get(loaded, f"/executions/{run_id}", step=5, path="/title").text
    step = _get(loaded, f"/executions/{run_id}", step=5, path="/title", partial="step").text
    explorer = _get(
        loaded, f"/executions/{run_id}", step=5, path="/title", partial="explorer"
    ).text

    def section(html: str, start: str, end: str) -> str:
        begin = html.index(start)
        return html[begin : html.index(end, begin)]

    panel = section(whole, 'id="step-panel"', 'id="graph"')
    assert 'data-selected="5"' in step and 'id="stepper"' in step
    assert section(step, 'id="step-panel"', "</section>\n</div>") in panel
    assert "Provenance of /title" in _text(step)
    assert section(whole, 'id="stepper"', "</form>") == section(step, 'id="stepper"', "</form>")
    assert 'id="timeline"' not in step and "<html" not in step
    assert section(whole, 'id="state-explorer"', 'id="graph"').startswith(
        section(explorer, 'id="state-explorer"', "</section>\n</div>")
    )
    for part in (step, explorer):
        assert 'id="graph"' not in part and 'id="spans"' not in part
        assert 'id="verdict"' not in part
    assert len(step) * 3 < len(whole)


@pytest.mark.slow
def test_execution_page_in_flight_refreshes_until_the_owner_arrives(
    make_server: MakeServer,
) -> None:
    server: Server = make_server()
    first, second = fixture_requests("l_split_batches")
    export_raw(server.grpc_target, *first)
    server.wait_replayed()
    flying = server.get_json("/api/executions?verdict=in_flight")["executions"]
    assert len(flying) == 1
    run_id = flying[0]["id"]
    html = _get(server, f"/executions/{run_id}").text
    text = _text(html)
    assert "In flight:" in text and "refreshes itself" in text
    # What arrived so far spans some time; the start state has not come yet.
    assert "Activity so far" in text and "<dt>Duration</dt>" not in html
    assert "start state (comes with the workflow span, not arrived yet)" in text
    assert 'hx-trigger="every 2s"' in html
    assert '<noscript><meta http-equiv="refresh" content="2"></noscript>' in html
    assert flying[0]["received_transitions"] > 0
    assert text.count(" unverified ") >= flying[0]["received_transitions"]

    export_raw(server.grpc_target, *second)
    server.wait_replayed()
    done = _get(server, f"/executions/{run_id}").text
    assert "every 2s" not in done and 'http-equiv="refresh"' not in done
    assert "Verified: all" in _text(done)


def test_waterfall_orders_spans_as_a_tree_with_bars_to_scale() -> None:
    def span(span_id: str, parent: str, start: int, end: int) -> SpanRow:
        return SpanRow("t" * 32, span_id, parent, span_id, 1, start, end, 0, "", "svc", "junjo",
                       None, None, b"")

    rows = build_waterfall(
        [span("c", "a", 500, 1000), span("a", "", 0, 1000), span("b", "a", 0, 250),
         span("orphan", "missing", 100, 200)],
        owner_span_id="a",
    ).rows
    assert [(r.span_id, r.depth) for r in rows] == [("a", 0), ("b", 1), ("c", 1), ("orphan", 0)]
    assert [(r.x, r.width) for r in rows[:3]] == [(0, 1000), (0, 250), (500, 500)]
    assert [r.in_execution for r in rows] == [True, True, True, False]
    assert node_runs(rows) == {}


def test_a_node_count_in_non_ascii_digits_is_no_count_rather_than_a_crash() -> None:
    # str.isdigit() admits '²', which int() refuses: the page raised on such telemetry.
    def owner(count: str) -> SpanRow:
        span = trace_pb2.Span()
        attribute = span.attributes.add()
        attribute.key = junjo.WORKFLOW_NODE_COUNT
        attribute.value.string_value = count
        return SpanRow("t" * 32, "a", "", "Workflow", 1, 0, 10, 0, "", "svc", "junjo",
                       None, None, span.SerializeToString())

    for count, lost in (("\u00b2", False), ("\u0661", False), ("3", True)):
        rows = build_waterfall([owner(count)], owner_span_id="a").rows
        assert spans_lost(rows, {}) is lost


def test_a_foreign_step_in_this_trace_links_to_the_run_that_wrote_it() -> None:
    def span(span_id: str, parent: str, span_type: str, run_id: str | None = None) -> SpanRow:
        proto = trace_pb2.Span(name=span_id)
        if run_id:
            proto.attributes.add(key=junjo.RUNTIME_ID).value.string_value = run_id
        return SpanRow(TRACE, span_id, parent, span_id, 1, 0, 10, 0, "", "svc", "junjo",
                       span_type, run_id, proto.SerializeToString())

    # A workflow whose node ran a sibling workflow on the same store: the sibling's
    # node carried the writes, outside the first run's own spans.
    waterfall = build_waterfall(
        [span(OWNER_SPAN, "", "workflow", "RunA"), span("aaaaaaaaaaaaaaaa", OWNER_SPAN, "node"),
         span("bbbbbbbbbbbbbbbb", "aaaaaaaaaaaaaaaa", "workflow", "RunB"),
         span(NODE_SPAN, "bbbbbbbbbbbbbbbb", "node")],
        owner_span_id=OWNER_SPAN,
    )
    runs = owning_runs(waterfall)
    assert runs == {OWNER_SPAN: "RunA", "aaaaaaaaaaaaaaaa": "RunA",
                    "bbbbbbbbbbbbbbbb": "RunB", NODE_SPAN: "RunB"}
    execution, transitions, _ = scenario({}, [[{"op": "add", "path": "/a", "value": 1}]])
    history = replay(execution, transitions, owner_span_ids={OWNER_SPAN, "aaaaaaaaaaaaaaaa"})
    assert all(step.foreign for step in history.steps)

    writers = Writers.of(TRACE, waterfall)
    (row,) = build_timeline(history, Links(), "/executions/RunA", 1, writers=writers).rows
    assert (row.writer_run_id, row.writer_runs_href) == ("RunB", "/executions/RunB")
    # The span is in this trace, so the step panel links its row on this page.
    step = step_detail(history, 1, Links(), writers)
    assert step is not None and step.span_href == f"#span-{NODE_SPAN}"
    assert step.writer_run_id == "RunB"
    # Without the trace's spans the link falls back to the writer's trace.
    (row,) = build_timeline(history, Links(), "/executions/RunA", 1).rows
    assert row.writer_run_id is None and row.writer_runs_href == f"/?trace={TRACE}"


def _set_attribute(span: trace_pb2.Span, key: str, value: str | int) -> None:
    (item,) = [item for item in span.attributes if item.key == key]
    if isinstance(value, str):
        item.value.string_value = value
    else:
        item.value.int_value = value


def _string_attribute(span: trace_pb2.Span, key: str) -> str:
    (item,) = [item for item in span.attributes if item.key == key]
    return str(item.value.string_value)


def assert_span_anchors_resolve(html: str) -> None:
    """Every in-page span link names a span row that is on the page."""
    targets = set(re.findall(r'id="span-([^"]+)"', html))
    linked = set(re.findall(r'href="#span-([^"]+)"', html))
    assert linked <= targets, linked - targets


@pytest.mark.slow
def test_a_foreign_step_from_another_trace_links_where_its_span_is_shown(
    make_server: MakeServer,
) -> None:
    # One store lent to two runs, each in its own trace (SCHEMA.md 7.1, 7.4): run
    # A's steps 3-7 were written in run B's trace, and steps 8-11 in a trace whose
    # owner span never arrived. Neither span is on A's page.
    server: Server = make_server()
    (request,) = variant("shared-store")
    (scope,) = [scope for rs in request.resource_spans for scope in rs.scope_spans]
    spans = {span.name: span for span in scope.spans}
    owner = spans["Linear Workflow"]
    run_a = _string_attribute(owner, junjo.RUNTIME_ID)
    trace_b, trace_c = new_trace_id(), new_trace_id()
    borrower = scope.spans.add()
    borrower.CopyFrom(owner)
    borrower.trace_id, borrower.span_id, borrower.name = trace_b, new_span_id(), "Borrower"
    _set_attribute(borrower, junjo.RUNTIME_ID, "run-b")
    _set_attribute(borrower, junjo.TRANSITION_START, 2)
    _set_attribute(borrower, junjo.TRANSITION_END, 7)
    in_b, in_c = spans["ListNode"], spans["NestedNode"]
    in_b.trace_id, in_b.parent_span_id = trace_b, borrower.span_id
    in_c.trace_id, in_c.parent_span_id = trace_c, new_span_id()
    ((_, metadata),) = fixture_requests("a_linear")
    export_raw(server.grpc_target, request.SerializeToString(), metadata)
    server.wait_replayed()
    span_b, span_c = in_b.span_id.hex(), in_c.span_id.hex()

    timeline = server.get_json(f"/api/executions/{run_a}/timeline")["transitions"]
    foreign = [t for t in timeline if t["foreign"]]
    assert [t["sequence"] for t in foreign] == list(range(3, 12))
    for step in foreign:
        path = (step["changed_paths"] or ["/"])[0]
        for params in ({}, {"path": path}, {"state": "recorded"}):
            page = _get(server, f"/executions/{run_a}", step=step["sequence"], **params)
            assert page.status_code == 200
            assert_span_anchors_resolve(page.text)

    def step_panel(html: str) -> str:
        return html[html.index('id="step"') : html.index('id="provenance"')]

    # Written by run B: the span is read on B's page, at the same step, where it is shown.
    html = _get(server, f"/executions/{run_a}", step=3).text
    at_b = f"/executions/run-b?step=3#span-{span_b}"
    assert f'href="{at_b}"' in step_panel(html)
    # A write's span in the provenance panel is linked the same way.
    path = (foreign[0]["changed_paths"] or ["/"])[0]
    html_path = _get(server, f"/executions/{run_a}", step=3, path=path).text
    provenance = html_path[html_path.index('id="provenance"') :]
    assert f'<a class="x-span-link" href="{at_b}"' in provenance
    assert "of run run-b" in _text(step_panel(html))
    assert f'id="span-{span_b}"' in _get(server, at_b.split("#")[0]).text
    # The timeline and the finding name the writing run too.
    assert '<a class="x-mark mark-foreign" href="/executions/run-b"' in html
    assert 'href="/executions/run-b" title="The run that wrote them"' in html
    # No run is known for trace C's span: the panel lists that trace's runs.
    html = _get(server, f"/executions/{run_a}", step=8).text
    assert f'href="/?trace={trace_c.hex()}"' in step_panel(html)
    assert f"#span-{span_c}" not in html


def test_graph_layout_layers_forward_edges_and_draws_loops_on_the_side() -> None:
    def node(runtime_id: str) -> dict[str, Any]:
        return {"nodeRuntimeId": runtime_id, "nodeStructuralId": f"node_{runtime_id}",
                "nodeLabel": runtime_id.upper(), "nodeType": "Node"}

    def edge(tail: str, head: str, label: str | None = None) -> dict[str, Any]:
        return {"tailNodeRuntimeId": tail, "headNodeRuntimeId": head,
                "edgeConditionLabel": label, "edgeScope": "explicit",
                "parentSubflowRuntimeId": None}

    import json

    snapshot = json.dumps({"v": 2, "nodes": [node("a"), node("b"), node("c"), node("d")],
                           "edges": [edge("a", "b"), edge("b", "b", "Again(3)"),
                                     edge("b", "c", "Done"), edge("a", "c"),
                                     edge("c", "a", "Restart")]})
    from studio.render.graph import NodeRun

    view = layout(snapshot, {"node_b": NodeRun(3, False)})
    rows = {box.runtime_id: box.y for box in view.nodes}
    # Longest path: a -> b -> c, so c sits below b even though a -> c exists; d is unreached.
    assert rows["a"] < rows["b"] < rows["c"]
    assert [e.loop for e in view.edges] == [False, True, False, False, True]
    assert {e.label for e in view.edges} == {None, "Again(3)", "Done", "Restart"}
    counts = {box.runtime_id: box.run.count for box in view.nodes}
    assert counts == {"a": 0, "b": 3, "c": 0, "d": 0}
    assert (view.executed, view.total) == (1, 4)


def test_provenance_panel_windows_a_field_written_at_every_step() -> None:
    writes = 4 * PROVENANCE_WINDOW
    execution, transitions, _ = scenario(
        {"n": 0}, [[{"op": "replace", "path": "/n", "value": i}] for i in range(1, writes + 1)]
    )
    inspection = Inspection("run", None, execution, None, replay(execution, transitions))

    middle = provenance_view(inspection, Links(), "/executions/run", writes // 2, "/n")
    assert middle.total == writes and len(middle.writes) == PROVENANCE_WINDOW
    shown = [write.sequence for write in middle.writes]
    assert shown[0] < writes // 2 < shown[-1]
    assert shown == list(range(shown[0], shown[0] + PROVENANCE_WINDOW))
    # The last writer is named even when its write is outside the window.
    assert middle.last_writer is not None and middle.last_writer.sequence == writes
    assert middle.last_writer.after == str(writes)
    # The neighbouring windows join this one exactly.
    assert middle.earlier_href is not None and middle.later_href is not None
    earlier_step = int(re.findall(r"step=(\d+)", middle.earlier_href)[0])
    earlier = provenance_view(inspection, Links(), "/executions/run", earlier_step, "/n")
    assert earlier.writes[-1].sequence == shown[0] - 1
    later_step = int(re.findall(r"step=(\d+)", middle.later_href)[0])
    later = provenance_view(inspection, Links(), "/executions/run", later_step, "/n")
    assert later.writes[0].sequence == shown[-1] + 1

    first = provenance_view(inspection, Links(), "/executions/run", 1, "/n")
    assert first.earlier_href is None and first.writes[0].sequence == 1
    # Asked twice, the inspection answers from what it remembered.
    assert inspection.provenance("/n") is inspection.provenance("/n")


def test_provenance_panel_never_claims_what_the_evidence_cannot_show() -> None:
    def panel(inspection: Inspection, step: int) -> str:
        view = provenance_view(inspection, Links(), "/executions/run", step, "/a")
        html = templates.get_template("_execution_provenance.html").render(provenance=view)
        return _text(html)

    writes = [[{"op": "replace", "path": "/a", "value": n}] for n in (1, 2)]
    execution, transitions, _ = scenario({"a": 0, "b": 5}, writes)
    # No states to read provenance from: say so, and nothing about writers.
    withheld = replace(execution, state_start=None, state_start_mode="withheld")
    for inspection in (
        Inspection("run", None, withheld, None, replay(withheld, transitions)),
        Inspection("run", None, None, None, replay(None, transitions)),
    ):
        text = panel(inspection, 2)
        assert "Provenance is read from the replayed states, and this run has none" in text
        assert "comes from the start state" not in text and "written" not in text
    # Step 1 (which set /a) never arrived: the value at step 2 is a guess, and a write
    # may be among the missing.
    partial = Inspection("run", None, execution, None, replay(execution, transitions[1:]))
    text = panel(partial, 1)
    assert "unverified" in text
    assert "1 transition before it never arrived: it may have been written in that one" in text
    assert "comes from the start state" not in text


def test_provenance_panel_lists_received_writes_that_did_not_apply() -> None:
    """The write that made /scratch was lost; the writes into it arrived and could not apply."""
    patches: list[Patch] = [
        [{"op": "add", "path": "/scratch", "value": {}}],
        *([{"op": "add", "path": f"/scratch/{n}", "value": n}] for n in (2, 3)),
    ]
    execution, transitions, _ = scenario({}, patches)
    inspection = Inspection("run", None, execution, None, replay(execution, transitions[1:]))

    view = provenance_view(inspection, Links(), "/executions/run", 3, "/scratch")
    html = templates.get_template("_execution_provenance.html").render(provenance=view)
    text = _text(html)

    assert "No received transition wrote it" not in text
    assert "No write to it applied up to step 3: 2 received writes to it did not apply" in text
    assert "after 1 transition that never arrived, which may have written it too" in text
    assert [(w.sequence, w.applied, w.attempted) for w in view.writes] == [
        (2, False, "2"),
        (3, False, "3"),
    ]
    assert text.count("Received, but not applied: it came after transitions that never "
                      "arrived") == 2
    assert html.count("is-unapplied") == 2 and "would have written" in text
    # The JSON twin lists them too, with fields added beside the old ones.
    writes = provenance_json(inspection.provenance("/scratch"))["writes"]
    assert [(w["applied"], w["not_applied_because"], w["attempted"]) for w in writes] == [
        (False, "after_missing_transitions", 2),
        (False, "after_missing_transitions", 3),
    ]
    assert all(w["verified"] is False and "before" in w for w in writes)


def test_provenance_panel_marks_writes_their_own_step_put_back() -> None:
    """A list diff that shifts a value off an index and moves it back: the step left it."""
    patches: list[Patch] = [
        [
            {"op": "add", "path": "/items/0", "value": "q"},
            {"op": "move", "from": "/items/1", "path": "/items/2"},
        ],
    ]
    execution, transitions, _ = scenario({"items": ["p", "q"]}, patches)
    inspection = Inspection("run", None, execution, None, replay(execution, transitions))

    view = provenance_view(inspection, Links(), "/executions/run", 1, "/items/1")
    html = templates.get_template("_execution_provenance.html").render(provenance=view)
    text = _text(html)

    assert view.last_writer is None
    assert [(w.op, w.undone) for w in view.writes] == [("add", True), ("move", True)]
    assert text.count("put back in the step") == 2
    assert "comes from the start state" in text, text
    writes = provenance_json(inspection.provenance("/items/1"))
    assert writes["last_writer"] is None
    assert [w["undone"] for w in writes["writes"]] == [True, True]
    # The state tree after the step agrees: /items/0 and /items/2 changed, /items/1 did not.
    state = state_view(inspection, Links(), "/executions/run", 1, None, recorded=False)
    assert {t.pointer for t in state.tokens if t.changed} == {"/items/0", "/items/2"}


def test_pointer_labels_tell_the_whole_state_and_empty_or_spaced_keys_apart() -> None:
    labels = {p: pointer_label(p) for p in ("", "/", "/meta", "/meta/", "/ spaced ",
                                              "/spaced", '/""', "/m~1n", "/a b")}

    assert labels == {
        "": "the whole state",
        "/": '/""',
        "/meta": "/meta",
        "/meta/": '/meta/""',
        "/ spaced ": '/" spaced "',
        "/spaced": "/spaced",
        '/""': '/"\\"\\""',
        "/m~1n": "/m~1n",
        "/a b": "/a b",
    }
    assert len(set(labels.values())) == len(labels)


def test_execution_page_shows_the_whole_state_and_empty_keys_unambiguously() -> None:
    start = {"meta": {"": 1, "x": 2}, " spaced ": 3, "spaced": 4}
    patches = [[{"op": "replace", "path": "/meta/", "value": 5},
                {"op": "replace", "path": "/ spaced ", "value": 6}]]
    execution, transitions, _ = scenario(start, patches)
    inspection = Inspection("run", None, execution, None, replay(execution, transitions))
    links = Links()

    def render(name: str, **context: Any) -> str:
        return _text(templates.get_template(name).render(links=links, **context))

    whole = provenance_view(inspection, links, "/executions/run", 1, "")
    panel = render("_execution_provenance.html", provenance=whole)
    assert "Provenance of the whole state" in panel and "Provenance of /" not in panel
    empty_key = provenance_view(inspection, links, "/executions/run", 1, "/meta/")
    assert 'Provenance of /meta/""' in render("_execution_provenance.html", provenance=empty_key)
    page = SimpleNamespace(
        header=SimpleNamespace(run_id="run"),
        timeline=SimpleNamespace(asked_missing=None),
        step=step_detail(inspection.history, 1, links, Writers(frozenset(), {})),
        state=state_view(inspection, links, "/executions/run", 1, None, recorded=False),
    )
    diff = render("_execution_step.html", view=page)
    assert 'replace /meta/""' in diff and 'replace /" spaced "' in diff
    tree = templates.get_template("_execution_state.html").render(links=links, view=page)
    assert 'title="Provenance of the whole state"' in tree
    assert '>&#34;&#34;</a>' in tree and '>&#34; spaced &#34;</a>' in tree
    assert 'title="Provenance of /&#34; spaced &#34;"' in tree


def test_verdict_names_only_the_drops_counted_against_this_run() -> None:
    def span(span_id: str, parent: str, dropped: int) -> SpanRow:
        proto = trace_pb2.Span(name=span_id, dropped_events_count=dropped)
        return SpanRow(TRACE, span_id, parent, span_id, 1, 0, 10, 0, "", "svc", "junjo",
                       "node", None, proto.SerializeToString())

    sibling = "5555555555555555"
    rows = [span(OWNER_SPAN, "", 0), span(NODE_SPAN, OWNER_SPAN, 3), span(sibling, "", 9)]
    # Step 1 never arrived, so the verdict explains what is missing.
    execution, transitions, _ = scenario(
        {}, [[{"op": "add", "path": f"/{key}", "value": 1}] for key in "ab"]
    )
    transitions = transitions[1:]
    evidence = [
        EvidenceSpan(TRACE, OWNER_SPAN, "owner", "workflow", 0, 0, 0),
        EvidenceSpan(TRACE, NODE_SPAN, NODE_SPAN, "node", 0, 3, 0),
        EvidenceSpan(TRACE, sibling, sibling, "subflow", 0, 9, 0),
    ]
    history = replay(execution, transitions, evidence_spans=evidence,
                     owner_span_ids={OWNER_SPAN, NODE_SPAN})
    text = " ".join(verdict_sentences(history, build_waterfall(rows, OWNER_SPAN)))
    assert f"3 events were dropped by the OpenTelemetry SDK's 128-events-per-span limit " \
        f"(on '{NODE_SPAN}')" in text
    assert sibling not in text


def test_an_in_flight_run_that_went_quiet_says_its_owner_was_probably_lost() -> None:
    execution, transitions, _ = scenario({"n": 0}, [[{"op": "replace", "path": "/n", "value": 1}]])
    history = replay(None, transitions)
    now = time.time_ns()

    def flight(received_ago_seconds: int) -> Inspection:
        row = InFlightRow("run", TRACE, "svc", 0, 1, 1, (STORE,), 1,
                          now - received_ago_seconds * 1_000_000_000)
        return Inspection("run", None, None, row, history)

    assert not execution_page._quiet(flight(60))
    assert execution_page._quiet(flight(IN_FLIGHT_QUIET_NANOS // 1_000_000_000 + 60))
    text = " ".join(verdict_sentences(history, build_waterfall([], None), quiet=True))
    assert "process may have died" in text and "refreshes itself until" not in text
    assert execution is not None  # (the scenario's owner, left out above on purpose)


@pytest.mark.slow
def test_a_node_without_a_span_is_not_said_to_have_not_run_when_spans_were_lost(
    make_server: MakeServer,
) -> None:
    server: Server = make_server()
    requests = variant("lost-nodes")
    node_spans = [s for s in spans_of(requests) if _span_type(s) == "node"]
    assert len(node_spans) > 2
    lost = {span.span_id for span in node_spans[:-1]}  # every node span but the last
    for request in requests:
        for scope_spans in (ss for rs in request.resource_spans for ss in rs.scope_spans):
            kept = [span for span in scope_spans.spans if span.span_id not in lost]
            del scope_spans.spans[:]
            scope_spans.spans.extend(kept)
        export_raw(server.grpc_target, request.SerializeToString())
    server.wait_replayed()
    run_id = run_id_of(requests)
    page = _text(_get(server, f"/executions/{run_id}").text)
    assert "nodes ran (as far as the spans received show)" in page
    assert "no span received" in page and "did not run" not in page
    # A field the lost steps wrote is in the recorded end state: not "in no state".
    end = server.get_json(f"/api/executions/{run_id}/timeline")["end"]
    field = "/" + next(iter(end))
    panel = _text(_get(server, f"/executions/{run_id}", path=field, step=0).text)
    assert "is in no state of this run" not in panel

    clean = make_server()
    send_scenario(clean.grpc_target, "a_linear")
    clean.wait_replayed()
    clean_page = _text(_get(clean, f"/executions/{manifest('a_linear')['outcome']['run_id']}").text)
    assert "as far as the spans received show" not in clean_page


def _span_type(span: trace_pb2.Span) -> str | None:
    return next(
        (kv.value.string_value for kv in span.attributes if kv.key == "junjo.span_type"), None
    )


def _run_in_flight(server: Server) -> tuple[dict[str, Any], tuple[bytes, list[tuple[str, str]]]]:
    """`l_split_batches` sent but for its last export: its run, in flight, and that export."""
    first, last = fixture_requests("l_split_batches")
    export_raw(server.grpc_target, *first)
    server.wait_replayed()
    (flying,) = server.get_json("/api/executions?verdict=in_flight")["executions"]
    return flying, last


def _age_spans(server: Server, nanos: int, *, producer_times_too: bool = False) -> None:
    """Restart the server with every stored span received `nanos` earlier (and, if
    asked, started and ended as if sent then).

    A fixture's spans carry the times of its capture, so "as if sent then" first
    moves them to the receiving clock (the last span ends when the last was
    received); moving them by `nanos` alone would make the test's outcome depend
    on the fixture's age.
    """
    server.stop()
    with duckdb.connect(str(server.db)) as db:
        producer_offset = 0
        if producer_times_too:
            row = db.execute(
                "SELECT max(end_unix_nano) - max(received_unix_nano) FROM spans").fetchone()
            assert row is not None and row[0] is not None
            producer_offset = int(row[0]) + nanos
        db.execute(
            "UPDATE spans SET received_unix_nano = received_unix_nano - $received,"
            " start_unix_nano = start_unix_nano - $produced,"
            " end_unix_nano = end_unix_nano - $produced",
            {"received": nanos, "produced": producer_offset},
        )
    server.start()


@pytest.mark.slow
def test_an_in_flight_run_with_no_activity_stops_refreshing_until_evidence_arrives(
    make_server: MakeServer,
) -> None:
    server: Server = make_server()
    flying, last = _run_in_flight(server)
    run = f"/executions/{flying['id']}"
    assert flying["no_activity_since"] is None and flying["last_activity_at"]
    assert 'hx-trigger="every' in _get(server, run).text  # still expecting its owner
    # As if the last span arrived an hour ago (the server's clock is what counts).
    _age_spans(server, 3600 * 1_000_000_000)
    (quiet,) = server.get_json("/api/executions?verdict=in_flight")["executions"]
    assert quiet["no_activity_since"] == quiet["last_activity_at"]
    assert quiet["status"] == "in_flight"  # a state of its own, not a failure
    listed = _get(server, "/").text
    section = listed[listed.index('<section class="in-flight"') :]
    section = section[: section.index("</section>")]
    assert 'class="badge status-quiet"' in section and "status-in_flight" not in section
    assert f'since <time datetime="{quiet["no_activity_since"]}"' in section
    page = _get(server, run).text
    assert "no activity" in _text(page) and "process may have died" in _text(page)
    assert "not a failure" in _text(page) and "error" not in _text(_header_of(page))
    assert 'hx-trigger="every' not in page and 'http-equiv="refresh"' not in page

    # Any span of its trace is evidence that it runs (a model call inside a node, say):
    # the run is in flight again, and its page refreshes itself again.
    now = time.time_ns()
    trace_id = bytes.fromhex(flying["trace_id"])
    export_raw(server.grpc_target, plain_request(
        trace_id, [new_span_id()], start_unix_nano=now - 1_000_000, end_unix_nano=now,
    ).SerializeToString())
    (again,) = server.get_json("/api/executions?verdict=in_flight")["executions"]
    assert again["no_activity_since"] is None
    assert again["last_activity_at"] > quiet["last_activity_at"]
    page = _get(server, run).text
    assert 'hx-trigger="every' in page and "status-quiet" not in page
    # And once the owner span arrives, the run is an execution like any other.
    export_raw(server.grpc_target, *last)
    server.wait_replayed()
    assert server.get_json("/api/executions?verdict=in_flight")["executions"] == []
    page = _get(server, run).text
    assert 'hx-trigger="every' not in page and "no activity" not in _text(page)


@pytest.mark.slow
def test_a_run_whose_process_died_days_ago_is_still_found_and_opens(
    make_server: MakeServer,
) -> None:
    # The list's in-flight section looks at the last day's spans only; a run whose
    # owner span never came is still reachable: its page, its id in the filter box,
    # its trace, and the list asked for an older `since`.
    server: Server = make_server()
    flying, _ = _run_in_flight(server)
    _age_spans(server, 3 * DAY_NANOS, producer_times_too=True)  # sent three days ago
    listed = server.get_json("/api/executions?verdict=in_flight")["executions"]
    assert listed == []  # the default list: the last day
    (week,) = server.get_json("/api/executions?verdict=in_flight&since=7d")["executions"]
    assert week["id"] == flying["id"] and week["no_activity_since"] is not None
    assert server.get_json("/api/executions?verdict=in_flight&since=2d")["executions"] == []
    (traced,) = server.get_json(
        f"/api/executions?verdict=in_flight&trace={flying['trace_id']}")["executions"]
    assert traced["id"] == flying["id"]
    page = _get(server, "/", since="7d").text
    assert flying["id"] in page[page.index('<section class="in-flight"'):]
    detail = server.get_json(f"/api/executions/{flying['id']}")
    assert detail["status"] == "in_flight" and detail["id"] == flying["id"]
    opened = _get(server, f"/executions/{flying['id']}")
    assert opened.status_code == 200 and "no activity" in _text(opened.text)
    found = httpx.get(server.url + "/", params={"where": flying["id"]},
                      follow_redirects=False, timeout=30)
    assert found.status_code in (302, 303)
    assert found.headers["location"].endswith(f"/executions/{flying['id']}")
    assert _get(server, "/executions/no-such-run").status_code == 404


def _header_of(page: str) -> str:
    start = page.index('<header class="x-header">')
    return page[start : page.index("</header>", start)]


def test_container_sizes_read_in_words_with_the_right_number() -> None:
    assert [keys_text(n) for n in (1, 3, 12_000)] == ["{1 key}", "{3 keys}", "{12,000 keys}"]
    assert (items_text(1), items_text(0)) == ("[1 item]", "[0 items]")


def test_an_empty_patch_says_from_the_revision_whether_anything_changed(
    make_server: MakeServer,
) -> None:
    # SCHEMA.md section 3: "[]" with the revision +1 changed a field kept out of
    # telemetry; "[]" with the revision unchanged was a no-op. The capture has two
    # of the first kind and one of the second.
    server: Server = make_server()
    send_scenario(server.grpc_target, "f_exclude_serializer")
    server.wait_replayed()
    (run,) = server.get_json("/api/executions")["executions"]
    timeline = server.get_json(f"/api/executions/{run['id']}/timeline")["transitions"]
    empty = [t["sequence"] for t in timeline if t["patch"] == []]
    said: Counter[str] = Counter()
    for sequence in empty:
        text = _text(_get(server, f"/executions/{run['id']}", step=sequence).text)
        said["hidden"] += "changed a field kept out of telemetry" in text
        said["no-op"] += "No change: a no-op update" in text
    assert said == {"hidden": 2, "no-op": 1}, (empty, said)
