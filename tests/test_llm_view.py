"""studio/render/llm.py: an LLM or agent span's attributes read as a conversation.

Hand-built attributes for each convention (Junjo's agent attributes as a real
Junjo 0.69 Agent writes them, OpenInference, the OpenTelemetry GenAI semantic
conventions in their JSON, structured and indexed forms), and hostile ones: markup
in content, arguments nested 10,000 deep, 5 MB of content, thousands of messages,
malformed indexes.
"""

from __future__ import annotations

import json
from typing import Any

from collector.replay.jsondoc import JsonValue
from studio.render.bounded import DEEPER_NOT_SHOWN
from studio.render.llm import (
    ARGUMENT_CHARS,
    CONTENT_CHARS,
    GENAI,
    HEAD_MESSAGES,
    JUNJO,
    MAX_TOOL_CALLS,
    OPENINFERENCE,
    TAIL_MESSAGES,
    LlmView,
    Message,
    llm_summary,
    llm_view,
)

# A Junjo Agent's second model request (captured from tests/apps/junjo_agent.py's run).
JUNJO_MODEL_REQUEST: dict[str, JsonValue] = {
    "junjo.agent.operation_type": "model_request",
    "junjo.agent.key": "refund-triage",
    "junjo.agent.model.provider": "junjo",
    "junjo.agent.model.name": "scripted",
    "junjo.agent.model.request": json.dumps({
        "agentKey": "refund-triage",
        "instructions": "Record what you verified with record_note,\nthen decide the refund.",
        "messages": [
            {"input": {"order_id": "A-1001"}, "type": "agent_input"},
            {"calls": [{"arguments": {"text": "carrier confirmed damage"}, "id": "call_1",
                        "name": "record_note"}], "type": "assistant_tool_calls"},
            {"callId": "call_1", "result": {"note_count": 1}, "toolName": "record_note",
             "type": "tool_result"},
        ],
        "ordinal": 2,
        "v": 1,
    }),
    "junjo.agent.model.response": json.dumps({
        "output": {"amount": 42.5, "approved": True, "reason": "damaged in transit"},
        "type": "final_output", "usage": {"inputTokens": 160, "outputTokens": 24, "v": 1}, "v": 1,
    }),
    "junjo.agent.model.usage": '{"inputTokens":160,"outputTokens":24,"v":1}',
}


def _roles(messages: tuple[Message, ...]) -> list[str]:
    return [m.role for m in messages]


def _view(attributes: dict[str, Any]) -> LlmView:
    view = llm_view(attributes)
    assert view is not None
    return view


def test_llm_view_reads_a_junjo_model_request() -> None:
    view = _view(JUNJO_MODEL_REQUEST)
    assert (view.convention, view.system, view.model) == (JUNJO, "junjo", "scripted")
    assert (view.input_tokens, view.output_tokens, view.total_tokens) == (160, 24, 184)
    assert _roles(view.input.head) == ["system", "input", "assistant", "tool"]
    system, given, asked, answered = view.input.head
    assert system.content == "Record what you verified with record_note,\nthen decide the refund."
    assert json.loads(given.content) == {"order_id": "A-1001"}
    (call,) = asked.tool_calls
    assert (call.name, call.call_id) == ("record_note", "call_1")
    assert call.arguments == '{\n  "text": "carrier confirmed damage"\n}'
    assert (answered.name, answered.call_id) == ("record_note", "call_1")
    assert json.loads(answered.content) == {"note_count": 1}
    (output,) = view.output.head
    assert json.loads(output.content)["reason"] == "damaged in transit"


def test_llm_view_reads_a_junjo_tool_span_and_agent_span() -> None:
    tool = _view({
        "junjo.agent.operation_type": "tool",
        "junjo.agent.tool.name": "record_note",
        "junjo.agent.tool_call.id": "call_1",
        "junjo.agent.tool.arguments": '{"text":"carrier confirmed damage"}',
        "junjo.agent.tool.result": '{"note_count":1}',
    })
    ((call,),) = [m.tool_calls for m in tool.input.head]
    assert call.name == "record_note"
    assert json.loads(call.arguments) == {"text": "carrier confirmed damage"}
    (result,) = tool.output.head
    assert (result.role, result.name) == ("tool", "record_note")
    assert json.loads(result.content) == {"note_count": 1}

    transcript = [
        {"input": {"order_id": "A-1001"}, "type": "agent_input"},
        {"calls": [{"arguments": {}, "id": "c", "name": "lookup"}], "assistantText": "Checking.",
         "type": "assistant_tool_calls"},
        {"callId": "c", "result": [], "toolName": "lookup", "type": "tool_result"},
        {"output": {"approved": True}, "type": "assistant_output"},
    ]
    agent = _view({
        "junjo.span_type": "agent",
        "junjo.agent.definition_snapshot": json.dumps(
            {"instructions": "Decide.", "model": {"model": "m-1", "provider": "p"}}),
        "junjo.agent.state.end": json.dumps({"transcript": transcript}),
        "junjo.agent.usage": json.dumps(
            {"fields": {"inputTokens": {"sum": 280}, "outputTokens": {"sum": 42}}}),
    })
    assert (agent.model, agent.system, agent.total_tokens) == ("m-1", "p", 322)
    assert _roles(agent.input.head) == ["system", "input", "assistant", "tool", "assistant"]
    assert agent.input.head[2].content == "Checking."


def test_llm_view_reads_openinference_messages_and_tool_calls() -> None:
    prefix = "llm.input_messages"
    view = _view({
        "openinference.span.kind": "LLM",
        "llm.model_name": "gpt-4o",
        "llm.provider": "openai",
        "llm.token_count.prompt": 31,
        "llm.token_count.completion": 9,
        "llm.token_count.total": 40,
        f"{prefix}.0.message.role": "system",
        f"{prefix}.0.message.content": "Be brief.",
        f"{prefix}.1.message.role": "user",
        f"{prefix}.1.message.contents.0.message_content.type": "text",
        f"{prefix}.1.message.contents.0.message_content.text": "Where is order T-1007?",
        f"{prefix}.1.message.contents.1.message_content.type": "image",
        f"{prefix}.1.message.contents.1.message_content.image.image.url": "data:image/png;base64,",
        # Index 10 sorts after 2 (numerically, not as text).
        f"{prefix}.10.message.role": "tool",
        f"{prefix}.10.message.content": '{"status": "shipped"}',
        f"{prefix}.10.message.tool_call_id": "call_9",
        f"{prefix}.2.message.role": "assistant",
        f"{prefix}.2.message.tool_calls.0.tool_call.id": "call_9",
        f"{prefix}.2.message.tool_calls.0.tool_call.function.name": "track",
        f"{prefix}.2.message.tool_calls.0.tool_call.function.arguments": '{"order":"T-1007"}',
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": "Shipped\nyesterday.",
        "input.value": "ignored: messages were sent",
    })
    assert (view.convention, view.model, view.system) == (OPENINFERENCE, "gpt-4o", "openai")
    assert (view.input_tokens, view.output_tokens, view.total_tokens) == (31, 9, 40)
    assert _roles(view.input.head) == ["system", "user", "assistant", "tool"]
    assert view.input.head[1].content == "Where is order T-1007?\n[image]"
    (call,) = view.input.head[2].tool_calls
    assert (call.name, call.call_id, json.loads(call.arguments)) == (
        "track", "call_9", {"order": "T-1007"})
    assert view.input.head[3].call_id == "call_9"
    assert view.output.head[0].content == "Shipped\nyesterday."


def test_llm_view_reads_openinference_values_and_tool_spans() -> None:
    chain = _view({
        "openinference.span.kind": "LLM",
        "input.value": json.dumps({"messages": [{"role": "user", "content": "hi"}]}),
        "input.mime_type": "application/json",
        "output.value": "hello",
    })
    assert [(m.role, m.content) for m in chain.input.head] == [("user", "hi")]
    assert [(m.role, m.content) for m in chain.output.head] == [("assistant", "hello")]
    retriever = _view({"openinference.span.kind": "RETRIEVER", "input.value": "laser"})
    assert [(m.role, m.content) for m in retriever.input.head] == [("input", "laser")]
    tool = _view({
        "openinference.span.kind": "TOOL", "tool.name": "search",
        "input.value": '{"q": "laser"}', "output.value": "3 results",
    })
    assert tool.input.head[0].tool_calls[0].name == "search"
    assert tool.output.head[0].content == "3 results"


def test_llm_view_reads_genai_json_prompt_and_completion() -> None:
    view = _view({
        "gen_ai.system": "openai",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 3,
        "gen_ai.prompt": json.dumps([
            {"role": "user", "content": [{"type": "text", "text": "Refund A-1001?"}]},
        ]),
        "gen_ai.completion": json.dumps([
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "t1", "type": "function",
                 "function": {"name": "refund", "arguments": '{"order": "A-1001"}'}}]},
        ]),
    })
    assert (view.convention, view.system, view.model, view.total_tokens) == (
        GENAI, "openai", "gpt-4o-mini", 15)
    assert [(m.role, m.content) for m in view.input.head] == [("user", "Refund A-1001?")]
    (call,) = view.output.head[0].tool_calls
    assert (call.name, call.call_id) == ("refund", "t1")
    assert json.loads(call.arguments) == {"order": "A-1001"}


def test_llm_view_reads_genai_structured_messages_and_indexed_prompts() -> None:
    structured = _view({
        "gen_ai.provider.name": "anthropic",
        "gen_ai.system_instructions": json.dumps([{"type": "text", "content": "Be kind."}]),
        "gen_ai.input.messages": [
            {"role": "user", "parts": [{"type": "text", "content": "Weather?"}]},
            {"role": "assistant", "parts": [{
                "type": "tool_call", "id": "w1", "name": "weather", "arguments": {"city": "Oslo"},
            }]},
            {"role": "tool", "parts": [
                {"type": "tool_call_response", "id": "w1", "response": "rain"},
            ]},
        ],
        "gen_ai.output.messages": json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": "Rain."}],
              "finish_reason": "stop"}]),
    })
    assert structured.system == "anthropic"
    assert [(m.role, m.content) for m in structured.input.head] == [
        ("system", "Be kind."), ("user", "Weather?"), ("assistant", ""), ("tool", "rain")]
    assert structured.input.head[2].tool_calls[0].arguments == '{\n  "city": "Oslo"\n}'
    assert structured.input.head[3].call_id == "w1"
    assert structured.output.head[0].content == "Rain."

    indexed = _view({
        "gen_ai.system": "openai",
        "gen_ai.prompt.0.role": "user",
        "gen_ai.prompt.0.content": "Two?",
        "gen_ai.completion.0.role": "assistant",
        "gen_ai.completion.0.tool_calls.0.name": "add",
        "gen_ai.completion.0.tool_calls.0.arguments": '{"a": 1, "b": 1}',
    })
    assert [(m.role, m.content) for m in indexed.input.head] == [("user", "Two?")]
    assert indexed.output.head[0].tool_calls[0].name == "add"


def test_llm_view_leaves_other_spans_alone() -> None:
    assert llm_view({}) is None
    assert llm_view({"junjo.span_type": "node", "http.method": "GET"}) is None
    assert llm_view({"input.value": "a chain input without OpenInference's span kind"}) is None
    # The captured i_hooks_user_spans LLM span: no messages, but a provider and a count.
    minimal = _view({"gen_ai.system": "fake", "gen_ai.usage.output_tokens": 3})
    assert (minimal.system, minimal.output_tokens, minimal.input.total) == ("fake", 3, 0)


def test_llm_view_keeps_markup_as_text() -> None:
    script = "<script>alert(1)</script>"
    view = _view({"gen_ai.prompt": json.dumps([{"role": script, "content": script}])})
    # The view holds text; the template's autoescape makes it inert (tests/test_llm_span_page.py).
    assert view.input.head[0].content == script
    assert view.input.head[0].role_class == "other"


def test_llm_view_bounds_deep_arguments_huge_content_and_long_chats() -> None:
    deep = "[" * 10_000 + "]" * 10_000
    huge = "x" * 5_000_000
    many: list[dict[str, Any]] = [{"role": "user", "content": f"m{i}"} for i in range(5_000)]
    calls = [{"id": str(i), "function": {"name": "f", "arguments": deep}} for i in range(50)]
    many.append({"role": "assistant", "content": huge, "tool_calls": calls})
    attributes: dict[str, Any] = {"gen_ai.prompt": json.dumps(many), "gen_ai.completion": huge}
    view = _view(attributes)
    assert len(view.input.head) == HEAD_MESSAGES and len(view.input.tail) == TAIL_MESSAGES
    assert view.input.omitted == 5_001 - HEAD_MESSAGES - TAIL_MESSAGES
    assert view.input.head[0].content == "m0"
    last = view.input.tail[-1]
    assert len(last.content) < CONTENT_CHARS + 100 and "not shown in full" in last.content
    assert (len(last.tool_calls), last.tool_calls_omitted) == (MAX_TOOL_CALLS, 50 - MAX_TOOL_CALLS)
    # Too deep to parse: shown as sent, cut.
    assert len(last.tool_calls[0].arguments) < ARGUMENT_CHARS + 100
    assert len(view.output.head[0].content) < CONTENT_CHARS + 100

    # Parsable but deeper than a page draws: cut at the render depth.
    nested: JsonValue = "core"
    for _ in range(150):
        nested = {"k": nested}
    shallow = _view({"gen_ai.completion.0.tool_calls.0.arguments": json.dumps(nested)})
    assert DEEPER_NOT_SHOWN in shallow.output.head[0].tool_calls[0].arguments


def test_llm_view_passes_over_malformed_indexes() -> None:
    view = _view({
        "llm.model_name": "m",
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.content": "kept",
        "llm.input_messages.x.message.content": "not an index",
        "llm.input_messages.-1.message.content": "negative",
        "llm.input_messages.01.message.content": "leading zero",
        "llm.input_messages." + "9" * 5_000 + ".message.content": "too many digits",
        "llm.input_messages.3": "no field",
        "llm.input_messages.4.message.role": ["not", "text"],
        "llm.input_messages.4.message.tool_calls.z.tool_call.function.name": "bad",
    })
    assert [(m.role, m.content) for m in view.input.head] == [("user", "kept"), ("other", "")]
    assert view.input.head[1].tool_calls == ()


def test_llm_view_ignores_wrongly_typed_values() -> None:
    view = _view({
        "junjo.agent.operation_type": "model_request",
        "junjo.agent.model.request": "not json {",
        "junjo.agent.model.response": json.dumps({"type": "tool_calls", "calls": "nope"}),
        "junjo.agent.model.usage": json.dumps({"inputTokens": True, "outputTokens": -4}),
        "junjo.agent.model.name": 7,
    })
    assert (view.model, view.input_tokens, view.output_tokens) == ("", None, None)
    assert view.input.total == 0
    assert view.output.head[0].tool_calls == ()


def test_llm_summary_names_the_model_and_tokens_without_reading_messages() -> None:
    junjo = llm_summary(JUNJO_MODEL_REQUEST)
    assert junjo is not None and (junjo.convention, junjo.label, junjo.total_tokens) == (
        JUNJO, "scripted", 184)
    tool = llm_summary({"openinference.span.kind": "TOOL", "tool.name": "search"})
    assert tool is not None and (tool.convention, tool.label) == (OPENINFERENCE, "search")
    genai = llm_summary({"gen_ai.request.model": "m", "gen_ai.usage.prompt_tokens": 2,
                         "gen_ai.usage.completion_tokens": 3, "blob": b"\x00"})
    assert genai is not None and (genai.label, genai.total_tokens) == ("m", 5)
    chain = llm_summary({"openinference.span.kind": "CHAIN", "input.value": "x"})
    assert chain is not None and chain.label == "chain"
    # Recognised exactly where llm_view recognises a span.
    for attributes in ({}, {"input.value": "x"}, {"junjo.span_type": "node"}):
        assert llm_summary(attributes) is None and llm_view(attributes) is None
