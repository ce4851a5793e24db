"""Applications instrumented with statetrail-producer, run against a live `statetrail serve`.

Usage: python convention_app.py <grpc target> <api key> <scenario>...

Each scenario runs real LangGraph graphs, LlamaIndex workflows or a StateJournal under the
global TracerProvider, exported by the real OTLP gRPC exporter through a BatchSpanProcessor.
It prints one JSON line: the scenario, the runs it made (read from the spans the SDK ended,
through an in-memory exporter beside the real one) and the library's own record of each
store: `{"<store id>": {"<sequence>": state}}`, LangGraph's `get_state_history` (sequence
= checkpoint step + 1, as docs/convention.md section 7 maps it), the LlamaIndex store's
checkpoint after each write, or the journal's state after each committed change.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import Callable
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from statetrail_producer import StateJournal
from statetrail_producer.langgraph import trace_graph
from statetrail_producer.llama_index import trace_workflow
from test_producer_langgraph import (
    Brief,
    Fan,
    Loop,
    MapReduce,
    _brief_graph,
    _outer_with,
    _sub_builder,
)
from test_producer_llama_index import Writer

SERVICE = "convention-app"
Record = dict[str, dict[int, Any]]


def _thread(thread_id: str, namespace: str = "") -> RunnableConfig:
    configurable: dict[str, Any] = {"thread_id": thread_id}
    if namespace:
        configurable["checkpoint_ns"] = namespace
    return {"configurable": configurable}


def _history(app: Any, config: RunnableConfig) -> dict[int, Any]:
    return {s.metadata["step"] + 1: dict(s.values) for s in app.get_state_history(config)}


def lg_sequential() -> Record:
    app = trace_graph(_brief_graph().compile(checkpointer=InMemorySaver()), name="brief")
    app.invoke({"topic": "otters"}, _thread("t-seq"))
    return {"t-seq": _history(app, _thread("t-seq"))}


def lg_fanout() -> Record:
    builder = StateGraph(Fan)
    builder.add_node("analyst", lambda s: {"items": ["analysis"], "top": 3})
    builder.add_node("critic", lambda s: {"items": ["critique"], "top": 5, "name": "critic"})
    builder.add_node("merge", lambda s: {"top": 4, "name": "merged"})
    builder.add_edge(START, "analyst")
    builder.add_edge(START, "critic")
    builder.add_edge(["analyst", "critic"], "merge")
    app = trace_graph(builder.compile(checkpointer=InMemorySaver()), name="fan")
    app.invoke({"name": "start"}, _thread("t-fan"))
    return {"t-fan": _history(app, _thread("t-fan"))}


def lg_loop() -> Record:
    builder = StateGraph(Loop)
    builder.add_node("bump", lambda s: {"count": s["count"] + 1, "trail": [s["count"]]})
    builder.add_edge(START, "bump")
    builder.add_conditional_edges("bump", lambda s: "bump" if s["count"] < 4 else END)
    app = trace_graph(builder.compile(checkpointer=InMemorySaver()), name="loop")
    app.invoke({"count": 0, "trail": []}, _thread("t-loop"))
    return {"t-loop": _history(app, _thread("t-loop"))}


def _committee_review() -> StateGraph[Brief]:
    """A subgraph that runs through without interrupting."""
    sub = StateGraph(Brief)
    sub.add_node("note", lambda s: {"notes": ["sub-note"]})
    sub.add_node("approve", lambda s: {"draft": "approved by the committee"})
    sub.add_edge(START, "note")
    sub.add_edge("note", "approve")
    return sub


def _with_subgraph_stores(app: Any, thread: str, record: Record, stores: list[str]) -> Record:
    for store in stores:
        if store.startswith(thread + "|"):
            record[store] = _history(app, _thread(thread, store.split("|", 1)[1]))
    return record


def lg_subgraph(stores: Callable[[], list[str]]) -> Record:
    graph = _outer_with(_committee_review().compile())
    app = trace_graph(graph.compile(checkpointer=InMemorySaver()), name="outer")
    app.invoke({"topic": "otters"}, _thread("t-sub"))
    return _with_subgraph_stores(app, "t-sub", {"t-sub": _history(app, _thread("t-sub"))},
                                 stores())


def lg_interrupt(stores: Callable[[], list[str]]) -> Record:
    app = trace_graph(_outer_with(_sub_builder().compile()).compile(checkpointer=InMemorySaver()),
                      name="approval")
    first = app.invoke({"topic": "otters"}, _thread("t-int"))
    assert "__interrupt__" in first
    app.invoke(Command(resume="ann"), _thread("t-int"))
    return _with_subgraph_stores(app, "t-int", {"t-int": _history(app, _thread("t-int"))},
                                 stores())


def lg_failing() -> Record:
    def boom(state: Brief) -> Brief:
        raise ValueError("model returned garbage")

    builder = StateGraph(Brief)
    builder.add_node("research", lambda s: {"notes": ["n"]})
    builder.add_node("boom", boom)
    builder.add_edge(START, "research")
    builder.add_edge("research", "boom")
    app = trace_graph(builder.compile(checkpointer=InMemorySaver()), name="failing")
    with contextlib.suppress(ValueError):
        app.invoke({"topic": "t"}, _thread("t-err"))
    return {"t-err": _history(app, _thread("t-err"))}


def lg_send() -> Record:
    def fan_out(state: MapReduce) -> list[Send]:
        return [Send("joke", {"subject": s}) for s in state["subjects"]]

    builder = StateGraph(MapReduce)
    builder.add_node("joke", lambda s: {"jokes": [f"a {s['subject']} joke"]})
    builder.add_conditional_edges(START, fan_out, ["joke"])
    app = trace_graph(builder.compile(checkpointer=InMemorySaver()), name="jokes")
    app.invoke({"subjects": ["cats", "dogs", "otters"]}, _thread("t-send"))
    return {"t-send": _history(app, _thread("t-send"))}


def _llama(fail: bool) -> Record:
    record: list[dict[str, Any]] = []
    wf = trace_workflow(Writer(record, fail=fail), name="writer")

    async def run() -> None:
        try:
            await wf.run(topic="otters")
        except RuntimeError:
            assert fail

    asyncio.run(run())
    # The store id is the producer's; the test pairs it with the run's own store.
    return {"*": dict(enumerate(record, 1))}


def journal() -> Record:
    states: dict[int, Any] = {}
    with StateJournal("refund", store_id="order-7").start({"status": "new"}) as j:
        j.set("status", "checking")
        states[j.sequence] = j.state
        with j.transaction(action="approve"):
            j.set("/refund", {"amount": 12.5})
            j.set("status", "approved")
        states[j.sequence] = j.state
        try:
            with j.transaction(action="charge"):
                j.set("status", "charged")
                raise RuntimeError("card declined")
        except RuntimeError:
            pass
        j.reject({"amount": -1}, "/refund/amount", "must be positive", action="adjust")
        j.remove("/refund/amount")
        states[j.sequence] = j.state
    return {"order-7": states}


def _nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"deeper": value}
    return value


def hostile() -> Record:
    states: dict[int, Any] = {}
    with StateJournal("hostile", store_id="hostile-1").start({}) as j:
        j.set("script", "<script>alert('x')</script>")
        states[j.sequence] = j.state
        j.set("huge", "x" * 2_000_000)
        states[j.sequence] = j.state
        j.set("deep", _nested(100))
        states[j.sequence] = j.state
        # Past the producer's max_depth (128): cut, and the state says it is truncated.
        j.set("deeper", _nested(300))
        states[j.sequence] = j.state
        j.set("<img src=x onerror=alert(1)>", [1.5, 1e21, -0.0, "\u2028", "\U0001f600"])
        states[j.sequence] = j.state
    return {"hostile-1": states}


def main(argv: list[str]) -> None:
    endpoint, api_key, *names = argv
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(
        endpoint=endpoint, insecure=True, headers={"authorization": f"Bearer {api_key}"}
    )))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    trace.set_tracer_provider(provider)

    def stores() -> list[str]:
        return [str(r["store"]) for r in _runs(memory)]

    scenarios: dict[str, Callable[[], Record]] = {
        "lg_sequential": lg_sequential, "lg_fanout": lg_fanout, "lg_loop": lg_loop,
        "lg_subgraph": lambda: lg_subgraph(stores), "lg_interrupt": lambda: lg_interrupt(stores),
        "lg_failing": lg_failing, "lg_send": lg_send,
        "li_writes": lambda: _llama(fail=False), "li_failing": lambda: _llama(fail=True),
        "journal": journal, "hostile": hostile,
    }
    for name in names:
        memory.clear()
        record = scenarios[name]()
        runs = _runs(memory)
        if "*" in record:
            (run,) = runs
            record = {str(run["store"]): record["*"]}
        print(json.dumps({"scenario": name, "runs": runs, "record": record}), flush=True)
    provider.force_flush()
    provider.shutdown()


def _runs(memory: InMemorySpanExporter) -> list[dict[str, Any]]:
    """Each run the spans ended so far: id, store, kind, status and its sequence interval."""
    found = []
    for span in memory.get_finished_spans():
        attributes = dict(span.attributes or {})
        if attributes.get("statetrail.span_type") != "execution":
            continue
        found.append({
            "run_id": attributes["statetrail.run.id"],
            "store": attributes["statetrail.store.id"],
            "kind": attributes["statetrail.run.kind"],
            "status": attributes["statetrail.run.status"],
            "start": attributes["statetrail.store.sequence.start"],
            "end": attributes["statetrail.store.sequence.end"],
            "parent": attributes.get("statetrail.run.parent_id"),
        })
    return found


if __name__ == "__main__":
    main(sys.argv[1:])
