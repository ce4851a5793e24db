"""The filter box's help and suggestions come from the paths stored runs really have.

Against a real server: two captured workflows (Linear, Loop) and a copy of
`a_linear` whose `title` key is hostile markup with quotes, which must come
back as text everywhere (page, datalist, JSON) and still filter. The
store-level tests check that only the newest runs are asked, on an in-memory
database with the store's own schema.
"""

from __future__ import annotations

import html
import json
import re
import urllib.parse
from collections.abc import Iterator
from typing import Any

import duckdb
import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from support.otlp_craft import spans_of, variant
from support.servers import Server, send_scenario
from test_studio_pages import listed_runs, run_id_of, send

from collector.index.fields import index_rows
from collector.index.query_ast import Path
from collector.replay.jsondoc import JsonValue, escape_token
from collector.store import field_catalog
from collector.store.filters import insert_field_rows
from collector.store.migrations import apply_migrations
from studio.render.suggestions import CACHED_ANSWERS, TimedCache

# Markup, both quote kinds and a slash (an RFC 6901 separator, so `~1` in pointers).
HOSTILE_KEY = "<script>alert(\"k\")</script>'q"
HOSTILE_LABEL = json.dumps(HOSTILE_KEY)  # how the filter language writes that key


def with_hostile_key(requests: list[ExportTraceServiceRequest]) -> None:
    """Rename the state key `title` to HOSTILE_KEY in every state and patch."""
    pointer = json.dumps("/" + escape_token(HOSTILE_KEY))
    for span in spans_of(requests):
        for attributes in (span.attributes, *(event.attributes for event in span.events)):
            for item in attributes:
                text = item.value.string_value
                if '"title"' in text or '"/title"' in text:
                    text = text.replace('"/title"', pointer)
                    item.value.string_value = text.replace('"title"', HOSTILE_LABEL)


def hostile_run(server: Server) -> str:
    requests = variant("hostile-key")
    with_hostile_key(requests)
    send(server, requests)
    return run_id_of(requests)


class Suggesting:
    def __init__(self, server: Server, hostile: str) -> None:
        self.server = server
        self.hostile = hostile

    def get(self, route: str, **params: str) -> httpx.Response:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        return httpx.get(self.server.url + route + query, timeout=30)

    def json(self, route: str, **params: str) -> Any:
        response = self.get(route, **params)
        assert response.status_code == 200, response.text
        return response.json()


def load_suggesting(server: Server) -> Suggesting:
    """Linear and Loop's captures, and the copy of Linear with a hostile key."""
    for scenario in ("a_linear", "b_graph_loop"):
        send_scenario(server.grpc_target, scenario)
    hostile = hostile_run(server)
    server.wait_replayed()
    return Suggesting(server, hostile)


@pytest.fixture(scope="module")
def suggesting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Suggesting]:
    server = Server.on_free_ports(
        tmp_path_factory.mktemp("suggestions") / "statetrail.duckdb"
    ).start()
    try:
        yield load_suggesting(server)
    finally:
        server.stop()


def test_field_paths_are_the_stored_runs_paths_narrowed_to_a_workflow(
    suggesting: Suggesting,
) -> None:
    everything = suggesting.json("/api/fields")
    paths = {p["path"]: p for p in everything["paths"]}
    assert everything["sampled_runs"] == 3 and not everything["truncated"]
    # Linear's fields and Loop's, each with the kinds it held and how many runs had it.
    assert paths["profile.address.city"] == {
        "path": "profile.address.city", "pointer": "/profile/address/city",
        "kinds": ["string"], "runs": 2, "workflows": ["Linear Workflow"],
    }
    assert paths['metadata."extra/key~"']["pointer"] == "/metadata/extra~1key~0"
    assert {"title", "verdict", HOSTILE_LABEL} <= set(paths)
    assert "" not in {p["pointer"] for p in everything["paths"]}  # not the whole state

    assert paths["verdict"]["workflows"] == ["Loop Workflow"]
    loop = suggesting.json("/api/fields", workflow="Loop Workflow")
    assert loop["sampled_runs"] == 1 and loop["workflow"] == "Loop Workflow"
    assert "verdict" in {p["path"] for p in loop["paths"]}
    assert "title" not in {p["path"] for p in loop["paths"]}
    nobody = suggesting.json("/api/fields", workflow="No Such Workflow")
    assert nobody["sampled_runs"] == 0 and nobody["paths"] == [] and nobody["example"] is None


def test_field_values_are_the_commonest_end_values_as_filter_literals(
    suggesting: Suggesting,
) -> None:
    title = suggesting.json("/api/fields/values", path="title")
    assert title["values"] == [{"literal": '"finished"', "kind": "string", "runs": 1}]
    # A pointer names the same field; numbers read as the language writes them.
    ratio = suggesting.json("/api/fields/values", path="/ratio")
    assert ratio["path"] == "ratio" and ratio["values"][0]["literal"] == "0.75"
    done = suggesting.json("/api/fields/values", path="done", workflow="Linear Workflow")
    assert done["values"] == [{"literal": "true", "kind": "bool", "runs": 2}]
    # Only Loop's run is asked: it has no `done`.
    assert suggesting.json(
        "/api/fields/values", path="done", workflow="Loop Workflow"
    )["values"] == []

    for bad in ("", "a..b", "/a/~2"):
        response = suggesting.get("/api/fields/values", path=bad)
        assert response.status_code == 400, bad
        assert response.json()["parameter"] == "path"


def test_each_suggested_value_filters_to_the_runs_that_ended_with_it(
    suggesting: Suggesting,
) -> None:
    for path in ("done", "title", "count", HOSTILE_LABEL):
        for value in suggesting.json("/api/fields/values", path=path)["values"]:
            where = f"{path} = {value['literal']}"
            listed = suggesting.json("/api/executions", where=where)["executions"]
            assert len(listed) == value["runs"], where


def test_filter_help_names_real_paths_and_a_working_example(suggesting: Suggesting) -> None:
    page = suggesting.get("/").text
    help_text = _text(_between(page, '<p id="where-help"', "</p>"))
    assert "done = true" in help_text  # a flag that runs ended with, as the example
    fields = _text(_between(page, '<p id="where-fields"', "</p>"))
    assert "Fields of the newest 3 runs:" in fields and "profile.address.city" in fields
    # Array elements as one `[*]` path each, so they do not crowd out named fields.
    assert "items[0]" not in fields
    options = _options(page)
    assert {"title", "profile.address.city", "items[*]", HOSTILE_LABEL} <= set(options)
    assert "items[0]" not in options
    # Of two workflows' runs, each path says whose it is.
    assert '<option value="verdict" label="string · Loop Workflow"' in page
    assert '<option value="title" label="string · Linear Workflow"' in page
    assert 'list="where-paths"' in page

    # Narrowed by the workflow facet: the help and the suggestions are Loop's.
    loop = suggesting.get("/", workflow="Loop Workflow").text
    assert "of <em>Loop Workflow</em>" in loop
    assert "title" not in _options(loop) and "verdict" in _options(loop)
    # The htmx partial carries them out-of-band, so a facet click updates the box too.
    partial = httpx.get(
        suggesting.server.url + "/?workflow=Loop+Workflow",
        headers={"HX-Request": "true", "HX-Target": "results"}, timeout=30,
    ).text
    oob = _between(partial, '<div id="filter-help" hx-swap-oob="true">', "</datalist>")
    assert "verdict" in _options(oob) and "title" not in _options(oob)
    # A filter the user must fix keeps its help.
    bad = suggesting.get("/", where="done ==")
    assert bad.status_code == 400 and "done = true" in _text(bad.text)


def test_hostile_paths_are_text_in_the_help_the_datalist_and_json(
    suggesting: Suggesting,
) -> None:
    page = suggesting.get("/").text
    assert HOSTILE_KEY not in page and "<script>alert" not in page
    assert HOSTILE_LABEL in _options(page)  # the whole key, unescaped by the browser
    assert re.search(r"<script>(?!</script>)", page) is None
    answer = suggesting.get("/api/fields")
    assert answer.headers["content-type"].startswith("application/json")
    assert HOSTILE_LABEL in {p["path"] for p in answer.json()["paths"]}
    values = suggesting.json("/api/fields/values", path=HOSTILE_LABEL)
    assert values["pointer"] == "/" + escape_token(HOSTILE_KEY)
    where = f'{HOSTILE_LABEL} = "finished"'
    assert listed_runs(suggesting.get("/", where=where).text) == [suggesting.hostile]


def test_only_the_newest_runs_are_asked_for_paths_and_values() -> None:
    connection = duckdb.connect(":memory:")
    apply_migrations(connection)
    states: dict[str, JsonValue] = {f"run-{n}": {"n": n, f"only_{n}": True} for n in range(6)}
    for run_id in states:  # run keys follow arrival: run-5 is the newest
        connection.execute(
            "INSERT INTO executions (run_id, kind, name, service, trace_id, span_id,"
            " parent_span_id, status, status_message, start_unix_nano, end_unix_nano,"
            " received_unix_nano) VALUES (?, 'workflow', ?, 's', 't', 's', '', 'ok', '',"
            " 1, 2, 0)",
            [run_id, "Even" if int(run_id[-1]) % 2 == 0 else "Odd"],
        )
    insert_field_rows(
        connection, [index_rows(run_id, None, state, ()) for run_id, state in states.items()]
    )
    newest = field_catalog.sample_run_keys(connection, None, limit=2)
    paths = {p.pointer: p.runs for p in field_catalog.paths_in(connection, newest)}
    assert paths == {"/n": 2, "/only_5": 1, "/only_4": 1}
    evens = field_catalog.sample_run_keys(connection, "Even", limit=2)
    values = field_catalog.values_at(connection, Path(("n",)), evens)
    assert [v.value for v in values] == [("number", 2.0), ("number", 4.0)]
    # A limit of paths returns one more, so the caller can say some were left out.
    assert len(field_catalog.paths_in(connection, newest, limit=1)) == 2
    assert field_catalog.paths_in(connection, []) == []


def _between(text: str, start: str, end: str) -> str:
    begin = text.index(start)
    return text[begin : text.index(end, begin) + len(end)]


def _options(page: str) -> list[str]:
    datalist = _between(page, '<datalist id="where-paths"', "</datalist>")
    return [html.unescape(v) for v in re.findall(r'<option value="([^"]*)"', datalist)]


def _text(markup: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", markup)).split())


def test_suggestions_are_kept_a_while_then_asked_again() -> None:
    now = [0.0]
    asked: list[str] = []
    cache: TimedCache[str] = TimedCache(ttl=60.0, clock=lambda: now[0])

    def answer(key: str) -> str:
        def compute() -> str:
            asked.append(key)
            return key.upper()

        return cache.get(key, compute)

    assert answer("a") == "A" and answer("a") == "A"
    assert asked == ["a"]
    now[0] = 61.0  # expired: asked anew
    assert answer("a") == "A" and asked == ["a", "a"]
    for n in range(CACHED_ANSWERS + 1):  # the least recently used is dropped
        answer(f"k{n}")
    asked.clear()
    answer("k0")
    answer(f"k{CACHED_ANSWERS}")
    assert asked == ["k0"]
