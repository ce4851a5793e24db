"""Replay snapshots: a restored history is the replayed one, and is used only while current."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.history_records import scenario
from support.otlp_craft import plain_request
from support.servers import fixture_requests, scenarios
from test_history_properties import ROOTS, chain

from collector.encode.exports import batch_from_export
from collector.evidence import load_history, replay_with, version_of
from collector.jobs.replayer import replay_stores
from collector.model import Evidence, Execution, Transition
from collector.replay.history import History, StateUnavailableError
from collector.replay.jsondoc import json_equal
from collector.replay.provenance import provenance
from collector.replay.snapshot import MIN_SNAPSHOT_STEPS, restore, take
from collector.replay.walk import replay
from collector.store import IngestBatch, Store


def assert_same_history(restored: History, replayed: History) -> None:
    assert restored.steps == replayed.steps
    assert restored.diagnostics == replayed.diagnostics
    assert restored.verdict == replayed.verdict
    assert restored.start_sequence == replayed.start_sequence
    assert restored.end_sequence == replayed.end_sequence
    assert restored.has_states == replayed.has_states
    assert json_equal(restored.recorded_end, replayed.recorded_end)
    if not replayed.has_states:
        with pytest.raises(StateUnavailableError):
            restored.state_at(restored.start_sequence)
        return
    for sequence in range(replayed.start_sequence, replayed.last_sequence + 1):
        assert json_equal(restored.state_at(sequence), replayed.state_at(sequence)), sequence
        assert restored.verified_at(sequence) == replayed.verified_at(sequence)
    for step in replayed.steps:
        assert restored.changes(step.sequence) == replayed.changes(step.sequence)


def round_trip(history: History, transitions: list[Transition]) -> History:
    snapshot = take(history, transitions, (len(transitions), 0))
    assert snapshot is not None
    assert history.execution is not None
    restored = restore(snapshot, history.execution, transitions)
    assert restored is not None
    return restored


def _damaged(transitions: list[Transition], damage: str, at: int) -> list[Transition]:
    if not transitions:
        return transitions
    at %= len(transitions)
    if damage == "drop":
        return transitions[:at] + transitions[at + 1 :]
    if damage == "cut":
        cut = transitions[at]._replace(patch_json=transitions[at].patch_json[:5])
        return [*transitions[:at], cut, *transitions[at + 1 :]]
    if damage == "wrong":
        wrong = transitions[at]._replace(patch_json='[{"op": "remove", "path": "/nowhere/0"}]')
        return [*transitions[:at], wrong, *transitions[at + 1 :]]
    return transitions


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    documents=st.lists(ROOTS, min_size=1, max_size=10),
    damage=st.sampled_from(["none", "drop", "cut", "wrong"]),
    at=st.integers(0, 20),
)
def test_restored_history_is_the_replayed_history(
    documents: list[Any], damage: str, at: int
) -> None:
    execution, transitions, _ = chain(documents)
    # The store keys events by (trace, span, index).
    transitions = [t._replace(event_index=i) for i, t in enumerate(transitions)]
    transitions = _damaged(transitions, damage, at)
    history = replay(execution, transitions)
    assert_same_history(round_trip(history, transitions), history)


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"state_start_mode": "redacted", "state_start": None},
        {"state_end_mode": "excluded", "state_end": None},
        {"state_end": '{"n": 99}'},  # contradicts the complete chain
        {"state_start": '{"n": '},  # cut by an attribute length limit
        {"contract_version": 1, "transition_start": None, "transition_end": None},
    ],
    ids=["verified", "start-withheld", "end-withheld", "end-mismatch", "start-cut", "v1"],
)
def test_restored_history_keeps_every_verdict_and_finding(overrides: dict[str, Any]) -> None:
    execution, transitions, _ = scenario(
        {"n": 0, "log": []},
        [
            [
                {"op": "replace", "path": "/n", "value": i},
                {"op": "add", "path": "/log/-", "value": i},
            ]
            for i in range(1, 40)
        ],
    )
    execution = dataclasses.replace(execution, **overrides)
    transitions = [t._replace(event_index=i) for i, t in enumerate(transitions)]
    if execution.contract_version == 1:
        transitions = [t._replace(sequence=None, contract_version=1) for t in transitions]
    history = replay(execution, transitions)
    restored = round_trip(history, transitions)
    assert_same_history(restored, history)
    pointer_writes = provenance(history, "/log").entries
    assert provenance(restored, "/log").entries == pointer_writes


def test_a_patch_the_store_did_not_commit_is_skipped_by_replay_and_restore() -> None:
    # Junjo's revision stays when the new state equals the old in Python
    # (Decimal 0.10 == 0.1): the store kept "0.10", whatever the patch says.
    execution, transitions, _ = scenario(
        {"price": "0"},
        [
            [{"op": "replace", "path": "/price", "value": "0.10"}],
            [{"op": "replace", "path": "/price", "value": "0.1"}],
        ],
    )
    uncommitted = transitions[1]._replace(revision_before=1, revision_after=1, event_index=1)
    transitions = [transitions[0], uncommitted]
    execution = dataclasses.replace(
        execution, state_end=json.dumps({"price": "0.10"}), revision_end=1
    )

    history = replay(execution, transitions)

    assert history.verdict == "verified"
    assert history.state_at(2) == {"price": "0.10"} and history.verified_at(2)
    (finding,) = history.diagnostics
    assert (finding.code, finding.severity, finding.sequence) == ("patch_not_committed", "info", 2)
    assert [(e.sequence, e.after) for e in provenance(history, "/price").entries] == [(1, "0.10")]
    assert_same_history(round_trip(history, transitions), history)


@pytest.mark.parametrize("scenario_name", scenarios())
def test_fixture_histories_restore_to_their_replays(tmp_path: Path, scenario_name: str) -> None:
    store = Store(tmp_path / "fixtures.duckdb")
    for body, _ in fixture_requests(scenario_name):
        store.write([batch_from_export(body)])
    for execution in store.executions_for_stores(store.stale_store_ids()):
        transitions = store.transitions_for_store(execution.store_id or "")
        links = store.evidence_spans_for(
            [execution.trace_id], {(t.trace_id, t.span_id) for t in transitions}
        )
        history = replay_with(execution, transitions, links)
        assert_same_history(round_trip(history, transitions), history)
    store.close()


def _long_run(steps: int) -> tuple[Execution, list[Transition]]:
    execution, transitions, _ = scenario(
        {"n": 0, "text": "x" * 200},
        [[{"op": "replace", "path": "/n", "value": i}] for i in range(1, steps + 1)],
    )
    # The store keys events by (trace, span, index).
    return execution, [t._replace(event_index=i) for i, t in enumerate(transitions)]


def test_replayer_saves_a_snapshot_that_a_first_view_restores(tmp_path: Path) -> None:
    execution, transitions = _long_run(MIN_SNAPSHOT_STEPS)
    path = tmp_path / "long.duckdb"
    store = Store(path)
    store.write([IngestBatch(spans=[], evidence=Evidence([execution], transitions, {}))])
    replay_stores(store, [execution.store_id or ""])
    store.close()

    store = Store(path)  # as after a restart: nothing cached
    snapshot = store.replay_snapshot(execution.run_id)
    assert snapshot is not None
    history, version = load_history(store, execution)
    assert snapshot.version == version
    # A restored history holds only the saved checkpoints, a replay many more.
    replayed = replay_with(execution, transitions, [])
    assert history.checkpoint_count == len(snapshot.checkpoint_steps)
    assert history.checkpoint_count < replayed.checkpoint_count
    assert_same_history(history, replayed)
    assert history.verdict == "verified"
    store.close()


def test_late_evidence_makes_the_snapshot_stale_until_the_next_replay(tmp_path: Path) -> None:
    execution, transitions = _long_run(MIN_SNAPSHOT_STEPS + 1)
    *early, late = transitions
    store = Store(tmp_path / "late.duckdb")
    store.write([IngestBatch(spans=[], evidence=Evidence([execution], early, {}))])
    replay_stores(store, [execution.store_id or ""])
    old = store.replay_snapshot(execution.run_id)
    assert old is not None and old.verdict == "partial"  # the last transition is missing

    store.write([IngestBatch(spans=[], evidence=Evidence([], [late], {}))])
    history, version = load_history(store, execution)
    assert version != old.version
    # Replayed afresh rather than restored: the late step is there.
    assert len(history.steps) == MIN_SNAPSHOT_STEPS + 1
    assert history.verdict == "verified"

    replay_stores(store, [execution.store_id or ""])
    new = store.replay_snapshot(execution.run_id)
    assert new is not None and new.version == version and new.verdict == "verified"
    restored, _ = load_history(store, execution)
    assert_same_history(restored, replay_with(execution, transitions, []))
    store.close()
    with duckdb.connect(str(tmp_path / "late.duckdb"), read_only=True) as db:
        assert db.execute("SELECT count(*) FROM replay_snapshots").fetchone() == (1,)


def test_short_histories_get_no_snapshot(tmp_path: Path) -> None:
    execution, transitions = _long_run(MIN_SNAPSHOT_STEPS - 1)
    store = Store(tmp_path / "short.duckdb")
    store.write([IngestBatch(spans=[], evidence=Evidence([execution], transitions, {}))])
    replay_stores(store, [execution.store_id or ""])
    assert store.replay_snapshot(execution.run_id) is None
    store.close()


def test_a_snapshot_that_no_longer_lines_up_is_refused() -> None:
    execution, transitions = _long_run(30)
    history = replay(execution, transitions)
    snapshot = take(history, transitions, version_of(execution, transitions, []))
    assert snapshot is not None
    assert restore(snapshot, execution, transitions[:-1]) is None  # a step points past the end
    assert restore(snapshot, execution, transitions[1:]) is None  # sequences shifted
    mangled = dataclasses.replace(snapshot, verdict="fine")
    assert restore(mangled, execution, transitions) is None
    steps = json.loads(snapshot.steps_json)
    steps["flags"] = steps["flags"][:-1]
    short = dataclasses.replace(snapshot, steps_json=json.dumps(steps))
    assert restore(short, execution, transitions) is None


def test_pruning_a_trace_deletes_its_snapshots(tmp_path: Path) -> None:
    execution, transitions = _long_run(MIN_SNAPSHOT_STEPS)
    request = plain_request(bytes.fromhex(execution.trace_id), [bytes.fromhex(execution.span_id)],
                            start_unix_nano=1, end_unix_nano=2)  # fmt: skip
    spans = batch_from_export(request.SerializeToString()).spans
    store = Store(tmp_path / "prune.duckdb")
    store.write([IngestBatch(spans=spans, evidence=Evidence([execution], transitions, {}))])
    replay_stores(store, [execution.store_id or ""])
    assert store.replay_snapshot(execution.run_id) is not None

    pruned = store.prune_batch(cutoff_unix_nano=3)

    assert pruned.executions == 1
    assert store.replay_snapshot(execution.run_id) is None
    store.close()


def test_a_state_with_a_lone_surrogate_is_saved_and_restored(tmp_path: Path) -> None:
    # JSON may carry "\ud800"; UTF-8, and so the store, cannot hold it unescaped.
    execution, transitions, _ = scenario(
        {"n": 0, "odd": "\ud800", "\udfff": "é"},
        [[{"op": "replace", "path": "/n", "value": i}] for i in range(1, MIN_SNAPSHOT_STEPS + 1)],
    )
    transitions = [t._replace(event_index=i) for i, t in enumerate(transitions)]
    store = Store(tmp_path / "surrogate.duckdb")
    store.write([IngestBatch(spans=[], evidence=Evidence([execution], transitions, {}))])
    replay_stores(store, [execution.store_id or ""])
    snapshot = store.replay_snapshot(execution.run_id)
    assert snapshot is not None and snapshot.verdict == "verified"
    history, _ = load_history(store, execution)
    assert history.checkpoint_count == len(snapshot.checkpoint_steps)  # restored, not replayed
    assert_same_history(history, replay_with(execution, transitions, []))
    store.close()
