"""Live LangGraph graphs, LlamaIndex workflows and StateJournals exporting to `statetrail serve`.

The applications (tests/convention_app.py) run in their own process with the real OTLP gRPC
exporter behind a BatchSpanProcessor, instrumented by statetrail-producer. The state
statetrail rebuilds at every step must equal the library's own record of that step
(LangGraph's `get_state_history`, the LlamaIndex store's checkpoint, the journal's state),
and every run must verify, digest by digest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.servers import MakeServer, Server

APP = Path(__file__).with_name("convention_app.py")
KEY = "live-convention-key"

Outcome = dict[str, Any]


def _run_app(server: Server, *scenarios: str) -> dict[str, Outcome]:
    completed = subprocess.run(
        [sys.executable, str(APP), server.grpc_target, KEY, *scenarios],
        capture_output=True, text=True, timeout=300, check=False, env=dict(os.environ),
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    lines = [json.loads(line) for line in completed.stdout.splitlines() if line.startswith("{")]
    return {line["scenario"]: line for line in lines}


@pytest.fixture
def served(make_server: MakeServer) -> Server:
    server: Server = make_server("--api-key", KEY)
    return server


def _replayed(server: Server, *scenarios: str) -> dict[str, Outcome]:
    outcomes = _run_app(server, *scenarios)
    server.wait_replayed()
    return outcomes


def _assert_every_step_matches(server: Server, outcome: Outcome) -> None:
    """Every run of the scenario is verified, and its state at each of its sequences is
    the library's own record of that sequence."""
    record = outcome["record"]
    checked = 0
    for run in outcome["runs"]:
        detail = server.get_json(f"/api/executions/{run['run_id']}")
        assert detail["verdict"] == "verified", (run, detail["diagnostics"])
        assert not [d for d in detail["diagnostics"] if d["severity"] == "error"]
        states = record.get(run["store"], {})
        timeline = server.get_json(f"/api/executions/{run['run_id']}/timeline")
        assert [t["sequence"] for t in timeline["transitions"]] == list(
            range(run["start"] + 1, run["end"] + 1)
        )
        for entry in timeline["transitions"]:
            assert entry["verified"] and entry["digest_matched"], entry
            sequence = entry["sequence"]
            if str(sequence) not in states:
                continue
            rebuilt = server.get_json(
                f"/api/executions/{run['run_id']}/state?sequence={sequence}"
            )
            assert rebuilt["verified"]
            assert rebuilt["state"] == states[str(sequence)], (run["store"], sequence)
            checked += 1
    assert checked >= 2


LANGGRAPH = ["lg_sequential", "lg_fanout", "lg_loop", "lg_subgraph", "lg_interrupt",
             "lg_failing", "lg_send"]


def test_live_langgraph_runs_rebuild_to_get_state_history_at_every_step(
    served: Server,
) -> None:
    outcomes = _replayed(served, *LANGGRAPH)
    for name in LANGGRAPH:
        _assert_every_step_matches(served, outcomes[name])
    # The resume after an interrupt is the next run of the same store (the thread).
    interrupted, resumed = sorted(
        (r for r in outcomes["lg_interrupt"]["runs"] if r["kind"] == "graph"),
        key=lambda r: r["start"],
    )
    assert (interrupted["status"], resumed["status"]) == ("interrupted", "completed")
    first = served.get_json(f"/api/executions/{interrupted['run_id']}")["store_runs"]
    second = served.get_json(f"/api/executions/{resumed['run_id']}")["store_runs"]
    assert (first["index"], first["count"], first["next"]["id"]) == (1, 2, resumed["run_id"])
    assert (second["index"], second["previous"]["id"], second["next"]) == (
        2, interrupted["run_id"], None
    )
    # The fan-out superstep names each writer's own update and each field's reducer.
    (fan,) = outcomes["lg_fanout"]["runs"]
    timeline = served.get_json(f"/api/executions/{fan['run_id']}/timeline")
    (parallel,) = [t for t in timeline["transitions"] if t["superstep"] == 1]
    assert {w["writer"]: w["update"] for w in parallel["writes"]} == {
        "analyst": {"items": ["analysis"], "top": 3},
        "critic": {"items": ["critique"], "top": 5, "name": "critic"},
    }
    assert parallel["reducers"] == {
        "items": "operator.add", "top": "test_producer_langgraph.biggest", "name": "last_value"
    }
    page = _page(served, fan["run_id"], step=parallel["sequence"])
    superstep = page[page.index('id="superstep"'):]
    assert "Superstep 1" in superstep and "digest ✓" in superstep
    assert "<code>analyst</code>" in superstep and "<code>critic</code>" in superstep
    assert "<code>top</code> ← <code>test_producer_langgraph.biggest</code>" in superstep
    first_page = _page(served, interrupted["run_id"])
    assert "run 1 of 2" in first_page
    assert f'href="/executions/{resumed["run_id"]}" rel="next"' in first_page
    # The failing node: the run failed, and says where.
    (failed,) = outcomes["lg_failing"]["runs"]
    detail = served.get_json(f"/api/executions/{failed['run_id']}")
    assert (detail["status"], detail["run_status"], detail["error_action"]) == (
        "error", "failed", "boom"
    )


def test_live_llama_index_runs_rebuild_to_the_store_after_every_write(served: Server) -> None:
    outcomes = _replayed(served, "li_writes", "li_failing")
    for name in ("li_writes", "li_failing"):
        _assert_every_step_matches(served, outcomes[name])
    (failed,) = outcomes["li_failing"]["runs"]
    detail = served.get_json(f"/api/executions/{failed['run_id']}")
    assert (detail["status"], detail["framework"], detail["run_status"]) == (
        "error", "llama-index-workflows", "failed"
    )
    assert detail["error_action"] == "review"
    timeline = served.get_json(f"/api/executions/{failed['run_id']}/timeline")
    assert [t["action"] for t in timeline["transitions"]] == ["draft", "draft", "review", "review"]


def test_live_journal_commits_rollbacks_and_rejections(served: Server) -> None:
    outcome = _replayed(served, "journal")["journal"]
    _assert_every_step_matches(served, outcome)
    (run,) = outcome["runs"]
    timeline = served.get_json(f"/api/executions/{run['run_id']}/timeline")
    (committed,) = [t for t in timeline["transitions"] if t["action"] == "approve"]
    assert committed["transaction_id"] and committed["patch"] == [
        {"op": "add", "path": "/refund", "value": {"amount": 12.5}},
        {"op": "replace", "path": "/status", "value": "approved"},
    ]
    rollback, rejection = timeline["notes"]
    assert (rollback["kind"], rollback["action"], rollback["after_sequence"]) == (
        "rollback", "charge", 2
    )
    assert rollback["message"] == "RuntimeError: card declined"
    assert rollback["payload"] == [{"op": "replace", "path": "/status", "value": "charged"}]
    assert (rejection["kind"], rejection["field"], rejection["payload"]) == (
        "rejection", "/refund/amount", {"amount": -1}
    )
    detail = served.get_json(f"/api/executions/{run['run_id']}")
    notes = {d["code"]: d["severity"] for d in detail["diagnostics"]}
    assert notes == {"transaction_rolled_back": "info", "update_rejected": "info"}
    # On the page's timeline, after the step they followed, as changing nothing.
    page = _page(served, run["run_id"], step=2)
    rows = page[page.index('data-sequence="2"'):page.index('data-sequence="3"')]
    assert rows.count('class="x-note-row"') == 2
    assert "rolled back" in rows and "RuntimeError: card declined" in rows
    assert "rejected" in rows and "must be positive" in rows


def _page(server: Server, run_id: str, **params: int) -> str:
    reply = httpx.get(f"{server.url}/executions/{run_id}", params=params, timeout=60)
    assert reply.status_code == 200
    return reply.text


def test_live_hostile_and_huge_values_verify_and_render_escaped(served: Server) -> None:
    outcome = _replayed(served, "hostile")["hostile"]
    _assert_every_step_matches(served, outcome)
    (run,) = outcome["runs"]
    detail = served.get_json(f"/api/executions/{run['run_id']}")
    assert (detail["state_end_mode"], detail["state_end_projection"]) == ("full", "truncated")
    page = httpx.get(f"{served.url}/executions/{run['run_id']}", timeout=60)
    assert page.status_code == 200
    assert "<script>alert(" not in page.text and "<img src=x" not in page.text
    assert "&lt;script&gt;alert(" in page.text
    assert len(page.text) < 1_500_000  # the 2 MB string is shown cut, not whole


def test_live_langgraph_run_in_flight_shows_its_verified_steps_before_its_owner_span(
    served: Server,
) -> None:
    # In this process: the real OTLP exporter behind a BatchSpanProcessor that exports
    # every 50 ms, and a graph whose last node waits until the test has looked.
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, StateGraph
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from statetrail_producer.langgraph import trace_graph
    from test_producer_langgraph import Brief

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(
        OTLPSpanExporter(endpoint=served.grpc_target, insecure=True,
                         headers={"authorization": f"Bearer {KEY}"}),
        schedule_delay_millis=50,
    ))
    release = threading.Event()

    def wait(state: Brief) -> Brief:
        assert release.wait(60)
        return {"draft": "done"}

    builder = StateGraph(Brief)
    builder.add_node("research", lambda s: {"notes": ["found 3 sources"]})
    builder.add_node("wait", wait)
    builder.add_edge(START, "research")
    builder.add_edge("research", "wait")
    app = trace_graph(builder.compile(checkpointer=InMemorySaver()), name="slow",
                      tracer_provider=provider)
    config: Any = {"configurable": {"thread_id": "t-live"}}
    running = threading.Thread(target=app.invoke, args=({"topic": "otters"}, config))
    running.start()
    try:
        timeline = _eventually(lambda: _in_flight_timeline(served, sequences=2))
        history = {
            (s.metadata or {})["step"] + 1: dict(s.values) for s in app.get_state_history(config)
        }
        assert timeline["verdict"] == "in_flight"
        assert [t["action"] for t in timeline["transitions"]] == ["__start__", "research"]
        assert all(t["verified"] and t["digest_matched"] for t in timeline["transitions"])
        run_id = timeline["id"]
        for sequence in (1, 2):
            rebuilt = served.get_json(f"/api/executions/{run_id}/state?sequence={sequence}")
            assert rebuilt["state"] == history[sequence] and rebuilt["verified"]
    finally:
        release.set()
        running.join(60)
        provider.shutdown()
    served.wait_replayed()
    detail = served.get_json(f"/api/executions/{run_id}")
    assert (detail["verdict"], detail["run_status"]) == ("verified", "completed")


def _in_flight_timeline(server: Server, sequences: int) -> dict[str, Any] | None:
    listed = server.get_json("/api/executions?verdict=in_flight")["executions"]
    if not listed:
        return None
    timeline: dict[str, Any] = server.get_json(f"/api/executions/{listed[0]['id']}/timeline")
    return timeline if len(timeline["transitions"]) >= sequences else None


def _eventually(probe: Callable[[], dict[str, Any] | None], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found is not None:
            return found
        time.sleep(0.05)
    raise AssertionError("not seen in time")
