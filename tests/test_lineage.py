"""An execution run inside a node gets the run around it as its parent (store/lineage.py).

Requests are real OTLP bytes taken through the ingest path (decode, extract,
store) into a real DuckDB file, then replayed as the replayer does.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2
from support.otlp_craft import new_span_id, new_trace_id, plain_request

from collector.decode.otlp import DecodedSpan, iter_spans
from collector.jobs.replayer import replay_stores
from collector.model import EvidenceSpan
from collector.producers import junjo
from collector.replay.lineage import enclosing_runs
from collector.store import IngestBatch, Store
from collector.store.replays import SpanLink

TRACE = new_trace_id()
WORKFLOW, NODE, USER, AGENT = (new_span_id() for _ in range(4))


def _span(
    span_id: bytes, parent: bytes, name: str, attributes: dict[str, str | int]
) -> trace_pb2.Span:
    span = trace_pb2.Span(
        trace_id=TRACE, span_id=span_id, parent_span_id=parent, name=name,
        start_time_unix_nano=1_000, end_time_unix_nano=2_000,
    )  # fmt: skip
    for key, value in attributes.items():
        any_value = (
            common_pb2.AnyValue(int_value=value)
            if isinstance(value, int)
            else common_pb2.AnyValue(string_value=value)
        )
        span.attributes.add(key=key, value=any_value)
    return span


def _owner(kind: str, run_id: str, store_id: str, **more: str | int) -> dict[str, str | int]:
    state_key = "junjo.agent.state" if kind == "agent" else "junjo.workflow.state"
    store_key = junjo.AGENT_STORE_ID if kind == "agent" else junjo.WORKFLOW_STORE_ID
    return {
        junjo.SPAN_TYPE: kind, junjo.RUNTIME_ID: run_id, junjo.CONTRACT_VERSION: 3,
        store_key: store_id, f"{state_key}.start": "{}", f"{state_key}.end": "{}",
        junjo.TRANSITION_START: 0, junjo.TRANSITION_END: 0, **more,
    }  # fmt: skip


def workflow_span(parent: bytes = b"") -> trace_pb2.Span:
    return _span(WORKFLOW, parent, "Refund Workflow", _owner("workflow", "run-w", "store-w"))


def node_span() -> trace_pb2.Span:
    attributes: dict[str, str | int] = {
        junjo.SPAN_TYPE: "node", junjo.RUNTIME_ID: "node-1", junjo.PARENT_RUNTIME_ID: "run-w",
    }  # fmt: skip
    return _span(NODE, WORKFLOW, "Triage", attributes)


def user_span(parent: bytes = NODE) -> trace_pb2.Span:
    return _span(USER, parent, "my.app.triage", {})


def agent_span(parent: bytes = USER) -> trace_pb2.Span:
    more: dict[str, str | int] = {junjo.PARENT_TYPE: "node", junjo.PARENT_RUNTIME_ID: "node-1"}
    return _span(AGENT, parent, "Triage Agent", _owner("agent", "run-a", "store-a", **more))


def store_export(store: Store, spans: Sequence[trace_pb2.Span]) -> None:
    """One export through decode, extract and store, then replayed like the replayer does."""
    request = plain_request(TRACE, [], start_unix_nano=0, end_unix_nano=0)
    request.resource_spans[0].scope_spans[0].spans.extend(spans)
    decoded = [s for s in iter_spans(request.SerializeToString()) if isinstance(s, DecodedSpan)]
    result = store.write(
        [IngestBatch([s.record for s in decoded], junjo.extract(iter(decoded)))]
    )
    replay_stores(store, sorted(result.store_ids))


def parent_of(store: Store, run_id: str) -> str | None:
    row = store.execution_row(run_id)
    assert row is not None
    return row.parent_run_id


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store(tmp_path / "lineage.duckdb")
    yield opened
    opened.close()


def test_an_agent_stored_before_its_node_is_linked_when_the_workflow_arrives(
    store: Store,
) -> None:
    # Spans are exported in end order: the agent ends first, the workflow last.
    store_export(store, [agent_span()])
    assert parent_of(store, "run-a") is None  # nothing above it has arrived
    store_export(store, [user_span(), node_span(), workflow_span()])
    assert parent_of(store, "run-a") == "run-w"
    assert [child.run_id for child in store.child_executions("run-w")] == ["run-a"]
    assert parent_of(store, "run-w") is None


def test_a_workflow_under_a_plain_root_span_stays_top_level(store: Store) -> None:
    # An HTTP handler's span around `Workflow.execute()` is no execution.
    store_export(store, [user_span(parent=b""), workflow_span(parent=USER)])
    assert parent_of(store, "run-w") is None


def test_a_cycle_of_parent_spans_ends_the_walk(store: Store) -> None:
    # Telemetry can claim any parent: the user span is its own grandparent here.
    looping = _span(NODE, USER, "loop", {})
    store_export(store, [user_span(parent=NODE), looping, agent_span()])
    assert parent_of(store, "run-a") is None


def _links(*spans: tuple[str, str | None, str]) -> list[SpanLink]:
    """(span id, span type, parent span id) in one trace; an owner's run id is "run-" + its id."""
    return [
        SpanLink(
            EvidenceSpan("t" * 32, span_id, span_id, span_type, 0, 0, 0), parent, 0,
            f"run-{span_id}" if span_type in ("workflow", "subflow", "agent") else None,
        )
        for span_id, span_type, parent in spans
    ]  # fmt: skip


def test_the_walk_links_only_owners_under_a_span_that_owns_no_run() -> None:
    # A workflow at the root with a subflow right under it: extraction linked it.
    flat = _links(("w", "workflow", ""), ("s", "subflow", "w"), ("n", "node", "s"))
    assert enclosing_runs(flat) == []
    # An agent in the subflow's node, under a user span: the subflow's run.
    nested = [*flat, *_links(("u", None, "n"), ("a", "agent", "u"))]
    assert enclosing_runs(nested) == [("run-a", "run-s")]
    # Above it, nothing stored yet, or only plain spans to the root: no link.
    assert enclosing_runs(_links(("a", "agent", "not-yet"))) == []
    assert enclosing_runs(_links(("http", None, ""), ("w", "workflow", "http"))) == []
