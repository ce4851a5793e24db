"""trace_graph against live LangGraph graphs and the real OpenTelemetry SDK.

Each run's emitted start state and patches, replayed with `jsonpatch`, must give LangGraph's
own record (`get_state_history`) at every superstep, each digest must match the canonical
JSON of that state, and each superstep must name its writers, their own updates and the
reducers that merged them.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import operator
import re
import threading
import time
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, Send, interrupt
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from producer_evidence import Capture, Evidence, Step, attrs, reducers, writes
from statetrail_producer import StateJournal
from statetrail_producer.langgraph import trace_graph


def biggest(current: int, update: int) -> int:
    return max(current, update)


class Brief(TypedDict, total=False):
    topic: str
    notes: Annotated[list[str], operator.add]
    draft: str


class Fan(TypedDict, total=False):
    items: Annotated[list[str], operator.add]
    top: Annotated[int, biggest]
    name: str


class Loop(TypedDict):
    count: int
    trail: Annotated[list[int], operator.add]

class MapReduce(TypedDict, total=False):
    subjects: list[str]
    jokes: Annotated[list[str], operator.add]
    subject: str

class Odd(TypedDict, total=False):
    blob: bytes
    when: datetime.datetime
    ratio: float
    tags: set[str]


def _thread(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def _brief_graph() -> StateGraph[Brief]:
    def research(state: Brief) -> Brief:
        return {"notes": ["found 3 sources"]}

    def outline(state: Brief) -> Brief:
        return {"notes": ["outline"], "draft": "outline only"}

    def write(state: Brief) -> Brief:
        return {"draft": f"{state['topic']}: {', '.join(state['notes'])}"}

    builder = StateGraph(Brief)
    builder.add_node("research", research)
    builder.add_node("outline", outline)
    builder.add_node("write", write)
    builder.add_edge(START, "research")
    builder.add_edge("research", "outline")
    builder.add_edge("outline", "write")
    builder.add_edge("write", END)
    return builder


def _single_node(schema: Any, node: Any, capture: Capture) -> Any:
    """A traced one-node graph over `schema`, with an in-memory checkpointer."""
    builder = StateGraph(schema)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    return trace_graph(builder.compile(checkpointer=InMemorySaver()),
                       tracer_provider=capture.provider)


def _history_by_step(app: Any, config: RunnableConfig) -> dict[int, dict[str, Any]]:
    return {s.metadata["step"]: dict(s.values) for s in app.get_state_history(config)}


def _assert_matches_history(steps: list[Step], history: dict[int, dict[str, Any]]) -> None:
    """Each replayed state equals LangGraph's checkpoint of the same step (sequence - 1)."""
    assert len(steps) >= 2
    for step in steps:
        assert step.state == history[step.sequence - 1], step.sequence


def _only_run(evidence: Evidence, **match: Any) -> str:
    (owner,) = evidence.owners(**match)
    return str(attrs(owner)["statetrail.run.id"])


def test_producer_langgraph_sequential_run_replays_to_every_checkpoint() -> None:
    capture = Capture()
    app = trace_graph(_brief_graph().compile(checkpointer=InMemorySaver()), name="brief",
                      tracer_provider=capture.provider)
    result = app.invoke({"topic": "otters"}, _thread("t-seq"))
    assert result["draft"] == "otters: found 3 sources, outline"
    evidence = capture.evidence()
    run_id = _only_run(evidence, run_kind="graph")
    steps = evidence.replay(run_id)
    _assert_matches_history(steps, _history_by_step(app, _thread("t-seq")))
    assert evidence.verified_end(run_id) == result
    actions = [s.attributes["statetrail.transition.action"] for s in steps[1:]]
    assert actions == ["__start__", "research", "outline", "write"]
    outline = steps[3].attributes
    assert writes(outline) == [{"writer": "outline", "task_id": writes(outline)[0]["task_id"],
                                "update": {"notes": ["outline"], "draft": "outline only"}}]
    assert reducers(outline) == {"notes": "operator.add", "draft": "last_value"}
    owner = attrs(evidence.owner(run_id))
    assert owner["statetrail.run.status"] == "completed"
    assert owner["statetrail.store.id"] == "t-seq"
    assert owner["statetrail.framework.name"] == "langgraph"
    graph = json.loads(evidence.start(run_id)["statetrail.graph"])
    assert {"source": "research", "target": "outline", "conditional": False,
            "label": None} in graph["edges"]


def test_producer_langgraph_fan_out_names_each_writer_and_reducer() -> None:
    def analyst(state: Fan) -> Fan:
        return {"items": ["analysis"], "top": 3}

    def critic(state: Fan) -> Fan:
        return {"items": ["critique"], "top": 5, "name": "critic"}

    def merge(state: Fan) -> Fan:
        return {"top": 4, "name": "merged"}

    builder = StateGraph(Fan)
    builder.add_node("analyst", analyst)
    builder.add_node("critic", critic)
    builder.add_node("merge", merge)
    builder.add_edge(START, "analyst")
    builder.add_edge(START, "critic")
    builder.add_edge(["analyst", "critic"], "merge")
    capture = Capture()
    app = trace_graph(builder.compile(checkpointer=InMemorySaver()),
                      tracer_provider=capture.provider)
    result = app.invoke({"name": "start"}, _thread("t-fan"))
    assert result["top"] == 5 and sorted(result["items"]) == ["analysis", "critique"]
    evidence = capture.evidence()
    run_id = _only_run(evidence)
    steps = evidence.replay(run_id)
    _assert_matches_history(steps, _history_by_step(app, _thread("t-fan")))
    parallel = steps[2].attributes
    by_writer = {w["writer"]: w["update"] for w in writes(parallel)}
    assert by_writer == {"analyst": {"items": ["analysis"], "top": 3},
                         "critic": {"items": ["critique"], "top": 5, "name": "critic"}}
    assert reducers(parallel) == {"items": "operator.add",
                                  "top": f"{__name__}.biggest", "name": "last_value"}
    assert sorted(parallel["statetrail.transition.action"].split(", ")) == ["analyst", "critic"]
    # The custom reducer kept 5 against merge's 4: the state says so, the write says 4.
    assert writes(steps[3].attributes)[0]["update"]["top"] == 4
    assert steps[3].state["top"] == 5


def test_producer_langgraph_conditional_loop_records_each_pass() -> None:
    def bump(state: Loop) -> dict[str, Any]:
        return {"count": state["count"] + 1, "trail": [state["count"]]}

    builder = StateGraph(Loop)
    builder.add_node("bump", bump)
    builder.add_edge(START, "bump")
    builder.add_conditional_edges("bump", lambda s: "bump" if s["count"] < 4 else END)
    capture = Capture()
    app = trace_graph(builder.compile(checkpointer=InMemorySaver()),
                      tracer_provider=capture.provider)
    assert app.invoke({"count": 0, "trail": []}, _thread("t-loop"))["count"] == 4
    evidence = capture.evidence()
    run_id = _only_run(evidence)
    steps = evidence.replay(run_id)
    _assert_matches_history(steps, _history_by_step(app, _thread("t-loop")))
    assert [s.attributes["statetrail.transition.action"] for s in steps[2:]] == ["bump"] * 4
    assert [s.attributes["statetrail.transition.step"] for s in steps[1:]] == [0, 1, 2, 3, 4]


def _sub_builder() -> StateGraph[Brief]:
    def note(state: Brief) -> Brief:
        return {"notes": ["sub-note"]}

    def ask(state: Brief) -> Brief:
        answer = interrupt("approve?")
        return {"draft": f"approved by {answer}"}

    sub = StateGraph(Brief)
    sub.add_node("note", note)
    sub.add_node("ask", ask)
    sub.add_edge(START, "note")
    sub.add_edge("note", "ask")
    return sub


def _outer_with(subgraph: Any) -> StateGraph[Brief]:
    def prepare(state: Brief) -> Brief:
        return {"notes": ["prepared"]}

    outer = StateGraph(Brief)
    outer.add_node("prepare", prepare)
    outer.add_node("review", subgraph)
    outer.add_edge(START, "prepare")
    outer.add_edge("prepare", "review")
    return outer


def test_producer_langgraph_interrupt_in_subgraph_then_resume_share_stores() -> None:
    capture = Capture()
    app = trace_graph(_outer_with(_sub_builder().compile()).compile(checkpointer=InMemorySaver()),
                      name="outer", tracer_provider=capture.provider)
    config = _thread("t-int")
    first = app.invoke({"topic": "otters"}, config)
    assert "__interrupt__" in first
    evidence = capture.evidence()
    (first_run,) = [s for s in evidence.owners(run_kind="graph")]
    first_id = str(attrs(first_run)["statetrail.run.id"])
    assert attrs(first_run)["statetrail.run.status"] == "interrupted"
    (sub_owner,) = evidence.owners(run_kind="subgraph")
    sub_attributes = attrs(sub_owner)
    assert sub_attributes["statetrail.run.status"] == "interrupted"
    assert sub_attributes["statetrail.run.parent_id"] == first_id
    assert sub_attributes["statetrail.run.name"] == "review"
    sub_store = str(sub_attributes["statetrail.store.id"])
    assert sub_store.startswith("t-int|review:")
    sub_steps = evidence.replay(str(sub_attributes["statetrail.run.id"]))
    namespace = sub_store.split("|", 1)[1]
    sub_config: RunnableConfig = {"configurable": {"thread_id": "t-int",
                                                   "checkpoint_ns": namespace}}
    _assert_matches_history(sub_steps, _history_by_step(app, sub_config))

    second = app.invoke(Command(resume="ann"), config)
    assert second["draft"] == "approved by ann"
    evidence = capture.evidence()
    runs = sorted(evidence.owners(run_kind="graph"),
                  key=lambda s: attrs(s)["statetrail.store.sequence.start"])
    assert [attrs(r)["statetrail.store.id"] for r in runs] == ["t-int", "t-int"]
    one, two = (attrs(r) for r in runs)
    assert two["statetrail.run.status"] == "completed"
    assert two["statetrail.store.sequence.start"] == one["statetrail.store.sequence.end"]
    assert two["statetrail.state.start.digest"] == one["statetrail.state.end.digest"]
    history = _history_by_step(app, config)
    for owner in (one, two):
        _assert_matches_history(evidence.replay(str(owner["statetrail.run.id"])), history)
    resumed_subs = [attrs(s) for s in evidence.owners(run_kind="subgraph")]
    assert {s["statetrail.store.id"] for s in resumed_subs} == {sub_store}
    resumed = max(resumed_subs, key=lambda s: s["statetrail.store.sequence.start"])
    assert resumed["statetrail.run.status"] == "completed"
    assert resumed["statetrail.run.parent_id"] == two["statetrail.run.id"]
    _assert_matches_history(evidence.replay(str(resumed["statetrail.run.id"])),
                            _history_by_step(app, sub_config))


def test_producer_langgraph_failing_node_ends_the_run_with_its_error() -> None:
    def boom(state: Brief) -> Brief:
        raise ValueError("model returned garbage")

    builder = StateGraph(Brief)
    builder.add_node("research", lambda s: {"notes": ["n"]})
    builder.add_node("boom", boom)
    builder.add_edge(START, "research")
    builder.add_edge("research", "boom")
    capture = Capture()
    app = trace_graph(builder.compile(checkpointer=InMemorySaver()),
                      tracer_provider=capture.provider)
    with pytest.raises(ValueError, match="garbage"):
        app.invoke({"topic": "t"}, _thread("t-err"))
    evidence = capture.evidence()
    run_id = _only_run(evidence)
    end = evidence.verified_end(run_id)
    assert end == dict(app.get_state(_thread("t-err")).values)
    owner = evidence.owner(run_id)
    attributes = attrs(owner)
    assert attributes["statetrail.run.status"] == "failed"
    assert attributes["statetrail.run.error.action"] == "boom"
    assert attributes["error.type"] == "ValueError"
    assert not owner.status.is_ok
    assert [e.name for e in owner.events] == ["exception"]


def test_producer_langgraph_send_map_reduce_records_each_mapped_task() -> None:
    def fan_out(state: MapReduce) -> list[Send]:
        return [Send("joke", {"subject": s}) for s in state["subjects"]]

    def joke(state: MapReduce) -> dict[str, Any]:
        return {"jokes": [f"a {state['subject']} joke"]}

    builder = StateGraph(MapReduce)
    builder.add_node("joke", joke)
    builder.add_conditional_edges(START, fan_out, ["joke"])
    capture = Capture()
    app = trace_graph(builder.compile(checkpointer=InMemorySaver()),
                      tracer_provider=capture.provider)
    result = app.invoke({"subjects": ["cats", "dogs", "otters"]}, _thread("t-send"))
    assert sorted(result["jokes"]) == ["a cats joke", "a dogs joke", "a otters joke"]
    evidence = capture.evidence()
    run_id = _only_run(evidence)
    steps = evidence.replay(run_id)
    _assert_matches_history(steps, _history_by_step(app, _thread("t-send")))
    mapped = steps[-1].attributes
    assert sorted((w["writer"], w["update"]["jokes"][0]) for w in writes(mapped)) == [
        ("joke", "a cats joke"), ("joke", "a dogs joke"), ("joke", "a otters joke")]
    assert len({w["task_id"] for w in writes(mapped)}) == 3
    assert reducers(mapped) == {"jokes": "operator.add"}


def test_producer_langgraph_without_checkpointer_behaves_as_before() -> None:
    capture = Capture()
    plain = _brief_graph().compile()
    app = trace_graph(_brief_graph().compile(), tracer_provider=capture.provider)
    assert app.invoke({"topic": "x"}) == plain.invoke({"topic": "x"})
    with pytest.raises(ValueError, match="No checkpointer set"):
        app.get_state(_thread("anything"))
    evidence = capture.evidence()
    run_id = _only_run(evidence)
    assert len(evidence.replay(run_id)) == 5
    store = (evidence.owner(run_id).attributes or {})["statetrail.store.id"]
    assert str(store).startswith("statetrail-")
    app.invoke({"topic": "y"})
    stores = {attrs(s)["statetrail.store.id"] for s in capture.evidence().owners()}
    assert len(stores) == 2, "each run without a checkpointer is a store of its own"


@pytest.mark.parametrize("call", [
    {"stream_mode": "updates"},
    {"stream_mode": "values"},
    {"stream_mode": ["updates", "values"]},
    {"stream_mode": "values", "subgraphs": True},
    {"stream_mode": ["updates", "custom"], "subgraphs": True},
    {"stream_mode": "updates", "version": "v2"},
    {"stream_mode": ["values", "updates"], "subgraphs": True, "version": "v2"},
])
def test_producer_langgraph_streams_exactly_what_the_caller_asked(call: dict[str, Any]) -> None:
    def chunks(app: Any, thread: str) -> list[Any]:
        out = list(app.stream({"topic": "x"}, _thread(thread), **call))
        shaped: list[Any] = json.loads(json.dumps(out, default=repr).replace(thread, "T"))
        return shaped

    def build() -> Any:
        return _outer_with(_brief_graph().compile()).compile(checkpointer=InMemorySaver())

    capture = Capture()
    traced = chunks(trace_graph(build(), tracer_provider=capture.provider), "t-a")
    plain = chunks(build(), "t-b")
    # Task ids differ per thread; compare shapes and values without them.
    assert _without_task_ids(traced) == _without_task_ids(plain)
    assert capture.evidence().owners(run_kind="graph")


def _without_task_ids(value: Any) -> Any:
    text = json.dumps(value)
    return json.loads(re.sub(r":[0-9a-f-]{36}", ":ID", text))


def test_producer_langgraph_async_calls_record_the_same_evidence() -> None:
    capture = Capture()
    app = trace_graph(_brief_graph().compile(checkpointer=InMemorySaver()),
                      tracer_provider=capture.provider)

    async def run() -> tuple[dict[str, Any], list[Any]]:
        result = await app.ainvoke({"topic": "a"}, _thread("t-async-1"))
        streamed = [c async for c in app.astream({"topic": "b"}, _thread("t-async-2"),
                                                 stream_mode="updates")]
        return result, streamed

    result, streamed = asyncio.run(run())
    assert result["draft"] == "a: found 3 sources, outline"
    assert [next(iter(c)) for c in streamed] == ["research", "outline", "write"]
    evidence = capture.evidence()
    for thread in ("t-async-1", "t-async-2"):
        run_id = _only_run(evidence, store_id=thread)
        _assert_matches_history(evidence.replay(run_id), _history_by_step(app, _thread(thread)))


def test_producer_langgraph_spans_leave_while_the_run_is_in_flight() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=50))
    seen: dict[str, Any] = {}

    def exported_names() -> set[str]:
        return {e.name for s in exporter.get_finished_spans() for e in s.events}

    def research(state: Brief) -> Brief:
        return {"notes": ["found"]}

    def slow_write(state: Brief) -> Brief:
        # The run is still going: the batch processor must already have sent its start
        # and its first transitions, and not its execution span.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            sent = [e for s in exporter.get_finished_spans() for e in s.events
                    if e.name == "statetrail.transition"]
            if len(sent) >= 2:
                break
            time.sleep(0.02)
        seen["events"] = exported_names()
        seen["transitions"] = sorted(
            e.attributes["statetrail.transition.action"] for s in exporter.get_finished_spans()
            for e in s.events if e.name == "statetrail.transition" and e.attributes)
        seen["owners"] = [s for s in exporter.get_finished_spans()
                          if (s.attributes or {}).get("statetrail.span_type") == "execution"]
        seen["thread"] = threading.current_thread().name
        return {"draft": "done"}

    builder = StateGraph(Brief)
    builder.add_node("research", research)
    builder.add_node("write", slow_write)
    builder.add_edge(START, "research")
    builder.add_edge("research", "write")
    app = trace_graph(builder.compile(checkpointer=InMemorySaver()), tracer_provider=provider)
    app.invoke({"topic": "live"}, _thread("t-live"))
    provider.force_flush()
    assert "statetrail.run.start" in seen["events"]
    assert seen["transitions"] == ["__start__", "research"]
    assert seen["owners"] == []
    evidence = Evidence(exporter.get_finished_spans())
    evidence.verified_end(_only_run(evidence))
    provider.shutdown()


def test_producer_langgraph_non_json_state_values_are_projected_and_verify() -> None:
    def node(state: Odd) -> dict[str, Any]:
        return {"ratio": float("nan"), "tags": {"b", "a"},
                "when": datetime.datetime(2025, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)}

    capture = Capture()
    app = _single_node(Odd, node, capture)
    app.invoke({"blob": b"\x00\xff", "ratio": 0.5}, _thread("t-odd"))
    evidence = capture.evidence()
    end = evidence.verified_end(_only_run(evidence))
    assert end == {"blob": "AP8=", "ratio": "NaN", "tags": ["a", "b"],
                   "when": "2025-01-02T03:04:05+00:00"}


def test_producer_langgraph_journal_inside_a_node_names_the_graph_run_as_parent() -> None:
    capture = Capture()

    def node(state: Brief) -> Brief:
        with StateJournal("side-store", tracer_provider=capture.provider).start({}) as journal:
            journal.set("seen", state["topic"])
        return {"draft": "ok"}

    app = _single_node(Brief, node, capture)
    app.invoke({"topic": "x"}, _thread("t-nested"))
    evidence = capture.evidence()
    graph_run = _only_run(evidence, run_kind="graph")
    (journal,) = evidence.owners(run_kind="journal")
    assert attrs(journal)["statetrail.run.parent_id"] == graph_run
    assert journal.parent is not None
    assert journal.context.trace_id == evidence.owner(graph_run).context.trace_id


def test_producer_langgraph_without_an_sdk_runs_untouched() -> None:
    from opentelemetry.trace import NoOpTracerProvider

    app = trace_graph(_brief_graph().compile(checkpointer=InMemorySaver()),
                      tracer_provider=NoOpTracerProvider())
    plain = _brief_graph().compile(checkpointer=InMemorySaver())
    assert app.invoke({"topic": "z"}, _thread("t-noop")) == plain.invoke({"topic": "z"},
                                                                        _thread("t-noop"))
    assert list(app.stream({"topic": "z"}, _thread("t-noop-2"), stream_mode="updates")) == list(
        plain.stream({"topic": "z"}, _thread("t-noop-2"), stream_mode="updates"))


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def test_producer_langgraph_add_messages_history_replays_as_message_dumps() -> None:
    def reply(state: Chat) -> dict[str, Any]:
        return {"messages": [AIMessage(content=f"echo: {state['messages'][-1].content}",
                                       id="ai-1")]}

    capture = Capture()
    app = _single_node(Chat, reply, capture)
    app.invoke({"messages": [HumanMessage(content="hi", id="h-1")]}, _thread("t-chat"))
    evidence = capture.evidence()
    steps = evidence.replay(_only_run(evidence))
    history = {step: {k: [m.model_dump(mode="json") for m in v] for k, v in values.items()}
               for step, values in _history_by_step(app, _thread("t-chat")).items()}
    _assert_matches_history(steps, history)
    assert reducers(steps[-1].attributes) == {"messages": "langgraph.graph.message.add_messages"}
    assert steps[-1].state["messages"][-1]["content"] == "echo: hi"
