"""trace_graph's overhead: one 50-node LangGraph run with a ~2 KB state, with and without it.

The graph is a chain of 50 nodes; each appends a line to a reducer list (`operator.add`),
bumps a counter, and every fifth node rewrites a ~1.5 KB profile dict, so the state stays
around 2 KB and every superstep is a transition. The same graph is compiled twice, plain and
traced, with an `InMemorySaver` (the usual set-up) and without a checkpointer (where the
traced graph runs LangGraph's checkpoint stream with a saver that stores nothing). Both run
under one OpenTelemetry SDK provider with a BatchSpanProcessor whose exporter drops the
batches, so span creation and attribute encoding are counted but no network is. Runs of
the two alternate, each on a fresh thread; the figure is the ratio of median wall times.

Target (printed PASS/FAIL, never asserted): traced / plain <= 1.10 with a checkpointer. The
overhead is a cost per superstep, so the ratio is printed with it in microseconds, and
`--node-ms` gives each node that much work (a sleep, as an LLM call would wait) to show the
ratio of a graph whose nodes do something.

    .venv/bin/python -m bench.bench_producer                 # 200 runs of each
    .venv/bin/python -m bench.bench_producer --runs 50       # a quicker look
    .venv/bin/python -m bench.bench_producer --node-ms 5     # nodes that take 5 ms
"""

from __future__ import annotations

import argparse
import operator
import statistics
import time
import uuid
from collections.abc import Sequence
from typing import Annotated, Any, Final, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from statetrail_producer.langgraph import trace_graph

NODES: Final = 50
TARGET_RATIO: Final = 1.10


class Chain(TypedDict, total=False):
    step: int
    log: Annotated[list[str], operator.add]
    profile: dict[str, str]


class DropExporter(SpanExporter):
    """Accepts every batch and keeps nothing: the SDK's work without a network."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


def _node(index: int, work_seconds: float) -> Any:  # a node function, as add_node types it
    def run(state: Chain) -> dict[str, Any]:
        if work_seconds:
            time.sleep(work_seconds)
        update: dict[str, Any] = {"step": state.get("step", 0) + 1, "log": [f"node {index} ok"]}
        if index % 5 == 0:
            profile = dict(state.get("profile", {}))
            profile[f"k{index % 20:02d}"] = f"value written by node {index} " + "x" * 40
            update["profile"] = profile
        return update

    return run


def build(work_seconds: float = 0.0) -> StateGraph[Chain, None, Chain, Chain]:
    builder: StateGraph[Chain, None, Chain, Chain] = StateGraph(Chain)
    for i in range(NODES):
        builder.add_node(f"n{i}", _node(i, work_seconds))
    builder.add_edge(START, "n0")
    for i in range(NODES - 1):
        builder.add_edge(f"n{i}", f"n{i + 1}")
    builder.add_edge(f"n{NODES - 1}", END)
    return builder


def initial_state() -> Chain:
    return {"step": 0, "log": [],
            "profile": {f"k{i:02d}": "initial profile value " + "y" * 50 for i in range(20)}}


def measure(runs: int, checkpointer: bool, provider: TracerProvider,
            work_seconds: float) -> tuple[float, float]:
    """Median seconds per run of the plain and the traced graph, runs alternating."""
    def saver() -> InMemorySaver | None:
        return InMemorySaver() if checkpointer else None

    plain = build(work_seconds).compile(checkpointer=saver())
    traced = trace_graph(build(work_seconds).compile(checkpointer=saver()), name="chain",
                         tracer_provider=provider)
    times: dict[str, list[float]] = {"plain": [], "traced": []}
    for i in range(runs + 5):
        for label, app in (("plain", plain), ("traced", traced)):
            config: RunnableConfig = {"configurable": {"thread_id": uuid.uuid4().hex}}
            started = time.perf_counter()
            result = app.invoke(initial_state(), config)
            elapsed = time.perf_counter() - started
            assert result["step"] == NODES
            if i >= 5:  # the first runs warm caches and imports
                times[label].append(elapsed)
    return statistics.median(times["plain"]), statistics.median(times["traced"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--node-ms", type=float, default=0.0, help="work per node (a sleep)")
    args = parser.parse_args()
    exporter = DropExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    state_bytes = len(str(initial_state()))
    print(f"{NODES} nodes, start state ~{state_bytes} bytes, {args.node_ms} ms of work a node, "
          f"{args.runs} runs of each")
    for checkpointer in (True, False):
        plain, traced = measure(args.runs, checkpointer, provider, args.node_ms / 1000)
        ratio = traced / plain
        per_step = (traced - plain) / (NODES + 1) * 1e6
        label = "InMemorySaver" if checkpointer else "no checkpointer"
        verdict = ("PASS" if ratio <= TARGET_RATIO else "FAIL") if checkpointer else "info"
        print(f"{label:16} plain {plain * 1000:7.2f} ms  traced {traced * 1000:7.2f} ms  "
              f"ratio {ratio:.3f}  {verdict} (target <= {TARGET_RATIO})  "
              f"+{per_step:.0f} us a superstep")
    provider.force_flush()
    print(f"spans exported: {exporter.spans}")
    provider.shutdown()


if __name__ == "__main__":
    main()
