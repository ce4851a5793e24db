"""The state-evidence convention through the collector's own stages, on a real DuckDB file.

Spans come from statetrail-producer under the real OpenTelemetry SDK, encoded by the OTLP
exporter's own encoder into export requests, which are decoded, extracted
(collector/producers/convention.py), stored and replayed as `serve` does. Some requests are
altered on the way (a digest, the convention version, the order of delivery) to show what
replay says about evidence that is wrong, unknown or late.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.sdk.trace import ReadableSpan
from producer_evidence import Capture
from statetrail_producer import StateJournal
from statetrail_producer import canonical as producer_canonical
from statetrail_producer.langgraph import trace_graph

from collector.encode.exports import batch_from_export
from collector.evidence import load_history, load_in_flight_history
from collector.replay import walk
from collector.replay.canonical import EMPTY_STATE_DIGEST, canonical_json, state_digest
from collector.replay.history import History
from collector.replay.jsondoc import DocumentLimits
from collector.store import Store

Tamper = Callable[[trace_pb2.Span], None]


def _requests(spans: Iterable[ReadableSpan], tamper: Tamper | None = None) -> list[bytes]:
    """One export request per span, in the order the SDK ended them."""
    bodies = []
    for span in spans:
        request = encode_spans([span])
        if tamper is not None:
            for resource_spans in request.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    for proto in scope_spans.spans:
                        tamper(proto)
        bodies.append(request.SerializeToString())
    return bodies


def _store(tmp_path: Path, bodies: Iterable[bytes]) -> Store:
    store = Store(tmp_path / "convention.duckdb")
    for body in bodies:
        store.write([batch_from_export(body)])
    return store


def _history(store: Store, run_id: str) -> History:
    execution = store.get_execution(run_id)
    assert execution is not None
    history, _ = load_history(store, execution)
    return history


def _codes(history: History) -> dict[str, str]:
    return {d.code: d.severity for d in history.diagnostics}


def _journal(capture: Capture) -> tuple[str, list[dict[str, Any]]]:
    states = []
    journal = StateJournal("refund", store_id="order-1", tracer_provider=capture.provider)
    with journal.start({"status": "new"}) as j:
        j.set("status", "checking")
        states.append(j.state)
        with j.transaction(action="approve"):
            j.set("/refund", {"amount": 12.5})
        states.append(j.state)
        try:
            with j.transaction(action="charge"):
                j.set("status", "charged")
                raise RuntimeError("declined")
        except RuntimeError:
            pass
        j.reject({"amount": -1}, "/refund/amount", "must be positive")
        j.set("status", "done")
        states.append(j.state)
    return journal.run_id, states


def test_convention_runs_extract_into_executions_transitions_and_notes(tmp_path: Path) -> None:
    capture = Capture()
    run_id, states = _journal(capture)
    store = _store(tmp_path, _requests(capture.exporter.get_finished_spans()))
    execution = store.get_execution(run_id)
    assert execution is not None
    assert (execution.kind, execution.framework, execution.run_status) == (
        "journal", "statetrail-journal", "completed"
    )
    # The start state came on the start event, stored before the owner span.
    assert execution.state_start == '{"status":"new"}'
    transitions = store.transitions_for_store("order-1")
    assert [t.note_kind for t in transitions] == [None, None, None, "rollback", "rejection"]
    history = _history(store, run_id)
    assert history.verdict == "verified"
    assert [history.state_at(s) for s in (1, 2, 3)] == states
    assert all(step.digest_matched for step in history.steps)
    assert [n.note_kind for n in history.notes] == ["rollback", "rejection"]
    assert _codes(history) == {"transaction_rolled_back": "info", "update_rejected": "info"}


def _set_event_attribute(key: str, value: common_pb2.AnyValue, sequence: int) -> Tamper:
    def tamper(span: trace_pb2.Span) -> None:
        for event in span.events:
            found = {kv.key: kv.value for kv in event.attributes}
            if found.get("statetrail.store.sequence", common_pb2.AnyValue()).int_value == sequence:
                for kv in event.attributes:
                    if kv.key == key:
                        kv.value.CopyFrom(value)

    return tamper


def test_convention_replay_flags_the_step_whose_digest_differs(tmp_path: Path) -> None:
    capture = Capture()
    run_id, _ = _journal(capture)
    wrong = common_pb2.AnyValue(string_value=EMPTY_STATE_DIGEST)
    bodies = _requests(
        capture.exporter.get_finished_spans(),
        _set_event_attribute("statetrail.state.digest", wrong, sequence=2),
    )
    history = _history(_store(tmp_path, bodies), run_id)
    assert [step.digest_matched for step in history.steps] == [True, False, True]
    assert [step.verified for step in history.steps] == [True, False, False]
    assert history.verdict == "partial"
    (mismatch,) = [d for d in history.diagnostics if d.code == "state_digest_mismatch"]
    assert (mismatch.severity, mismatch.sequence) == ("error", 2)


def test_convention_replay_flags_a_start_state_that_is_not_the_one_hashed(
    tmp_path: Path,
) -> None:
    capture = Capture()
    run_id, _ = _journal(capture)

    def other_start(span: trace_pb2.Span) -> None:
        for event in span.events:
            for kv in event.attributes:
                if kv.key == "statetrail.state.start":
                    kv.value.string_value = '{"status":"old"}'

    history = _history(_store(tmp_path, _requests(capture.exporter.get_finished_spans(),
                                                  other_start)), run_id)
    assert history.verdict == "failed"
    assert not any(step.verified for step in history.steps)
    assert _codes(history)["state_digest_mismatch"] == "error"


def test_convention_version_unknown_keeps_spans_and_lists_the_run_unreplayed(
    tmp_path: Path,
) -> None:
    capture = Capture()
    run_id, _ = _journal(capture)

    def version_2(span: trace_pb2.Span) -> None:
        for kv in span.attributes:
            if kv.key == "statetrail.convention.version":
                kv.value.int_value = 2

    spans = capture.exporter.get_finished_spans()
    store = _store(tmp_path, _requests(spans, version_2))
    assert store.transitions_for_store("order-1") == []
    assert store.run_start(run_id) is None
    assert store.counts()["spans"] == len(spans)
    history = _history(store, run_id)
    assert history.verdict == "not_applicable"
    assert _codes(history) == {"unknown_convention_version": "warning"}


def test_convention_start_event_arriving_after_its_owner_still_starts_the_run(
    tmp_path: Path,
) -> None:
    capture = Capture()
    run_id, states = _journal(capture)
    bodies = _requests(capture.exporter.get_finished_spans())
    store = _store(tmp_path, reversed(bodies))
    history = _history(store, run_id)
    assert history.verdict == "verified"
    assert history.state_at(3) == states[-1]


def test_convention_run_in_flight_replays_from_its_start_event(tmp_path: Path) -> None:
    capture = Capture()
    run_id, states = _journal(capture)
    spans = capture.exporter.get_finished_spans()
    owner = [s for s in spans if (s.attributes or {}).get("statetrail.span_type") == "execution"]
    store = _store(tmp_path, _requests(s for s in spans if s not in owner))
    assert store.get_execution(run_id) is None
    (flight,) = store.in_flight(limit=5)
    assert flight.run_id == run_id
    history = load_in_flight_history(store, flight.trace_id, flight.own_store_id, run_id)
    assert history.verdict == "in_flight"
    assert [history.state_at(s) for s in (1, 2, 3)] == states
    assert all(step.verified and step.digest_matched for step in history.steps)


class Count(TypedDict):
    count: int
    trail: Annotated[list[int], operator.add]


def _counter(capture: Capture) -> Any:
    builder = StateGraph(Count)
    builder.add_node("bump", lambda s: {"count": s["count"] + 1, "trail": [s["count"]]})
    builder.add_edge(START, "bump")
    return trace_graph(builder.compile(checkpointer=InMemorySaver()), name="counter",
                       tracer_provider=capture.provider)


def _graph_runs(capture: Capture) -> list[str]:
    owners = [s for s in capture.exporter.get_finished_spans()
              if (s.attributes or {}).get("statetrail.span_type") == "execution"]
    owners.sort(key=lambda s: str(s.end_time).zfill(24))
    return [str((s.attributes or {})["statetrail.run.id"]) for s in owners]


def test_convention_runs_of_one_thread_chain_and_say_when_the_state_changed_between(
    tmp_path: Path,
) -> None:
    capture = Capture()
    app = _counter(capture)
    config: Any = {"configurable": {"thread_id": "t-chain"}}
    app.invoke({"count": 0, "trail": []}, config)
    app.invoke({"count": 5}, config)  # the input step writes: a transition of run 2
    app.update_state(config, {"count": 100})  # outside any run: nothing is emitted
    app.invoke({}, config)
    store = _store(tmp_path, _requests(capture.exporter.get_finished_spans()))
    first, second, third = (_history(store, run_id) for run_id in _graph_runs(capture))
    assert first.verdict == second.verdict == third.verdict == "verified"
    assert "store_changed_between_runs" not in _codes(second)
    assert _codes(third)["store_changed_between_runs"] == "info"
    assert _field(third, "count") == 101


def test_convention_forked_thread_reusing_sequences_is_reported_not_mixed(
    tmp_path: Path,
) -> None:
    capture = Capture()
    app = _counter(capture)
    config: Any = {"configurable": {"thread_id": "t-fork"}}
    app.invoke({"count": 0, "trail": []}, config)
    app.invoke({"count": 10}, config)
    # Time travel: run again from the first run's end, an older checkpoint.
    history = list(app.get_state_history(config))
    first_end = next(s for s in history if s.metadata["step"] == 1)
    app.invoke({"count": 50}, first_end.config)
    store = _store(tmp_path, _requests(capture.exporter.get_finished_spans()))
    runs = _graph_runs(capture)
    fork = _history(store, runs[-1])
    assert fork.verdict == "verified", fork.diagnostics
    assert _codes(fork).get("sequence_reused") == "warning"
    assert _field(fork, "count") == 51
    for run_id in runs[:-1]:
        assert _history(store, run_id).verdict == "verified"


def _field(history: History, name: str) -> Any:
    """A field of a history's last state."""
    state = history.state_at(history.last_sequence)
    assert isinstance(state, dict)
    return state[name]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_canonical_json_is_the_producers_rfc_8785_text(value: Any) -> None:
    assert canonical_json(value) == producer_canonical.canonical_json(value)


def test_canonical_json_of_a_state_deeper_than_the_interpreter_recurses() -> None:
    deep: Any = "bottom"
    for _ in range(20_000):
        deep = {"a": deep}
    assert canonical_json(deep) == '{"a":' * 20_000 + '"bottom"' + "}" * 20_000
    assert state_digest({}) == EMPTY_STATE_DIGEST


@pytest.mark.parametrize(
    ("number", "text"),
    [(2.0, "2"), (-0.0, "0"), (1e21, "1e+21"), (1e-7, "1e-7"), (0.1, "0.1"), (1.5e-7, "1.5e-7")],
)
def test_canonical_json_writes_numbers_as_ecmascript(number: float, text: str) -> None:
    assert canonical_json([number]) == f"[{text}]"


def test_convention_run_pruned_with_its_trace_leaves_no_start_event(tmp_path: Path) -> None:
    capture = Capture()
    run_id, _ = _journal(capture)
    store = _store(tmp_path, _requests(capture.exporter.get_finished_spans()))
    assert store.run_start(run_id) is not None
    ended = max(s.end_time or 0 for s in capture.exporter.get_finished_spans())
    counts = store.prune_batch(ended + 1)
    assert counts.executions == 1 and counts.transitions == 5
    assert store.get_execution(run_id) is None
    assert store.run_start(run_id) is None
    assert store.transitions_for_store("order-1") == []


def test_convention_step_past_the_document_limits_is_refused_like_junjos(tmp_path: Path) -> None:
    capture = Capture()
    journal = StateJournal("grow", store_id="grow-1", tracer_provider=capture.provider)
    with journal.start({}) as j:
        j.set("small", [1, 2])
        j.set("big", list(range(100)))
        j.set("after", True)
    store = _store(tmp_path, _requests(capture.exporter.get_finished_spans()))
    execution = store.get_execution(journal.run_id)
    assert execution is not None
    history, _ = load_history(store, execution, DocumentLimits(max_nodes=50))
    assert history.verdict == "partial"
    assert _codes(history)["document_limit_exceeded"] == "error"
    # The next step's state cannot hash right; that is said, as a consequence.
    assert _codes(history)["state_digest_mismatch"] == "warning"
    assert [(s.applied, s.verified, s.digest_matched) for s in history.steps] == [
        (True, True, True), (False, False, None), (True, False, False)
    ]


def test_convention_digests_past_the_budget_are_left_unchecked_but_the_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    capture = Capture()
    run_id, _ = _journal(capture)
    store = _store(tmp_path, _requests(capture.exporter.get_finished_spans()))
    # A budget of one small state: the first step's digest fits, the second's does not.
    monkeypatch.setattr(walk, "DIGEST_BUDGET_CHARS", 40)
    history = _history(store, run_id)
    assert [step.digest_matched for step in history.steps] == [True, None, True]
    assert history.verdict == "verified"
    assert _codes(history)["digests_not_checked"] == "info"
