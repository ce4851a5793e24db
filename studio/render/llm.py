"""An LLM or agent span read as a conversation: model, token counts, messages, tool calls.

Pure. Recognises three attribute conventions, tried in this order: Junjo's agent
attributes (SCHEMA.md 2.4: model-request, tool and agent spans), OpenInference
(`llm.input_messages.N.message.*`, `input.value`...) and the OpenTelemetry GenAI
semantic conventions (`gen_ai.input.messages`, `gen_ai.prompt` JSON or indexed...).
A span none of them describes gives None, and the page shows its attributes as
before. Everything is bounded: each text at CONTENT_CHARS, tool arguments at
ARGUMENT_CHARS and MAX_RENDER_DEPTH levels, at most HEAD_MESSAGES + TAIL_MESSAGES
messages and MAX_TOOL_CALLS calls per message, what is left out counted; indexes
that are not small decimal numbers are passed over (they stay in the raw attributes).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from collector.replay.jsondoc import MISSING, JsonValue, parse_json
from studio.render.bounded import cut_line, cut_text, json_preview

# The most of one message's text, one tool call's arguments and one short name shown.
CONTENT_CHARS: Final = 20_000
ARGUMENT_CHARS: Final = 8_000
NAME_CHARS: Final = 200
# A long conversation shows its first and last messages and counts those between.
HEAD_MESSAGES: Final = 10
TAIL_MESSAGES: Final = 10
MAX_TOOL_CALLS: Final = 20
# Roles the page gives a badge colour of their own; any other is shown as sent.
KNOWN_ROLES: Final = frozenset({"system", "user", "assistant", "tool", "input", "output"})

JUNJO: Final = "Junjo agent"
OPENINFERENCE: Final = "OpenInference"
GENAI: Final = "OpenTelemetry GenAI"

# An index in a flattened key ("llm.input_messages.3.message.role"): a small decimal
# number, so a hostile key cannot make int() parse thousands of digits.
_INDEXED: Final = re.compile(r"(0|[1-9][0-9]{0,8})\.(.+)", re.S)

Attributes = Mapping[str, JsonValue]


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: str
    call_id: str = ""


@dataclass(frozen=True, slots=True)
class Message:
    """One turn; `name` is the tool a result answers (or a participant's name)."""

    role: str
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_calls_omitted: int = 0
    name: str = ""
    call_id: str = ""

    @property
    def role_class(self) -> str:
        return self.role if self.role in KNOWN_ROLES else "other"


@dataclass(frozen=True, slots=True)
class Messages:
    """A conversation as shown: its first messages, how many are left out, its last."""

    head: tuple[Message, ...] = ()
    omitted: int = 0
    tail: tuple[Message, ...] = ()

    @property
    def total(self) -> int:
        return len(self.head) + self.omitted + len(self.tail)


@dataclass(frozen=True, slots=True)
class LlmView:
    convention: str
    system: str
    model: str
    input_tokens: int | None
    output_tokens: int | None
    total_tokens: int | None
    input: Messages
    output: Messages


def llm_view(attributes: Attributes) -> LlmView | None:
    """The span as a conversation, or None when no known convention describes it."""
    for read in (_junjo, _openinference, _genai):
        view = read(attributes)
        if view is not None:
            return view
    return None


@dataclass(frozen=True, slots=True)
class LlmSummary:
    """What the waterfall says of an LLM span: its convention, model (or tool) and tokens."""

    convention: str
    label: str
    total_tokens: int | None


def llm_summary(attributes: Mapping[str, object]) -> LlmSummary | None:
    """A cheap look at the span for the execution page: reads no message JSON, so a
    trace of many chat spans costs the waterfall nothing much; None as llm_view gives."""
    operation = attributes.get(_J + "operation_type")
    if operation == "model_request":
        usage = attributes.get(_J + "model.usage")
        input_tokens, output_tokens = _junjo_usage(_json(usage) if isinstance(usage, str) else None)
        return LlmSummary(
            JUNJO, _text(attributes.get(_J + "model.name")), _sum(input_tokens, output_tokens)
        )
    if operation == "tool":
        return LlmSummary(JUNJO, _text(attributes.get(_J + "tool.name")), None)
    if attributes.get("junjo.span_type") == "agent":
        # The span's own name is the agent's; its model is only in the definition snapshot.
        return LlmSummary(JUNJO, "conversation", None)
    view = _openinference_summary(attributes)
    return view if view is not None else _genai_summary(attributes)


def _openinference_summary(attributes: Mapping[str, object]) -> LlmSummary | None:
    kind = _text(attributes.get("openinference.span.kind")).upper()
    if kind == "TOOL":
        return LlmSummary(OPENINFERENCE, _text(attributes.get("tool.name")), None)
    model = _text(attributes.get("llm.model_name"))
    messages = _has_prefix(attributes, "llm.input_messages.", "llm.output_messages.")
    if not (kind or model or messages):
        return None
    total = _count(attributes.get("llm.token_count.total"))
    if total is None:
        total = _sum(
            _count(attributes.get("llm.token_count.prompt")),
            _count(attributes.get("llm.token_count.completion")),
        )
    return LlmSummary(OPENINFERENCE, model or kind.lower(), total)


def _genai_summary(attributes: Mapping[str, object]) -> LlmSummary | None:
    if not _has_prefix(attributes, "gen_ai."):
        return None
    if attributes.get("gen_ai.operation.name") == "execute_tool":
        return LlmSummary(GENAI, _text(attributes.get("gen_ai.tool.name")), None)
    return LlmSummary(GENAI, _genai_model(attributes), _genai_total(attributes))


def _has_prefix(attributes: Mapping[str, object], *prefixes: str) -> bool:
    return any(key.startswith(prefixes) for key in attributes)


def bounded_messages(messages: Sequence[Message]) -> Messages:
    if len(messages) <= HEAD_MESSAGES + TAIL_MESSAGES:
        return Messages(tuple(messages))
    return Messages(
        tuple(messages[:HEAD_MESSAGES]),
        len(messages) - HEAD_MESSAGES - TAIL_MESSAGES,
        tuple(messages[-TAIL_MESSAGES:]),
    )


# --- Junjo's agent attributes ------------------------------------------------------

_J: Final = "junjo.agent."


def _junjo(attributes: Attributes) -> LlmView | None:
    operation = attributes.get(_J + "operation_type")
    if operation == "model_request":
        return _junjo_model_request(attributes)
    if operation == "tool":
        return _junjo_tool(attributes)
    if attributes.get("junjo.span_type") == "agent":
        return _junjo_agent(attributes)
    return None


def _junjo_model_request(attributes: Attributes) -> LlmView:
    request = _json(attributes.get(_J + "model.request"))
    response = _json(attributes.get(_J + "model.response"))
    if response is None:
        response = _json(attributes.get(_J + "model.response_candidate"))
    request_map = request if isinstance(request, dict) else {}
    input_messages = _instructions(request_map.get("instructions"))
    input_messages += _junjo_messages(request_map.get("messages"))
    usage = _json(attributes.get(_J + "model.usage"))
    if usage is None and isinstance(response, dict):
        usage = response.get("usage")
    input_tokens, output_tokens = _junjo_usage(usage)
    return LlmView(
        convention=JUNJO,
        system=_text(attributes.get(_J + "model.provider")),
        model=_text(attributes.get(_J + "model.name")),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=_sum(input_tokens, output_tokens),
        input=bounded_messages(input_messages),
        output=bounded_messages(_junjo_response(response)),
    )


def _junjo_tool(attributes: Attributes) -> LlmView:
    name = _text(attributes.get(_J + "tool.name"))
    call_id = _text(attributes.get(_J + "tool_call.id"))
    arguments = attributes.get(_J + "tool.arguments")
    if arguments is None:
        arguments = attributes.get(_J + "tool.requested_arguments")
    result = attributes.get(_J + "tool.result")
    if result is None:
        result = attributes.get(_J + "tool.result_candidate")
    return _tool_view(JUNJO, name, call_id, arguments, result)


def _junjo_agent(attributes: Attributes) -> LlmView:
    snapshot = _json(attributes.get(_J + "definition_snapshot"))
    snapshot_map = snapshot if isinstance(snapshot, dict) else {}
    model = snapshot_map.get("model")
    model_map = model if isinstance(model, dict) else {}
    state = _json(attributes.get(_J + "state.end"))
    transcript = state.get("transcript") if isinstance(state, dict) else None
    messages = _instructions(snapshot_map.get("instructions"))
    if isinstance(transcript, list):
        messages += _junjo_messages(transcript)
    else:
        messages += _json_message("input", attributes.get(_J + "input"))
        messages += _json_message("output", attributes.get(_J + "output"))
    usage = _json(attributes.get(_J + "usage"))
    fields = usage.get("fields") if isinstance(usage, dict) else None
    input_tokens = _usage_sum(fields, "inputTokens")
    output_tokens = _usage_sum(fields, "outputTokens")
    return LlmView(
        convention=JUNJO,
        system=_text(model_map.get("provider")),
        model=_text(model_map.get("model")),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=_sum(input_tokens, output_tokens),
        input=bounded_messages(messages),
        output=Messages(),
    )


def _instructions(value: JsonValue) -> list[Message]:
    return [Message("system", cut_text(value, CONTENT_CHARS))] if isinstance(value, str) else []


def _junjo_messages(value: JsonValue) -> list[Message]:
    items = value if isinstance(value, list) else []
    return [_junjo_message(item) for item in items if isinstance(item, dict)]


def _junjo_message(item: dict[str, JsonValue]) -> Message:
    kind = item.get("type")
    if kind == "agent_input":
        return Message("input", _pretty(item.get("input")))
    if kind == "assistant_output":
        return Message("assistant", _pretty(item.get("output")))
    if kind == "assistant_tool_calls":
        calls, omitted = _junjo_calls(item.get("calls"))
        return Message("assistant", _text(item.get("assistantText")), calls, omitted)
    if kind == "tool_result":
        return Message(
            "tool", _pretty(item.get("result")),
            name=_text(item.get("toolName")), call_id=_text(item.get("callId")),
        )  # fmt: skip
    return Message(_text(kind) or "other", _pretty(item))


def _junjo_response(response: JsonValue) -> list[Message]:
    if not isinstance(response, dict):
        return [] if response is None else [Message("assistant", _pretty(response))]
    if response.get("type") == "tool_calls":
        calls, omitted = _junjo_calls(response.get("calls"))
        return [Message("assistant", _text(response.get("assistantText")), calls, omitted)]
    return [Message("assistant", _pretty(response.get("output")))]


def _junjo_calls(value: JsonValue) -> tuple[tuple[ToolCall, ...], int]:
    calls = [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []
    shown = tuple(
        ToolCall(_text(c.get("name")), _arguments(c.get("arguments")), _text(c.get("id")))
        for c in calls[:MAX_TOOL_CALLS]
    )
    return shown, max(len(calls) - MAX_TOOL_CALLS, 0)


def _junjo_usage(usage: JsonValue) -> tuple[int | None, int | None]:
    if not isinstance(usage, dict):
        return None, None
    return _count(usage.get("inputTokens")), _count(usage.get("outputTokens"))


def _usage_sum(fields: JsonValue, name: str) -> int | None:
    field = fields.get(name) if isinstance(fields, dict) else None
    return _count(field.get("sum")) if isinstance(field, dict) else None


# --- OpenInference -----------------------------------------------------------------


def _openinference(attributes: Attributes) -> LlmView | None:
    kind = _text(attributes.get("openinference.span.kind")).upper()
    input_messages = _oi_messages(_indexed(attributes, "llm.input_messages."))
    output_messages = _oi_messages(_indexed(attributes, "llm.output_messages."))
    model = _text(attributes.get("llm.model_name"))
    if kind == "TOOL":
        return _tool_view(
            OPENINFERENCE, _text(attributes.get("tool.name")), _text(attributes.get("tool.id")),
            attributes.get("input.value"), attributes.get("output.value"),
        )  # fmt: skip
    if not (kind or input_messages or output_messages or model):
        return None
    # A chain's or retriever's input is not a person's turn: named as what it is.
    chat = kind in ("LLM", "")
    if not input_messages:
        input_messages = _value_messages(attributes, "input", "user" if chat else "input")
    if not output_messages:
        output_messages = _value_messages(
            attributes, "output", "assistant" if chat else "output"
        )
    input_tokens = _count(attributes.get("llm.token_count.prompt"))
    output_tokens = _count(attributes.get("llm.token_count.completion"))
    total = _count(attributes.get("llm.token_count.total"))
    return LlmView(
        convention=OPENINFERENCE,
        system=_text(attributes.get("llm.provider", attributes.get("llm.system"))),
        model=model,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=total if total is not None else _sum(input_tokens, output_tokens),
        input=bounded_messages(input_messages),
        output=bounded_messages(output_messages),
    )


def _oi_messages(indexed: list[dict[str, JsonValue]]) -> list[Message]:
    messages = []
    for fields in indexed:
        content = fields.get("message.content")
        if content is None:
            parts = _indexed(fields, "message.contents.")
            content = [_oi_part(part) for part in parts]
        calls = _indexed(fields, "message.tool_calls.")
        messages.append(
            Message(
                role=_text(fields.get("message.role")) or "other",
                content=_content(content),
                tool_calls=tuple(
                    ToolCall(
                        _text(c.get("tool_call.function.name")),
                        _arguments(c.get("tool_call.function.arguments")),
                        _text(c.get("tool_call.id")),
                    )
                    for c in calls[:MAX_TOOL_CALLS]
                ),
                tool_calls_omitted=max(len(calls) - MAX_TOOL_CALLS, 0),
                name=_text(fields.get("message.name")),
                call_id=_text(fields.get("message.tool_call_id")),
            )
        )
    return messages


def _oi_part(part: dict[str, JsonValue]) -> str:
    # An image or audio part has no text: named by its type, its data left in the raw JSON.
    text = part.get("message_content.text")
    if isinstance(text, str):
        return text
    return f"[{_text(part.get('message_content.type')) or 'part'}]"


def _value_messages(attributes: Attributes, side: str, role: str) -> list[Message]:
    """`input.value`/`output.value`: the chat when it is an OpenAI-style request, else one
    message with the value, as JSON when its mime type says so."""
    value = attributes.get(f"{side}.value")
    if value is None:
        return []
    if attributes.get(f"{side}.mime_type") == "application/json":
        parsed = _json(value)
        messages = parsed.get("messages") if isinstance(parsed, dict) else None
        if isinstance(messages, list):
            return _chat_messages(messages)
        return [Message(role, _pretty(parsed) if parsed is not None else _content(value))]
    return [Message(role, _content(value))]


# --- OpenTelemetry GenAI semantic conventions --------------------------------------


def _genai(attributes: Attributes) -> LlmView | None:
    if not _has_prefix(attributes, "gen_ai."):
        return None
    if attributes.get("gen_ai.operation.name") == "execute_tool":
        return _tool_view(
            GENAI, _text(attributes.get("gen_ai.tool.name")),
            _text(attributes.get("gen_ai.tool.call.id")),
            attributes.get("gen_ai.tool.call.arguments"), attributes.get("gen_ai.tool.call.result"),
        )  # fmt: skip
    system = _instructions_parts(attributes.get("gen_ai.system_instructions"))
    input_messages = system + _genai_side(attributes, "input", "prompt")
    output_messages = _genai_side(attributes, "output", "completion")
    input_tokens, output_tokens = _genai_tokens(attributes)
    return LlmView(
        convention=GENAI,
        system=_text(attributes.get("gen_ai.provider.name", attributes.get("gen_ai.system"))),
        model=_genai_model(attributes),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=_genai_total(attributes),
        input=bounded_messages(input_messages),
        output=bounded_messages(output_messages),
    )


def _genai_model(attributes: Mapping[str, object]) -> str:
    return _text(attributes.get("gen_ai.request.model", attributes.get("gen_ai.response.model")))


def _genai_tokens(attributes: Mapping[str, object]) -> tuple[int | None, int | None]:
    # The older names (prompt/completion tokens) are still sent by many instrumentations.
    return (
        _count(attributes.get("gen_ai.usage.input_tokens",
                              attributes.get("gen_ai.usage.prompt_tokens"))),
        _count(attributes.get("gen_ai.usage.output_tokens",
                              attributes.get("gen_ai.usage.completion_tokens"))),
    )  # fmt: skip


def _genai_total(attributes: Mapping[str, object]) -> int | None:
    total = _count(attributes.get("llm.usage.total_tokens"))
    return total if total is not None else _sum(*_genai_tokens(attributes))


def _genai_side(attributes: Attributes, side: str, legacy: str) -> list[Message]:
    """One side of the chat from whichever form was sent: `gen_ai.input.messages`
    (structured or JSON), `gen_ai.prompt` as JSON, or indexed `gen_ai.prompt.N.*`."""
    current = _json(attributes.get(f"gen_ai.{side}.messages"))
    if isinstance(current, list):
        return _chat_messages(current)
    whole = attributes.get(f"gen_ai.{legacy}")
    if whole is not None:
        parsed = _as_json(whole)
        if isinstance(parsed, list):
            return _chat_messages(parsed)
        return [Message("user" if side == "input" else "assistant", _content(parsed))]
    return [_legacy_indexed(fields) for fields in _indexed(attributes, f"gen_ai.{legacy}.")]


def _legacy_indexed(fields: dict[str, JsonValue]) -> Message:
    calls = _indexed(fields, "tool_calls.")
    return Message(
        role=_text(fields.get("role")) or "other",
        content=_content(fields.get("content")),
        tool_calls=tuple(
            ToolCall(_text(c.get("name")), _arguments(c.get("arguments")), _text(c.get("id")))
            for c in calls[:MAX_TOOL_CALLS]
        ),
        tool_calls_omitted=max(len(calls) - MAX_TOOL_CALLS, 0),
        call_id=_text(fields.get("tool_call_id")),
    )


def _instructions_parts(value: JsonValue) -> list[Message]:
    return [] if value is None else [Message("system", _content(_as_json(value)))]


def _chat_messages(items: list[JsonValue]) -> list[Message]:
    """Messages as OpenAI's API and GenAI's `gen_ai.input.messages` write them: a role,
    `content` or `parts`, and tool calls in `tool_calls` or as `tool_call` parts."""
    return [_chat_message(item) for item in items if isinstance(item, dict)]


def _chat_message(item: dict[str, JsonValue]) -> Message:
    calls: list[ToolCall] = []
    texts: list[JsonValue] = []
    call_id = _text(item.get("tool_call_id"))
    parts = item.get("parts")
    for part in parts if isinstance(parts, list) else []:
        if not isinstance(part, dict):
            texts.append(part)
        elif part.get("type") == "tool_call":
            calls.append(_call(part.get("name"), part.get("arguments"), part.get("id")))
        elif part.get("type") == "tool_call_response":
            call_id = call_id or _text(part.get("id"))
            texts.append(part.get("response"))
        else:
            texts.append(part)
    content = item.get("content")
    if content is not None:
        texts.insert(0, content)
    raw_calls = item.get("tool_calls")
    for call in raw_calls if isinstance(raw_calls, list) else []:
        if isinstance(call, dict):
            function = call.get("function")
            named = function if isinstance(function, dict) else call
            calls.append(_call(named.get("name"), named.get("arguments"), call.get("id")))
    return Message(
        role=_text(item.get("role")) or "other",
        content=_content(texts if len(texts) != 1 else texts[0]),
        tool_calls=tuple(calls[:MAX_TOOL_CALLS]),
        tool_calls_omitted=max(len(calls) - MAX_TOOL_CALLS, 0),
        name=_text(item.get("name")),
        call_id=call_id,
    )


def _call(name: JsonValue, arguments: JsonValue, call_id: JsonValue) -> ToolCall:
    return ToolCall(_text(name), _arguments(arguments), _text(call_id))


# --- shared ------------------------------------------------------------------------


def _tool_view(
    convention: str, name: str, call_id: str, arguments: JsonValue, result: JsonValue
) -> LlmView:
    """A tool span: the call it ran and what it returned."""
    call = ToolCall(name, _arguments(arguments), call_id)
    output = [] if result is None else [
        Message("tool", _content(_as_json(result)), name=name, call_id=call_id)
    ]
    return LlmView(
        convention=convention, system="", model="",
        input_tokens=None, output_tokens=None, total_tokens=None,
        input=Messages((Message("assistant", "", (call,)),)),
        output=bounded_messages(output),
    )  # fmt: skip


def _indexed(attributes: Mapping[str, JsonValue], prefix: str) -> list[dict[str, JsonValue]]:
    """Flattened `prefix.N.rest` keys grouped by N in index order, each group keyed by rest."""
    groups: dict[int, dict[str, JsonValue]] = {}
    for key, value in attributes.items():
        if not key.startswith(prefix):
            continue
        match = _INDEXED.fullmatch(key, len(prefix))
        if match is not None:
            groups.setdefault(int(match[1]), {})[match[2]] = value
    return [groups[index] for index in sorted(groups)]


def _json(value: JsonValue) -> JsonValue:
    """A value sent as JSON text, parsed (None if it is not JSON); other values as they are."""
    if not isinstance(value, str):
        return value
    parsed = parse_json(value)
    return None if parsed is MISSING else parsed


def _as_json(value: JsonValue) -> JsonValue:
    """Text that is JSON, parsed; other text and other values as they are."""
    if not isinstance(value, str):
        return value
    parsed = parse_json(value)
    return value if parsed is MISSING else parsed


def _arguments(value: JsonValue) -> str:
    """Tool arguments pretty-printed when they are JSON (text or structured), else as sent."""
    if isinstance(value, str):
        parsed = parse_json(value)
        if parsed is MISSING or isinstance(parsed, str):
            return cut_text(value, ARGUMENT_CHARS)
        value = parsed
    return "" if value is None else json_preview(value, ARGUMENT_CHARS, indent=2)


def _content(value: JsonValue) -> str:
    """A message's text: a string as-is, text parts joined, anything else as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return cut_text(value, CONTENT_CHARS)
    if isinstance(value, list):
        return _joined(value)
    if isinstance(value, dict):
        text = _part_text(value)
        if text is not None:
            return cut_text(text, CONTENT_CHARS)
    return _pretty(value)


def _joined(parts: Iterable[JsonValue]) -> str:
    # Stops once the budget is spent, so a list of a million parts costs CONTENT_CHARS.
    pieces: list[str] = []
    length = 0
    for part in parts:
        text = _part_text(part) if isinstance(part, dict) else part
        piece = text if isinstance(text, str) else json_preview(part, CONTENT_CHARS, indent=2)
        pieces.append(piece)
        length += len(piece) + 1
        if length > CONTENT_CHARS:
            break
    return cut_text("\n".join(pieces), CONTENT_CHARS)


def _part_text(part: dict[str, JsonValue]) -> str | None:
    # OpenAI's {"type": "text", "text": ...} and GenAI's {"type": "text", "content": ...}.
    for key in ("text", "content"):
        text = part.get(key)
        if isinstance(text, str):
            return text
    return None


def _pretty(value: JsonValue) -> str:
    if isinstance(value, str):
        return cut_text(value, CONTENT_CHARS)
    return json_preview(value, CONTENT_CHARS, indent=2)


def _json_message(role: str, value: JsonValue) -> list[Message]:
    return [] if value is None else [Message(role, _pretty(_as_json(value)))]


def _text(value: object) -> str:
    return cut_line(value, NAME_CHARS) if isinstance(value, str) else ""



def _count(value: object) -> int | None:
    # bool is an int in Python, never a token count.
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _sum(first: int | None, second: int | None) -> int | None:
    return None if first is None or second is None else first + second
