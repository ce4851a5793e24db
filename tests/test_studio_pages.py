"""The studio's executions and compare pages, read as HTML from a real `statetrail serve`.

One module-scoped server holds every captured Junjo request plus two edited copies
of `a_linear` with fresh ids: one whose step 3 writes a different value (so it
diverges from the original at step 3) and one whose names and values are hostile
markup (which must come back escaped). Pages are read with httpx and checked for
what a person would see: rows, facet counts, the caret under a filter error,
links that keep every filter, and the security headers.
"""

from __future__ import annotations

import html
import json
import re
import urllib.parse
from collections.abc import Iterator
from html.parser import HTMLParser
from typing import Any

import httpx
import pytest
from markupsafe import escape
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from support.otlp_craft import new_span_id, new_trace_id, plain_request, spans_of, variant
from support.servers import (
    MakeServer,
    Server,
    export_raw,
    manifest,
    scenarios,
    send_scenario,
)

from collector.index.fields import MAX_ROWS
from collector.producers import junjo
from collector.replay.jsondoc import JsonValue
from studio.render.compare import MAX_DIFF_ENTRIES, bounded_diff
from studio.security import CONTENT_SECURITY_POLICY

HOSTILE = '</script><img src=x onerror=alert(1)><b>"x"</b>'
# Inside a JSON string in a patch, so no quotes or backslashes of its own.
HOSTILE_VALUE = "</title><script>alert(1)</script>"
EDITED_STEP = 3
EDITED_VALUE = "edited"


# --- building requests -------------------------------------------------------------


def edit_step(requests: list[ExportTraceServiceRequest], sequence: int, value: str) -> None:
    """Make the set_state event at `sequence` write `value` instead of what it wrote."""
    for span in spans_of(requests):
        for event in span.events:
            attributes = {a.key: a for a in event.attributes}
            if event.name == junjo.SET_STATE_EVENT and (
                attributes[junjo.SEQUENCE].value.int_value == sequence
            ):
                patch = json.loads(attributes[junjo.PATCH].value.string_value)
                patch[0]["value"] = value
                attributes[junjo.PATCH].value.string_value = json.dumps(patch)
                return
    raise LookupError(sequence)


def make_hostile(requests: list[ExportTraceServiceRequest]) -> None:
    """Hostile service, workflow and correlation names, and a hostile title in the states."""
    for request in requests:
        for resource_spans in request.resource_spans:
            for item in resource_spans.resource.attributes:
                if item.key == "service.name":
                    item.value.string_value = HOSTILE
    for span in spans_of(requests):
        if span.name == "Linear Workflow":
            span.name = HOSTILE
            for key in ("junjo.correlation.type", "junjo.correlation.id"):
                span.attributes.add(key=key).value.string_value = HOSTILE
        for attributes in (span.attributes, *(event.attributes for event in span.events)):
            for item in attributes:
                if "finished" in item.value.string_value:
                    text = item.value.string_value.replace("finished", HOSTILE_VALUE)
                    item.value.string_value = text


def without_workflow_span(requests: list[ExportTraceServiceRequest]) -> str:
    """Drop the workflow's own span, leaving its run in flight; return its run id."""
    run_id = run_id_of(requests)
    for request in requests:
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                kept = [span for span in scope_spans.spans if not _is_workflow(span)]
                del scope_spans.spans[:]
                scope_spans.spans.extend(kept)
    return run_id


def _is_workflow(span: Span) -> bool:
    return any(
        a.key == junjo.SPAN_TYPE and a.value.string_value == "workflow" for a in span.attributes
    )


def run_id_of(requests: list[ExportTraceServiceRequest]) -> str:
    for span in spans_of(requests):
        if _is_workflow(span):
            attributes: dict[str, AnyValue] = {a.key: a.value for a in span.attributes}
            return attributes[junjo.RUNTIME_ID].string_value
    raise LookupError("no workflow span")


def send(server: Server, requests: list[ExportTraceServiceRequest]) -> None:
    for request in requests:
        assert export_raw(server.grpc_target, request.SerializeToString()) == b""


# --- the server ----------------------------------------------------------------------


class Loaded:
    """The module's server and the run ids of the edited copies."""

    def __init__(self, server: Server, edited: str, hostile: str, in_flight: str) -> None:
        self.server = server
        self.edited = edited
        self.hostile = hostile
        self.in_flight = in_flight

    @property
    def linear(self) -> set[str]:
        """Every run of "Linear Workflow": the two captures and the edited copy."""
        return linear_run_ids() | {self.edited}

    def get(self, path: str, **params: str) -> httpx.Response:
        return httpx.get(self.server.url + path, params=params, timeout=30)

    def executions(self, **params: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.get(
            "/api/executions", limit="500", **params
        ).json()["executions"]
        return found


def load(server: Server) -> Loaded:
    """Every capture, then the edited, hostile and in-flight copies of `a_linear`."""
    for scenario in scenarios():
        send_scenario(server.grpc_target, scenario)
    edited = variant("edited")
    edit_step(edited, EDITED_STEP, EDITED_VALUE)
    hostile = variant("hostile")
    make_hostile(hostile)
    in_flight = variant("in-flight")
    in_flight_run = without_workflow_span(in_flight)
    for requests in (edited, hostile, in_flight):
        send(server, requests)
    server.wait_replayed()
    return Loaded(server, run_id_of(edited), run_id_of(hostile), in_flight_run)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    server = Server.on_free_ports(tmp_path_factory.mktemp("pages") / "statetrail.duckdb").start()
    try:
        yield load(server)
    finally:
        server.stop()


def linear_run_ids() -> set[str]:
    return {manifest(s)["outcome"]["run_id"] for s in ("a_linear", "k_gzip_compression")}


# --- reading pages -------------------------------------------------------------------

_ROW_RUN = re.compile(r'<input type="checkbox" name="run" value="([^"]+)"')
_FACET = re.compile(
    r'<span class="facet-value"[^>]*>([^<]*)</span>\s*<span class="facet-count">([^<]*)</span>'
)


def listed_runs(page: str) -> list[str]:
    """Run ids of the table's rows, in order (each row has a compare checkbox)."""
    return [html.unescape(run) for run in _ROW_RUN.findall(page)]


def facet_counts(page: str, name: str) -> dict[str, str]:
    section = re.search(
        rf'<section class="facet">\s*<h3>{name}</h3>(.*?)</section>', page, re.DOTALL
    )
    assert section is not None, name
    return {html.unescape(v): c for v, c in _FACET.findall(section.group(1))}


def facet_href(page: str, name: str, value: str) -> str:
    section = re.search(
        rf'<section class="facet">\s*<h3>{name}</h3>(.*?)</section>', page, re.DOTALL
    )
    assert section is not None, name
    for href, label in re.findall(
        r'<a href="([^"]+)".*?<span class="facet-value"[^>]*>([^<]*)</span>', section.group(1),
        re.DOTALL,
    ):
        if html.unescape(label) == value:
            return html.unescape(href)
    raise LookupError(value)


def older_href(page: str) -> str | None:
    found = re.search(r'<a href="([^"]+)"[^>]*>Older →</a>', page)
    return html.unescape(found.group(1)) if found else None


# --- the executions page -------------------------------------------------------------


def test_executions_page_filter_by_field_value_lists_matching_runs(loaded: Loaded) -> None:
    response = loaded.get("/", where='title = "finished"')

    assert response.status_code == 200
    assert set(listed_runs(response.text)) == loaded.linear
    assert 'value="title = &#34;finished&#34;"' in response.text  # the box keeps the query


def test_executions_page_filter_shows_each_runs_value_linked_to_its_provenance(
    loaded: Loaded,
) -> None:
    page = loaded.get("/", where='title = "finished" and count exists').text
    header = page[page.index("<thead>", page.index('class="grid executions"')) :]
    header = header[: header.index("</thead>")]
    assert re.findall(r'<th class="value-col"[^>]*><code>([^<]+)</code>', header) == [
        "title", "count",
    ]
    runs = listed_runs(page)
    assert set(runs) == loaded.linear
    for run_id in runs:
        state = loaded.server.get_json(f"/api/executions/{run_id}/state")["state"]
        row = page[page.index(f'value="{run_id}"') :]
        row = row[: row.index("</tr>")]
        cells = re.findall(r'<a class="field-value t-(\w+)" href="([^"]+)"[^>]*>([^<]*)</a>', row)
        assert [(kind, html.unescape(text)) for kind, _, text in cells] == [
            ("string", '"finished"'), ("number", str(state["count"])),
        ]
        assert html.unescape(cells[1][1]) == f"/executions/{run_id}?path=/count#provenance"
        # The run's name and its id open the first filtered field's provenance.
        opens = f'href="/executions/{run_id}?path=/title#provenance"'
        assert f'<td class="workflow"><a {opens}>' in row
        assert f'<a class="id id-cut id-8" {opens} title="{run_id}">{run_id}</a>' in row


def test_executions_page_empty_filter_result_says_what_may_be_wrong(loaded: Loaded) -> None:
    misspelt = loaded.get("/", where='titel = "finished"', workflow="Linear Workflow").text
    assert "No executions match these filters." in misspelt
    hint = re.search(r'<p class="filter-hint">(.*?)</p>', misspelt, re.DOTALL)
    assert hint is not None and "No run stored has a field titel." in hint.group(1)
    suggestion = re.search(r'<a href="([^"]+)"[^>]*class="suggestion">title</a>', hint.group(1))
    assert suggestion is not None
    fixed_href = html.unescape(suggestion.group(1))
    assert "workflow=Linear+Workflow" in fixed_href  # it keeps the other filters
    fixed = httpx.get(loaded.server.url + fixed_href, timeout=30).text
    assert set(listed_runs(fixed)) == loaded.linear

    # The rest of a deeper path is kept, and a path written twice is not rewritten blindly.
    deeper = loaded.get("/", where="profile.adress.city exists").text
    assert re.search(r'class="suggestion">profile\.address\.city</a>', deeper)
    twice = html.unescape(loaded.get("/", where='titel = "titel" and titel exists').text)
    assert "Did you mean <code>title</code>?" in twice

    mistyped = loaded.get("/", where='count = "3"').text
    assert listed_runs(mistyped) == []
    assert "count holds number values in the runs stored, and the filter compares it " \
        "with string." in html.unescape(mistyped)
    # A filter that matches has no hints.
    assert "filter-hint" not in loaded.get("/", where='title = "finished"').text


def test_executions_page_filter_combines_with_facets_and_time(loaded: Loaded) -> None:
    everything = loaded.get("/", where="count exists").text
    linear_only = loaded.get("/", where="count exists", workflow="Linear Workflow").text
    future = loaded.get("/", where="count exists", since="2999-01-01T00:00:00Z").text

    assert loaded.linear <= set(listed_runs(everything))
    assert set(listed_runs(linear_only)) == loaded.linear
    assert listed_runs(future) == []
    assert "No executions match these filters." in future


def test_executions_page_bad_filter_is_400_with_caret_under_the_problem(loaded: Loaded) -> None:
    response = loaded.get("/", where='title == "x"')

    assert response.status_code == 400
    caret = re.search(r'<pre class="caret"[^>]*>(.*?)</pre>', response.text, re.DOTALL)
    assert caret is not None
    line, marker = html.unescape(caret.group(1)).split("\n")
    assert line == 'title == "x"'
    assert marker.index("^") == line.index("==")
    assert "use &#39;=&#39; for equality" in response.text
    assert 'value="title == &#34;x&#34;"' in response.text  # still there to be fixed


def test_executions_page_bad_time_is_400_naming_the_parameter(loaded: Loaded) -> None:
    response = loaded.get("/", since="yesterday")

    assert response.status_code == 400
    assert "<code>since</code>" in response.text
    assert "RFC 3339" in response.text


def test_executions_page_facets_count_the_filtered_runs(loaded: Loaded) -> None:
    rows = loaded.executions()
    page = loaded.get("/").text

    for name, key in (("workflow", "workflow"), ("status", "status"), ("kind", "kind")):
        expected: dict[str, int] = {}
        for row in rows:
            expected[row[key]] = expected.get(row[key], 0) + 1
        assert facet_counts(page, name) == {k: str(v) for k, v in expected.items()}, name
    errors_only = loaded.get("/", status="error").text
    # A facet that is on shows a remove mark instead of a count.
    assert facet_counts(errors_only, "status") == {"error": "\N{MULTIPLICATION SIGN}"}
    assert set(facet_counts(errors_only, "workflow")) == {
        row["workflow"] for row in rows if row["status"] == "error"
    }


def test_executions_page_facet_links_add_and_remove_filters(loaded: Loaded) -> None:
    start = loaded.get("/", where="count exists").text

    adding = facet_href(start, "workflow", "Linear Workflow")
    filtered = httpx.get(loaded.server.url + adding, timeout=30).text
    removing = facet_href(filtered, "workflow", "Linear Workflow")

    assert urllib.parse.parse_qs(urllib.parse.urlsplit(adding).query) == {
        "where": ["count exists"], "workflow": ["Linear Workflow"],
    }
    assert set(listed_runs(filtered)) == loaded.linear
    assert urllib.parse.parse_qs(urllib.parse.urlsplit(removing).query) == {
        "where": ["count exists"],
    }


def test_executions_page_older_links_walk_every_run_once_keeping_filters(
    loaded: Loaded,
) -> None:
    expected = [row["id"] for row in loaded.executions(kind="workflow")]
    seen: list[str] = []
    href: str | None = "/?kind=workflow&limit=4"
    pages = 0
    while href is not None:
        page = httpx.get(loaded.server.url + href, timeout=30).text
        seen.extend(listed_runs(page))
        # Each page says how many match in all, and how many it shows.
        count = re.search(r'<span class="count-text">([^<]*)</span>', page)
        assert count is not None
        shown = len(listed_runs(page))
        which = "newest" if pages == 0 else "more"
        said = count.group(1).strip()
        assert said == f"{len(expected)} executions match · showing {shown} {which}"
        href = older_href(page)
        pages += 1
        if href is not None:
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(href).query)
            assert query["kind"] == ["workflow"] and query["limit"] == ["4"]
            assert "cursor" in query

    assert seen == expected
    assert pages == -(-len(expected) // 4)


def test_executions_page_columns_sort_and_say_how(loaded: Loaded) -> None:
    def headers(page: str) -> dict[str, tuple[str | None, str]]:
        found = re.findall(r'<th([^>]*)><a href="([^"]+)"[^>]*class="sort[^"]*">(\w+)', page)
        answer: dict[str, tuple[str | None, str]] = {}
        for attributes, href, label in found:
            order = re.search(r'aria-sort="(\w+)"', attributes)
            answer[label] = (order.group(1) if order else None, html.unescape(href))
        return answer

    default = loaded.get("/").text
    assert headers(default)["Started"] == ("descending", "/?sort=started")
    assert headers(default)["Duration"] == (None, "/?sort=-duration")
    longest = loaded.get("/", sort="-duration", kind="workflow").text
    assert headers(longest)["Duration"] == ("descending", "/?kind=workflow&sort=duration")
    # The default order needs no parameter.
    assert headers(longest)["Started"] == (None, "/?kind=workflow")
    api = loaded.executions(sort="-duration", kind="workflow")
    assert listed_runs(longest) == [e["id"] for e in api][:50]
    assert "longest first" in longest
    oldest = loaded.get("/", sort="started").text
    assert listed_runs(oldest) == [e["id"] for e in loaded.executions(sort="started")][:50]
    bad = loaded.get("/", sort="name")
    assert bad.status_code == 400
    assert "<code>sort</code>:</strong> must be one of started or -started" in bad.text


def test_executions_page_htmx_request_gets_the_results_partial(loaded: Loaded) -> None:
    response = httpx.get(
        loaded.server.url + "/",
        params={"status": "error"},
        headers={"HX-Request": "true", "HX-Target": "results"},
        timeout=30,
    )

    assert response.status_code == 200
    assert "<html" not in response.text
    assert 'hx-swap-oob="true"' in response.text  # the form's hidden filters follow along
    assert len(listed_runs(response.text)) == 2
    assert "HX-Request" in response.headers["vary"]


def test_executions_page_links_its_json_twin_with_the_same_filters(loaded: Loaded) -> None:
    page = loaded.get("/", where='title = "finished"', status="ok").text

    found = re.search(r'<a class="json-link" href="([^"]+)"', page)
    assert found is not None
    twin = httpx.get(loaded.server.url + html.unescape(found.group(1)), timeout=30).json()
    assert {row["id"] for row in twin["executions"]} == loaded.linear


def test_executions_page_lists_in_flight_runs_first_with_links(loaded: Loaded) -> None:
    page = loaded.get("/").text
    section = re.search(r'<section class="in-flight".*?</section>', page, re.DOTALL)

    assert section is not None
    assert f'href="/executions/{loaded.in_flight}"' in section.group(0)
    assert ">quiet</span>" not in section.group(0)  # its spans arrived just now
    assert page.index("in-flight") < page.index('class="grid executions"')
    assert loaded.in_flight not in listed_runs(page)
    older = loaded.get("/", limit="2").text
    next_page = httpx.get(loaded.server.url + (older_href(older) or ""), timeout=30).text
    assert '<section class="in-flight"' not in next_page  # only above the newest runs


def test_the_in_flight_list_keeps_to_the_filters_a_run_in_flight_can_meet(
    loaded: Loaded,
) -> None:
    flight = loaded.server.get_json(f"/api/executions/{loaded.in_flight}")
    service, trace, (store,) = flight["service"], flight["trace_id"], flight["store_ids"]

    def listed(**params: str) -> bool:
        page = loaded.get("/", **params).text
        section = re.search(r'<section class="in-flight".*?</section>', page, re.DOTALL)
        on_page = section is not None and f"/executions/{loaded.in_flight}" in section.group(0)
        api = loaded.server.get_json(
            "/api/executions?" + urllib.parse.urlencode({"verdict": "in_flight", **params})
        )["executions"]
        in_api = loaded.in_flight in {row["id"] for row in api}
        assert on_page == in_api, params
        return on_page

    # What its nodes' spans tell: service, trace, store, start.
    assert listed(service=service) and listed(trace=trace) and listed(store=store)
    started = flight["started_at"]  # the capture's own time: long past
    assert listed(since=started) and listed(until="2999-01-01T00:00:00Z")
    assert not listed(service="another-service")
    assert not listed(trace="0" * 31 + "1")
    assert not listed(store="another-store")
    assert not listed(since="24h") and not listed(until=started)
    # What it does not have until its owner span arrives: no run in flight matches.
    assert not listed(where='title = "finished"')
    assert not listed(workflow="Linear Workflow")
    assert not listed(status="ok")


def test_executions_page_empty_database_explains_how_to_send_telemetry(
    make_server: MakeServer,
) -> None:
    server: Server = make_server()
    page = httpx.get(server.url + "/", timeout=30).text

    assert "No executions yet" in page
    assert f"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:{server.grpc_port}" in page
    assert "JunjoOtelExporter" in page


# --- compare -------------------------------------------------------------------------


def test_compare_json_identical_runs_of_a_workflow_do_not_diverge(loaded: Loaded) -> None:
    a, b = sorted(linear_run_ids())
    found = loaded.get("/api/compare", a=a, b=b).json()

    assert found["divergence"] is None
    assert found["compared_steps"] == 14
    assert found["final_diff"] == []
    assert (found["a"]["workflow"], found["b"]["workflow"]) == ("Linear Workflow",) * 2


def test_compare_json_finds_the_first_divergence(loaded: Loaded) -> None:
    original = manifest("a_linear")["outcome"]["run_id"]
    found = loaded.get("/api/compare", a=original, b=loaded.edited).json()

    divergence = found["divergence"]
    assert divergence["position"] == EDITED_STEP
    assert divergence["a"]["action"] == divergence["b"]["action"] == "append_item"
    assert divergence["a"]["changed_paths"] == ["/items/1"]
    assert divergence["differences"] == [
        {"path": "/items/1", "a": "laser", "a_present": True,
         "b": EDITED_VALUE, "b_present": True},
    ]


def test_compare_diff_is_bounded_and_says_when_it_was_cut() -> None:
    before: dict[str, JsonValue] = {f"k{n:04}": n for n in range(MAX_DIFF_ENTRIES + 100)}
    after: dict[str, JsonValue] = {key: "changed" for key in before}

    kept = list(before)[:MAX_DIFF_ENTRIES]

    cut, truncated = bounded_diff(before, after)
    whole, exactly_at_the_bound = bounded_diff(
        {key: before[key] for key in kept}, {key: after[key] for key in kept}
    )

    assert truncated and len(cut) == MAX_DIFF_ENTRIES
    assert [entry.pointer for entry in cut[:2]] == ["/k0000", "/k0001"]
    assert not exactly_at_the_bound and len(whole) == MAX_DIFF_ENTRIES


def test_compare_json_different_workflows_diverge_at_the_start(loaded: Loaded) -> None:
    rows = {row["workflow"]: row["id"] for row in loaded.executions()}
    found = loaded.get(
        "/api/compare", a=rows["Loop Workflow"], b=rows["Failing Workflow"]
    ).json()

    assert found["divergence"]["position"] == 0
    assert found["b"]["status"] == "error" and found["b"]["error"]
    assert found["final_diff"]


def test_compare_page_from_two_ticked_rows_shows_the_divergence(loaded: Loaded) -> None:
    original = manifest("a_linear")["outcome"]["run_id"]
    response = httpx.get(
        loaded.server.url + "/compare",
        params=[("run", original), ("run", loaded.edited)],
        timeout=30,
    )

    assert response.status_code == 200
    assert "step 3</strong>" in response.text
    # The path may wrap after its separator (<wbr>), never inside a name.
    assert "<code class=\"path\">/items/<wbr>1</code>" in response.text
    assert "&#34;edited&#34;" in response.text


def test_compare_page_and_json_reject_missing_or_unknown_runs(loaded: Loaded) -> None:
    original = manifest("a_linear")["outcome"]["run_id"]

    assert loaded.get("/compare").status_code == 200  # the picker
    assert loaded.get("/compare", run=original).status_code == 400
    assert loaded.get("/compare", a=original, b="nope").status_code == 404
    assert loaded.get("/api/compare", a=original).json()["parameter"] == "b"
    assert loaded.get("/api/compare", a="nope", b=original).status_code == 404
    both = loaded.get("/api/compare", a="nope", b="nada")
    assert both.status_code == 404 and "'nope' or 'nada'" in both.json()["error"]
    itself = loaded.get("/compare", a=original, b=original)
    assert itself.status_code == 200 and "Both sides are the same run" in itself.text


# --- safety --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/", "/compare", "/api/executions", "/static/app.css", "/healthz"]
)
def test_studio_responses_carry_security_headers(loaded: Loaded, path: str) -> None:
    response = loaded.get(path)

    assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "same-origin"


class _Markup(HTMLParser):
    """Collects what a CSP without 'unsafe-inline' would block: inline code and styles."""

    def __init__(self) -> None:
        super().__init__()
        self.inline: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = {name for name, _ in attrs}
        if (tag == "script" and "src" not in names) or tag == "style":
            self.inline.append(f"<{tag}>")
        self.inline.extend(name for name in names if name == "style" or name.startswith("on"))
        self.inline.extend(
            f"{name}={value}" for name, value in attrs
            if value and value.strip().lower().startswith("javascript:")
        )


def test_studio_pages_have_no_inline_script_style_or_handlers(loaded: Loaded) -> None:
    original = manifest("a_linear")["outcome"]["run_id"]
    for response in (
        loaded.get("/"),
        loaded.get("/", where="title =="),
        loaded.get("/compare", a=original, b=loaded.hostile),
    ):
        markup = _Markup()
        markup.feed(response.text)
        assert markup.inline == [], response.url


def test_executions_page_escapes_hostile_telemetry(loaded: Loaded) -> None:
    page = loaded.get("/", where=f'title = "{HOSTILE_VALUE}"').text

    assert listed_runs(page) == [loaded.hostile]
    assert HOSTILE not in page and HOSTILE_VALUE not in page
    assert str(escape(HOSTILE)) in page  # the workflow and service names, as text
    assert "<img" not in page and "<b>" not in page


def test_a_hostile_correlation_id_is_text_and_filters_exactly(loaded: Loaded) -> None:
    listed = loaded.get("/", correlation=HOSTILE).text
    assert listed_runs(listed) == [loaded.hostile]
    assert HOSTILE not in listed and "<img" not in listed
    assert "correlation=" + urllib.parse.quote_plus(HOSTILE) in html.unescape(listed)
    page = loaded.get(f"/executions/{loaded.hostile}").text
    assert HOSTILE not in page and "<img" not in page
    assert str(escape(HOSTILE)) in page


def test_compare_page_escapes_hostile_state_values(loaded: Loaded) -> None:
    original = manifest("a_linear")["outcome"]["run_id"]
    page = loaded.get("/compare", a=original, b=loaded.hostile).text

    assert HOSTILE_VALUE not in page
    assert str(escape(json.dumps(HOSTILE_VALUE))) in page
    assert "<img" not in page


def test_a_run_or_trace_id_typed_as_a_filter_goes_to_it(loaded: Loaded) -> None:
    # Not a filter expression, so it is looked up as an id (Jaeger's trace box).
    run = loaded.executions(workflow="Loop Workflow")[0]
    to_run = loaded.get("/", where=f"  {run['id']} ")
    assert to_run.status_code == 303
    assert to_run.headers["location"] == f"/executions/{run['id']}"
    to_trace = loaded.get("/", where=run["trace_id"].upper())
    assert to_trace.status_code == 303
    assert to_trace.headers["location"] == f"/?trace={run['trace_id']}"
    # htmx would put a redirected page inside #results: it is told to navigate.
    swapped = httpx.get(
        loaded.server.url + "/", params={"where": run["id"]},
        headers={"HX-Request": "true", "HX-Target": "results"}, timeout=30,
    )  # fmt: skip
    assert swapped.status_code == 200
    assert swapped.headers["hx-redirect"] == to_run.headers["location"]
    in_flight = loaded.get("/", where=loaded.in_flight)
    assert in_flight.headers["location"] == f"/executions/{loaded.in_flight}"
    # The list cuts ids short with CSS only: selecting one copies all of it...
    # (the id opens the run, as the workflow name does)...
    link = f'<a class="id id-cut id-8" href="/executions/{run["id"]}" title="{run["id"]}">'
    assert f"{link}{run['id']}</a>" in loaded.get("/").text
    # ...and the start of one run's id opens that run; too short, it is
    # searched for (tests/test_search_server.py).
    others = [e["id"] for e in loaded.executions() if e["id"] != run["id"]]
    prefix = next(
        run["id"][:n] for n in range(8, 22) if not any(o.startswith(run["id"][:n]) for o in others)
    )
    assert loaded.get("/", where=prefix).headers["location"] == f"/executions/{run['id']}"
    searched = loaded.get("/", where=run["id"][:5])
    assert searched.status_code == 200 and f'href="/executions/{run["id"]}"' in searched.text
    # An id nothing has is a search that finds nothing.
    unknown = loaded.get("/", where="0" * 32)
    assert unknown.status_code == 200 and "No executions match" in unknown.text


def test_executions_page_escapes_a_hostile_filter(loaded: Loaded) -> None:
    response = loaded.get("/", where="<script>alert(1)</script>")

    assert response.status_code == 400
    assert "<script>alert" not in response.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in response.text


@pytest.mark.parametrize("run_id", [
    "//evil.example/x",
    "\\\\evil.example\r\nSet-Cookie: a=b",
    # Read as run "x"'s provenance panel and span page, when the "/" was only %2F.
    "x/provenance",
    "x/spans/0123456789abcdef",
    # Browsers drop a "." or ".." segment, %2E%2E included.
    "..",
    ".",
    "a/../b",
    # The encoding's own escape, as text.
    "tilde~7E~41 ~",
])  # fmt: skip
def test_a_hostile_run_id_typed_as_a_filter_stays_on_this_site_and_opens_its_run(
    make_server: MakeServer, run_id: str
) -> None:
    server: Server = make_server()
    request = plain_request(new_trace_id(), [new_span_id()], start_unix_nano=1, end_unix_nano=2)
    span = request.resource_spans[0].scope_spans[0].spans[0]
    for key, value in ((junjo.SPAN_TYPE, "workflow"), (junjo.RUNTIME_ID, run_id)):
        span.attributes.add(key=key).value.string_value = value
    assert export_raw(server.grpc_target, request.SerializeToString()) == b""
    server.wait_replayed()
    reply = httpx.get(server.url + "/", params={"where": run_id}, timeout=30)
    assert reply.status_code == 303
    location = reply.headers["location"]
    assert "set-cookie" not in reply.headers
    # One segment of the plainest characters: nothing a server or browser rewrites.
    segment = location.removeprefix("/executions/")
    assert re.fullmatch(r"[A-Za-z0-9_:~-]+", segment), location
    # Its page and its JSON, as a browser would resolve the address.
    page = httpx.get(server.url + location, timeout=30)
    assert page.status_code == 200 and "Execution not found" not in page.text
    assert httpx.get(server.url + "/api" + location, timeout=30).json()["id"] == run_id
    # An address typed with the id percent-encoded finds it too, unless a route
    # suffix or a dot segment gets in the way (then the studio's address is the one).
    typed = "/api/executions/" + urllib.parse.quote(run_id, safe="")
    ambiguous = ("/provenance", "/spans/", "~")
    if run_id not in (".", "..") and not any(part in run_id for part in ambiguous):
        assert httpx.get(server.url + typed, timeout=30).json()["id"] == run_id


def _with_a_huge_list(requests: list[ExportTraceServiceRequest], size: int) -> None:
    """Add a list of `size` numbers to the run's start and end states (no patch touches it)."""
    for span in spans_of(requests):
        for item in span.attributes:
            if item.key in (junjo.WORKFLOW_STATE_START, junjo.WORKFLOW_STATE_END):
                state = json.loads(item.value.string_value)
                state["big"] = list(range(size))
                item.value.string_value = json.dumps(state)


def test_a_run_too_large_to_index_whole_is_flagged_where_filters_cannot_be_trusted(
    make_server: MakeServer,
) -> None:
    server = make_server()
    huge = variant("huge")
    _with_a_huge_list(huge, MAX_ROWS + 10)
    send(server, huge)
    send(server, variant("small"))
    server.wait_replayed()
    huge_id, small_id = run_id_of(huge), run_id_of(variant("small"))

    listed = {e["id"]: e for e in server.get_json("/api/executions")["executions"]}
    assert listed[huge_id]["index_truncated"] and not listed[small_id]["index_truncated"]
    # The end state's tail is beyond the cap, so a filter on it cannot see it...
    page = httpx.get(server.url + "/", params={"where": f"big[{MAX_ROWS + 9}] exists"}).text
    assert listed_runs(page) == []
    # ...and the list says which runs it cannot answer for, and marks them.
    notice = re.search(r'<p class="index-notice"[^>]*>(.*?)</p>', page, re.DOTALL)
    assert notice is not None
    said = " ".join(notice.group(1).split())
    assert "1 run in scope has a state too large to index whole" in said
    everything = httpx.get(server.url + "/", params={"where": "title exists"}).text
    row = everything[everything.index(f'value="{huge_id}"') :]
    assert "partly indexed" in row[: row.index("</tr>")]
    other = everything[everything.index(f'value="{small_id}"') :]
    assert "partly indexed" not in other[: other.index("</tr>")]
    # No field filter, no notice: nothing is being answered from the index.
    assert "index-notice" not in httpx.get(server.url + "/").text
    # The run's page says its filters see only part of it.
    assert "see part of this run" in httpx.get(f"{server.url}/executions/{huge_id}").text
    assert "see part of this run" not in httpx.get(f"{server.url}/executions/{small_id}").text


def test_execution_breadcrumb_leads_back_to_the_list_as_it_was_left(loaded: Loaded) -> None:
    # The list remembers its query (a cookie: no JavaScript, no Referer); a run's
    # breadcrumb leads back to it. A whole-list view or a bad filter forgets it.
    run_id = next(iter(loaded.linear))

    def crumb(client: httpx.Client) -> str:
        page = client.get(f"/executions/{run_id}", params={"step": "1"}).text
        nav = page[page.index('class="x-crumbs"') :]
        found = re.search(
            r'<a href="([^"]*)"( title="([^"]*)")? data-list-return>Executions</a>', nav
        )
        assert found is not None
        return html.unescape(found.group(1)) + "|" + html.unescape(found.group(3) or "")

    with httpx.Client(base_url=loaded.server.url, timeout=30) as client:
        assert crumb(client) == "/|"
        client.get("/", params={"where": 'title = "finished"', "status": "ok"})
        assert crumb(client) == (
            "/?where=title+%3D+%22finished%22&status=ok|Back to the list as you left it:"
            ' where: title = "finished"; status: ok'
        )
        assert client.get("/", params={"where": "title ="}).status_code == 400
        assert crumb(client).startswith("/?where=title+%3D+%22finished%22&status=ok|")
        client.get("/")
        assert crumb(client) == "/|"
    # Whatever the cookie holds, the way back is a page of the list, escaped.
    hostile = {"statetrail_list": 'x=" onmouseover="alert(1)&//evil.example=1'}
    with httpx.Client(base_url=loaded.server.url, timeout=30, cookies=hostile) as client:
        escaped = "/?x=%22+onmouseover%3D%22alert%281%29&%2F%2Fevil.example=1|"
        assert crumb(client).startswith(escaped)
