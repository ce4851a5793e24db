"""The span page shows an LLM or agent span as a conversation, its raw attributes a click away.

Crafted spans go over gRPC to a real server, in the trace of a real Junjo run so
the studio's span page can show them: a GenAI chat with markup in every text and
a megabyte of content, and a Junjo model request as a real Agent writes it.
"""

from __future__ import annotations

import json
import re
import time
from html import unescape
from typing import Any

import httpx
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2
from support.otlp_craft import new_span_id, relocated_fixture, request_under
from support.polling import wait_until
from support.servers import FIXTURE_API_KEY, MakeServer, Server, export_raw
from test_llm_view import JUNJO_MODEL_REQUEST

GRPC_KEY = [("x-junjo-api-key", FIXTURE_API_KEY)]
SCRIPT = "<script>alert('llm')</script>"
BIG = 1_000_000
GENAI_CHAT: dict[str, Any] = {
    "gen_ai.system": "openai",
    "gen_ai.request.model": "gpt-4o-mini",
    "gen_ai.usage.input_tokens": 57,
    "gen_ai.usage.output_tokens": 11,
    "gen_ai.prompt": json.dumps([
        {"role": "system", "content": f"Line one\nline two {SCRIPT}"},
        {"role": "user", "content": "y" * BIG},
    ]),
    "gen_ai.completion": json.dumps([
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_7", "type": "function",
            "function": {"name": f"refund{SCRIPT}", "arguments": '{"order": "T-1007"}'},
        }]},
    ]),
}


def _value(value: Any) -> common_pb2.AnyValue:
    if isinstance(value, str):
        return common_pb2.AnyValue(string_value=value)
    return common_pb2.AnyValue(int_value=value)


def send_span(server: Server, trace_id: str, name: str, attributes: dict[str, Any]) -> str:
    """One span with these attributes in the trace, sent over gRPC; its id."""
    now = time.time_ns()
    span = trace_pb2.Span(
        trace_id=bytes.fromhex(trace_id), span_id=new_span_id(), name=name,
        kind=trace_pb2.Span.SPAN_KIND_CLIENT, start_time_unix_nano=now - 5_000_000,
        end_time_unix_nano=now,
        attributes=[common_pb2.KeyValue(key=k, value=_value(v)) for k, v in attributes.items()],
    )  # fmt: skip
    resource = resource_pb2.Resource(
        attributes=[common_pb2.KeyValue(key="service.name", value=_value("llm-app"))]
    )
    scope = common_pb2.InstrumentationScope(name="my.app.llm")
    body = request_under(resource, scope, [span]).SerializeToString()
    export_raw(server.grpc_target, body, GRPC_KEY)
    return span.span_id.hex()


def run_with_llm_spans(server: Server) -> tuple[str, dict[str, str]]:
    """A real Junjo run and, in its trace, the GenAI chat and the Junjo model request."""
    for body in relocated_fixture("a_linear", end_unix_nano=time.time_ns(), tag="llm"):
        export_raw(server.grpc_target, body, GRPC_KEY)
    wait_until(
        lambda: server.get_json("/api/executions")["executions"], until=bool,
        timeout=30, what="the run",
    )  # fmt: skip
    (run,) = server.get_json("/api/executions")["executions"]
    before = server.get_json("/healthz")["spans"]
    spans = {
        "genai": send_span(server, run["trace_id"], "chat gpt-4o-mini", GENAI_CHAT),
        "junjo": send_span(server, run["trace_id"], "model request 2", JUNJO_MODEL_REQUEST),
    }
    wait_until(
        lambda: server.get_json("/healthz")["spans"], until=lambda n: n >= before + 2,
        timeout=30, what="the LLM spans",
    )  # fmt: skip
    server.wait_replayed()
    return run["id"], spans


def _section(html: str, section_id: str) -> str:
    start = html.index(f'id="{section_id}"')
    return html[start : html.index("</section>", start)]


def _texts(html: str, css_class: str) -> list[str]:
    return [unescape(t) for t in re.findall(rf'class="{css_class}"[^>]*>(.*?)</', html, re.S)]


def test_span_page_shows_llm_spans_as_a_conversation(make_server: MakeServer) -> None:
    server = make_server()
    run_id, spans = run_with_llm_spans(server)

    def page(span: str) -> str:
        answer = httpx.get(f"{server.url}/executions/{run_id}/spans/{spans[span]}", timeout=30)
        assert answer.status_code == 200
        return answer.text

    html = page("genai")
    chat = _section(html, "llm")
    assert "OpenTelemetry GenAI" in chat and "gpt-4o-mini" in chat
    assert re.search(r"<dt>Total tokens</dt><dd>68</dd>", chat)
    assert _texts(chat, "x-llm-role") == ["system", "user", "assistant"]
    contents = _texts(chat, "x-llm-content")
    # Line breaks kept; markup is text, never an element.
    assert contents[0] == f"Line one\nline two {SCRIPT}"
    assert SCRIPT not in html and "&lt;script&gt;alert(" in chat
    assert "not shown in full" in contents[1] and len(contents[1]) < 30_000
    assert _texts(chat, "x-llm-call-name") == [f"refund{SCRIPT}"]
    assert json.loads(_texts(chat, "x-llm-arguments")[0]) == {"order": "T-1007"}
    # The raw attributes are still on the page, behind a <details> that works without script.
    raw = html[html.index('<details class="x-raw-attributes"'):]
    assert "raw JSON" in raw and "gen_ai.completion" in raw and "gen_ai.usage.input_tokens" in raw
    assert html.index('id="llm"') < html.index("x-raw-attributes")
    # A megabyte of content costs a bounded page.
    assert len(html) < 150_000

    junjo = _section(page("junjo"), "llm")
    assert "Junjo agent" in junjo and "<dd>scripted</dd>" in junjo
    assert _texts(junjo, "x-llm-role") == ["system", "input", "assistant", "tool", "assistant"]
    assert _texts(junjo, "x-llm-call-name") == ["record_note"]

    # The execution page's waterfall names the model and links to the conversation.
    execution = httpx.get(f"{server.url}/executions/{run_id}", timeout=30).text
    row = execution[execution.index(f'id="span-{spans["genai"]}"'):]
    row = row[: row.index("</details>")]
    assert unescape(_texts(row, "x-llm-flag")[0]) == "gpt-4o-mini · 68 tokens"
    assert f'/spans/{spans["genai"]}#llm">Read the conversation</a>' in row

    # A span no convention describes keeps its plain attribute table.
    timeline = server.get_json(f"/api/executions/{run_id}/timeline")
    node_span = timeline["transitions"][0]["span_id"]
    plain = httpx.get(f"{server.url}/executions/{run_id}/spans/{node_span}", timeout=30).text
    assert 'id="llm"' not in plain and "x-raw-attributes" not in plain
    assert "<h2>Attributes</h2>" in plain
