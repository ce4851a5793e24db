"""`[*]` and `[-1]` filters end to end: a real server, runs sent over OTLP, the JSON API.

Data: copies of the `a_linear` capture whose `items` list (`seed`, then `laser`,
`coffee` and `horse` appended one by one, the first removed, the last moved to
the front) holds objects instead of strings, once as `items` of `{"sku": ...}`
and once as `messages` of `{"role": ...}`; and `a_linear` itself, whose items
are strings.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from support.otlp_craft import spans_of, variant
from support.servers import Server, send_scenario
from test_studio_pages import run_id_of, send

_WORDS = ("seed", "laser", "coffee", "horse")
_ROLES = {"seed": "system", "laser": "tool", "coffee": "assistant", "horse": "user"}


def with_items_as(
    requests: list[ExportTraceServiceRequest], element: dict[str, dict[str, str]], key: str
) -> None:
    """Each item word becomes `element[word]` in every state and patch; `items` becomes `key`."""
    for span in spans_of(requests):
        for attributes in (span.attributes, *(event.attributes for event in span.events)):
            for item in attributes:
                text = item.value.string_value
                if not any(f'"{word}"' in text for word in _WORDS):
                    continue
                for word in _WORDS:
                    text = text.replace(f'"{word}"', json.dumps(element[word]))
                text = text.replace('"items"', json.dumps(key)).replace('"/items/', f'"/{key}/')
                item.value.string_value = text


class Runs:
    def __init__(self, server: Server, skus: str, messages: str) -> None:
        self.server = server
        self.skus = skus
        self.messages = messages

    def matching(self, where: str) -> list[dict[str, Any]]:
        response = httpx.get(
            self.server.url + "/api/executions", params={"where": where}, timeout=30
        )
        assert response.status_code == 200, response.text
        executions: list[dict[str, Any]] = response.json()["executions"]
        return executions

    def ids(self, where: str) -> set[str]:
        return {execution["id"] for execution in self.matching(where)}


def load_runs(server: Server) -> Runs:
    send_scenario(server.grpc_target, "a_linear")
    skus = variant("skus")
    with_items_as(skus, {word: {"sku": word} for word in _WORDS}, "items")
    messages = variant("messages")
    with_items_as(messages, {word: {"role": role} for word, role in _ROLES.items()}, "messages")
    send(server, skus)
    send(server, messages)
    server.wait_replayed()
    return Runs(server, run_id_of(skus), run_id_of(messages))


def served_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    """A server holding the runs (`load_runs`) while the caller's fixture lasts."""
    server = Server.on_free_ports(tmp_path_factory.mktemp("wildcards") / "statetrail.duckdb")
    server.start()
    try:
        yield load_runs(server)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    yield from served_runs(tmp_path_factory)


def test_any_element_finds_runs_whose_items_are_objects(runs: Runs) -> None:
    strings = runs.ids('items contains "laser"')
    assert runs.skus not in strings and len(strings) == 1  # a_linear's own strings only
    assert runs.ids('items[*].sku = "laser"') == {runs.skus}
    assert runs.ids('items[*] = "laser"') == strings
    assert runs.ids('items[*].sku = "seed"') == set()  # removed before the end
    assert runs.ids('ever items[*].sku = "seed"') == {runs.skus}
    (found,) = runs.matching('items[*].sku = "laser"')
    # The column shows the matched values, in element order, and how many.
    assert found["fields"] == [{
        "path": "/items/~*/sku", "kind": "matches", "value": None,
        "first": ["horse", "laser", "coffee"], "count": 3,
    }]  # fmt: skip


def test_last_element_in_ever_is_the_last_of_each_state(runs: Runs) -> None:
    assert runs.ids('ever messages[-1].role = "tool"') == {runs.messages}
    assert runs.ids('messages[-1].role = "tool"') == set()
    assert runs.ids('messages[-1].role = "assistant"') == {runs.messages}
    (found,) = runs.matching('messages[-1].role = "assistant"')
    assert found["fields"] == [
        {"path": "/messages/~-1/role", "kind": "string", "value": "assistant"}
    ]


def test_an_array_column_previews_its_elements(runs: Runs) -> None:
    fields = {e["id"]: e["fields"] for e in runs.matching("items exists")}
    assert fields[runs.skus] == [{
        "path": "/items", "kind": "array", "value": None, "first": [None, None, None],
        "count": 3,
    }]  # fmt: skip
    (strings,) = set(fields) - {runs.skus}
    assert fields[strings][0]["first"] == ["horse", "laser", "coffee"]
    page = httpx.get(runs.server.url + "/", params={"where": "items exists"}, timeout=30).text
    assert "[&#34;horse&#34;, &#34;laser&#34;, &#34;coffee&#34;]" in page
    assert "[{…}, {…}, {…}]" in page
    assert "[…]" not in page


def test_suggestions_and_values_take_any_element_paths(runs: Runs) -> None:
    reply = httpx.get(runs.server.url + "/api/fields", timeout=30).json()
    paths = {p["path"]: p for p in reply["paths"]}
    assert paths["items[*].sku"] == {
        "path": "items[*].sku", "pointer": "/items/~*/sku", "kinds": ["string"], "runs": 1,
        "workflows": ["Linear Workflow"],
    }
    assert paths["items[*]"]["runs"] == 2 and paths["items[*]"]["kinds"] == ["object", "string"]
    assert not [p for p in paths if re.search(r"\[[0-9]", p)]  # no per-index paths
    for path in ("messages[*].role", "/messages/~*/role"):
        values = httpx.get(
            runs.server.url + "/api/fields/values", params={"path": path}, timeout=30
        ).json()
        assert values["path"] == "messages[*].role"
        assert {v["literal"] for v in values["values"]} == {'"user"', '"tool"', '"assistant"'}
    bad = httpx.get(runs.server.url + "/api/fields/values", params={"path": "items[-2]"})
    assert bad.status_code == 400 and "[-1]" in bad.json()["error"]


def test_a_malformed_wildcard_is_a_400_with_its_position(runs: Runs) -> None:
    response = httpx.get(
        runs.server.url + "/api/executions", params={"where": "items[-3].sku = 1"}, timeout=30
    )
    assert response.status_code == 400
    assert response.json()["position"] == 6
    assert "did you mean [-1] or [*]?" in response.json()["error"]
