"""Replay, integrity findings, partial replay and provenance.

Covers collector/replay/walk.py and the History it builds (collector/replay/history.py).
"""

from __future__ import annotations

import copy
import json
import random
from dataclasses import replace
from typing import Any

import jsonpatch
import pytest
from support.fixture_records import fixture_names, load
from support.history_records import (
    NODE_SPAN,
    OWNER_SPAN,
    STORE,
    TRACE,
    Patch,
    make_execution,
    make_transition,
    scenario,
)
from support.seeds import seed_id, seeds

from collector.index.indexing import TouchedValues, field_index
from collector.model import EvidenceSpan, Execution, Transition
from collector.replay.history import Diagnostic, History, StateUnavailableError, holes, walk
from collector.replay.jsondoc import (
    MISSING,
    JsonValue,
    iter_differences,
    json_equal,
    list_index,
    resolve,
)
from collector.replay.provenance import provenance
from collector.replay.walk import replay
from studio.views.api import timeline


def codes(history: History) -> list[str]:
    return [d.code for d in history.diagnostics]


def finding(history: History, code: str) -> Diagnostic:
    return next(d for d in history.diagnostics if d.code == code)


BASIC_PATCHES: list[Patch] = [
    [{"op": "replace", "path": "/title", "value": "draft"}],
    [{"op": "add", "path": "/items/0", "value": "horse"}],
    [{"op": "add", "path": "/items/1", "value": "laser"}],
    [{"op": "replace", "path": "/meta", "value": {"owner": "ana", "tags": ["a"]}}],
    [{"op": "add", "path": "/meta/tags/1", "value": "b"}],
]
BASIC_START: dict[str, Any] = {"title": "", "items": [], "meta": None}


def basic() -> tuple[Execution, list[Transition], list[Any]]:
    return scenario(BASIC_START, BASIC_PATCHES)


# --- replay -------------------------------------------------------------------------------


def test_replay_applies_all_six_ops_and_pointer_escapes() -> None:
    patches: list[Patch] = [
        [{"op": "add", "path": "/a~1b", "value": {"x~y": 1}}],
        [{"op": "replace", "path": "/a~1b/x~0y", "value": 2}],
        [{"op": "copy", "from": "/a~1b", "path": "/copy"}],
        [{"op": "move", "from": "/list/0", "path": "/list/2"}],
        [{"op": "test", "path": "/copy/x~0y", "value": 2}, {"op": "remove", "path": "/gone"}],
    ]
    execution, transitions, states = scenario({"list": [1, 2, 3], "gone": True}, patches)

    history = replay(execution, transitions)

    assert history.verdict == "verified"
    assert history.diagnostics == ()
    for sequence, expected in enumerate(states):
        assert history.state_at(sequence) == expected
        assert history.verified_at(sequence)


def test_replay_orders_by_sequence_not_arrival() -> None:
    execution, transitions, states = basic()

    history = replay(execution, list(reversed(transitions)))

    assert history.verdict == "verified"
    assert [step.sequence for step in history.steps] == [1, 2, 3, 4, 5]
    assert history.replayed_end == states[-1]


def test_replay_ignores_other_stores_and_sequences_outside_the_interval() -> None:
    execution, transitions, states = scenario(BASIC_START, BASIC_PATCHES, first_sequence=8)
    before = make_transition(7, [{"op": "replace", "path": "/title", "value": "older run"}])
    after = make_transition(14, [{"op": "replace", "path": "/title", "value": "later run"}])
    other = make_transition(9, [{"op": "remove", "path": "/title"}], store_id="another")

    history = replay(execution, [before, *transitions, after, other])

    assert history.verdict == "verified"
    assert [step.sequence for step in history.steps] == [8, 9, 10, 11, 12]
    assert history.state_at(7) == BASIC_START
    assert history.state_at(12) == states[-1]


def test_replay_contract_v2_uses_sequences_up_to_transition_count() -> None:
    execution, transitions, states = basic()
    execution = replace(execution, contract_version=2, transition_start=None, transition_end=None)

    history = replay(execution, transitions)

    assert history.verdict == "verified"
    assert history.end_sequence == 5
    assert history.replayed_end == states[-1]


def test_replay_contract_v1_orders_by_time_then_event_index() -> None:
    execution, transitions, states = basic()
    execution = replace(
        execution,
        contract_version=1,
        transition_start=None,
        transition_end=None,
        transition_count=None,
    )
    # Two events share a timestamp; the event index inside the span breaks the tie.
    timed = [
        t._replace(sequence=None, time_unix_nano=50_000 + (i // 2), event_index=i % 2)
        for i, t in enumerate(transitions)
    ]
    outside = timed[0]._replace(time_unix_nano=10**12, event_id="late")
    retried = timed[1]

    history = replay(execution, [*reversed(timed), outside, retried])

    assert history.verdict == "verified"
    assert [step.transition.event_id for step in history.steps] == [t.event_id for t in transitions]
    assert [step.sequence for step in history.steps] == [1, 2, 3, 4, 5]
    assert history.state_at(3) == states[3]


def test_state_at_returns_copies_the_caller_may_mutate() -> None:
    execution, transitions, states = basic()
    history = replay(execution, transitions)

    first: Any = history.state_at(4)
    first["meta"]["tags"].append("mutated")

    assert history.state_at(4) == states[4]
    assert history.replayed_end == states[5]


def test_state_at_rejects_sequences_outside_the_interval() -> None:
    execution, transitions, _ = basic()
    history = replay(execution, transitions)

    with pytest.raises(StateUnavailableError):
        history.state_at(6)
    with pytest.raises(StateUnavailableError):
        history.state_at(-1)


def test_replay_never_aliases_patch_values_into_later_states() -> None:
    # Step 1 inserts an object, step 2 edits inside it in place. If the working
    # document shared the object with step 1's patch, rebuilding state 1 from a
    # checkpoint would show step 2's edit.
    patches: list[Patch] = [
        [{"op": "add", "path": "/profile", "value": {"name": "ana", "langs": ["en"]}}],
        [{"op": "add", "path": "/profile/langs/1", "value": "pt"}],
        [{"op": "replace", "path": "/profile/name", "value": "bea"}],
    ]
    execution, transitions, states = scenario({}, patches)
    history = replay(execution, transitions)

    for sequence in (3, 1, 2, 0, 1):
        assert history.state_at(sequence) == states[sequence]


@pytest.mark.parametrize("seed", seeds("HISTORY_SEEDS", 7), ids=seed_id)
def test_replay_large_state_keeps_few_checkpoints_and_exact_states(seed: int) -> None:
    # Correctness side of the cost rule (timing lives in bench/bench_replay.py):
    # 2,000 small patches on a ~250 KB state must not copy the state per step.
    start = {"messages": [{"i": i, "text": "x" * 120} for i in range(1_800)], "n": 0}
    rng = random.Random(seed)
    samples = {0, 1, 999, 1_000, 1_457, 2_000}
    current, expected = copy.deepcopy(start), {0: copy.deepcopy(start)}
    transitions = []
    for sequence in range(1, 2_001):
        patch = [
            {"op": "replace", "path": f"/messages/{rng.randrange(1_800)}/i", "value": -sequence},
            {"op": "replace", "path": "/n", "value": sequence},
        ]
        current = jsonpatch.apply_patch(current, patch, in_place=True)
        transitions.append(make_transition(sequence, patch))
        if sequence in samples:
            expected[sequence] = copy.deepcopy(current)
    execution = make_execution(
        state_start=json.dumps(start),
        state_end=json.dumps(current),
        revision_end=2_000,
        transition_end=2_000,
        transition_count=2_000,
    )

    history = replay(execution, transitions)

    assert len(json.dumps(start)) > 240_000
    assert history.verdict == "verified"
    assert history.checkpoint_count < 40
    for sequence in samples:
        assert history.state_at(sequence) == expected[sequence]


def test_walk_yields_each_step_with_the_state_after_it() -> None:
    execution, transitions, states = basic()
    transitions[2] = transitions[2]._replace(patch_json="[{")
    history = replay(execution, transitions)

    walked = [(step.sequence, copy.deepcopy(state)) for step, state in walk(history)]

    assert walked == [(sequence, history.state_at(sequence)) for sequence in range(1, 6)]
    assert walked[0][1] == states[1]


def test_walk_without_a_start_state_is_unavailable() -> None:
    execution, transitions, _ = basic()
    history = replay(replace(execution, state_start=None), transitions)

    with pytest.raises(StateUnavailableError):
        next(walk(history))


def test_changes_report_before_and_after_per_operation() -> None:
    patches: list[Patch] = [
        [{"op": "replace", "path": "/title", "value": "new"}],
        [
            {"op": "add", "path": "/items/0", "value": "first"},
            {"op": "move", "from": "/items/2", "path": "/items/0"},
            {"op": "remove", "path": "/meta"},
            {"op": "add", "path": "/items/-", "value": "last"},
        ],
    ]
    execution, transitions, _ = scenario(
        {"title": "old", "items": ["a", "b"], "meta": {"k": 1}}, patches
    )
    history = replay(execution, transitions)

    (title,) = history.changes(1)
    insert, move, remove, append = history.changes(2)

    assert (title.before, title.after) == ("old", "new")
    assert (insert.before, insert.after) == (MISSING, "first")
    assert (move.from_path, move.before, move.after) == ("/items/2", MISSING, "b")
    assert (remove.before, remove.after) == ({"k": 1}, MISSING)
    assert (append.path, append.before, append.after) == ("/items/-", MISSING, "last")


def test_steps_list_changed_paths_including_move_sources() -> None:
    patches: list[Patch] = [
        [{"op": "move", "from": "/a", "path": "/b"}],
        [{"op": "test", "path": "/b", "value": 1}, {"op": "copy", "from": "/b", "path": "/c"}],
    ]
    execution, transitions, _ = scenario({"a": 1}, patches)

    history = replay(execution, transitions)

    assert [step.changed_paths for step in history.steps] == [("/a", "/b"), ("/c",)]


def test_timeline_flattens_steps_with_parsed_patches() -> None:
    execution, transitions, _ = basic()
    transitions[4] = transitions[4]._replace(patch_json='[{"op":"add","pa')

    entries = timeline(replay(execution, transitions))

    assert [entry.sequence for entry in entries] == [1, 2, 3, 4, 5]
    assert entries[0].patch == tuple(BASIC_PATCHES[0])
    assert entries[0].verified and entries[0].applied
    assert entries[0].changed_paths == ("/title",)
    assert (entries[0].span_id, entries[0].span_name, entries[0].store_id) == (
        NODE_SPAN,
        "DemoNode",
        STORE,
    )
    assert entries[4].patch is None
    assert not entries[4].verified


# --- integrity findings, one code at a time ---------------------------------------------


def test_sequence_gap_names_missing_ranges_and_keeps_best_effort_states() -> None:
    patches = [[{"op": "add", "path": f"/k{i}", "value": i}] for i in range(1, 8)]
    execution, transitions, states = scenario({}, patches)
    kept = [t for t in transitions if t.sequence not in (3, 5, 6)]

    history = replay(execution, kept)

    gaps = [d for d in history.diagnostics if d.code == "sequence_gap"]
    assert [(d.sequence, d.severity) for d in gaps] == [(3, "error"), (5, "error")]
    assert "Transition 3 of store" in gaps[0].message
    assert "5-6 (2 transitions)" in gaps[1].message
    assert history.verdict == "partial"
    assert [step.verified for step in history.steps] == [True, True, False, False]
    assert history.verified_at(2) and not history.verified_at(3)
    assert history.state_at(4) == {"k1": 1, "k2": 2, "k4": 4}  # best effort, shown
    assert history.state_at(2) == states[2]


def test_find_step_is_none_where_no_transition_was_received() -> None:
    patches = [[{"op": "add", "path": f"/k{i}", "value": i}] for i in range(1, 5)]
    execution, transitions, _ = scenario({}, patches)

    history = replay(execution, [t for t in transitions if t.sequence != 3])

    found = history.find_step(2)
    assert found is not None and found is history.step(2)
    # The start state, a hole and a sequence past the end have no step.
    assert [history.find_step(s) for s in (0, 3, 9)] == [None, None, None]
    with pytest.raises(KeyError):
        history.step(3)


def test_sequence_gap_at_the_start_verifies_nothing_but_is_partial() -> None:
    execution, transitions, _ = basic()

    history = replay(execution, transitions[2:])

    assert finding(history, "sequence_gap").sequence == 1
    assert not history.verified_at(1)
    assert history.verdict == "partial"


def test_missing_sequences_are_the_holes_between_the_start_steps_and_the_end() -> None:
    patches = [[{"op": "add", "path": f"/k{i}", "value": i}] for i in range(1, 9)]
    execution, transitions, _ = scenario({}, patches)
    kept = [t for t in transitions if t.sequence not in (1, 3, 5, 6, 8)]

    history = replay(execution, kept)

    # Keyed by the step received after each hole; None is the trailing one.
    assert history.missing_sequences == {2: (1, 1), 4: (3, 3), 7: (5, 6), None: (8, 8)}
    assert history.missing_count == 5
    assert [history.missing_through(n) for n in (0, 1, 4, 5, 7, 8)] == [0, 1, 2, 3, 4, 5]
    # Steps 2, 4 and 7 were received: a hole shows the last step before it.
    assert [history.index_at(n) for n in (0, 1, 2, 3, 6, 7, 9)] == [-1, -1, 0, 0, 1, 2, 2]
    assert replay(execution, transitions).missing_sequences == {}
    # Without the owner span nothing bounds the start or the end: only inner holes.
    assert replay(None, kept).missing_sequences == {4: (3, 3), 7: (5, 6)}


def test_holes_are_keyed_by_the_sequence_after_each_and_bounded_only_where_known() -> None:
    assert holes([2, 5], 0, 7) == {2: (1, 1), 5: (3, 4), None: (6, 7)}
    assert holes([1, 2, 3], 0, 3) == {}
    assert holes([], 4, 6) == {None: (5, 6)}
    # An unknown bound hides what could lie beyond it.
    assert holes([2, 5], None, None) == {5: (3, 4)}


def test_missing_sequences_are_unknown_without_producer_sequences() -> None:
    execution, transitions, _ = basic()
    execution = replace(
        execution, contract_version=1, transition_start=None, transition_end=None,
        transition_count=None,
    )
    timed = [t._replace(sequence=None) for i, t in enumerate(transitions) if i != 2]

    assert replay(execution, timed).missing_sequences == {}


def test_duplicate_sequence_with_different_patches_is_reported_and_unverified() -> None:
    execution, transitions, _ = basic()
    rival = transitions[2]._replace(
        event_id="rival",
        span_id="1111111111111111",
        time_unix_nano=transitions[2].time_unix_nano + 5,
        patch_json='[{"op":"add","path":"/items/1","value":"coffee"}]',
    )

    history = replay(execution, [*transitions, rival])

    duplicate = finding(history, "duplicate_sequence")
    assert (duplicate.sequence, duplicate.severity) == (3, "error")
    assert "1111111111111111" in duplicate.message
    assert history.step(3).transition.event_id == transitions[2].event_id  # earliest wins
    assert [step.verified for step in history.steps] == [True, True, False, False, False]
    assert history.verdict == "partial"


def test_duplicate_sequence_identical_copies_collapse_silently() -> None:
    execution, transitions, _ = basic()

    history = replay(execution, [*transitions, *transitions[1:3]])

    assert history.diagnostics == ()
    assert history.verdict == "verified"
    assert len(history.steps) == 5


def test_duplicate_sequence_with_equal_patches_is_a_warning_only() -> None:
    execution, transitions, _ = basic()
    twin = transitions[1]._replace(event_id="re-emitted", span_id="5555555555555555")

    history = replay(execution, [*transitions, twin])

    duplicate = finding(history, "duplicate_sequence")
    assert (duplicate.sequence, duplicate.severity) == (2, "warning")
    assert history.verdict == "verified"


def test_revision_discontinuity_against_the_recorded_end_revision() -> None:
    execution, transitions, _ = basic()

    history = replay(replace(execution, revision_end=9), transitions)

    assert finding(history, "revision_discontinuity").sequence == 5


def test_missing_trailing_transitions_reported_after_the_last_received() -> None:
    execution, transitions, states = basic()

    history = replay(execution, transitions[:3])

    trailing = finding(history, "missing_trailing_transitions")
    assert trailing.sequence == 4
    assert "4-5 (2 transitions)" in trailing.message
    assert "sequence_gap" not in codes(history)
    assert history.verdict == "partial"
    assert history.verified_at(3) and not history.verified_at(5)
    assert history.state_at(5) == states[3]
    assert history.recorded_end == states[5]


def test_revision_discontinuity_when_revisions_do_not_chain() -> None:
    execution, transitions, _ = basic()
    transitions[3] = transitions[3]._replace(revision_before=7, revision_after=8)

    history = replay(execution, transitions)

    flagged = [d.sequence for d in history.diagnostics if d.code == "revision_discontinuity"]
    assert flagged == [4, 5]
    assert history.verdict == "verified"  # revisions are advisory; the states still chain


def test_revision_discontinuity_when_one_update_jumps_two_revisions() -> None:
    execution, transitions, _ = basic()
    transitions = [transitions[0]] + [
        t._replace(revision_before=t.sequence, revision_after=t.sequence + 1)
        for t in transitions[1:]
        if t.sequence is not None
    ]
    transitions[0] = transitions[0]._replace(revision_after=2)

    history = replay(replace(execution, revision_end=6), transitions)

    assert [d.sequence for d in history.diagnostics] == [1]
    assert "from 0 to 2" in history.diagnostics[0].message


def test_revision_unchanged_or_bumped_by_empty_patch_is_not_a_discontinuity() -> None:
    # f_exclude_serializer: a hidden field changes -> "[]" with revision + 1;
    # a no-op update -> "[]" with the revision unchanged.
    execution, transitions, _ = scenario({"a": 1}, [[], [], []])
    transitions[1] = transitions[1]._replace(revision_before=1, revision_after=1)
    transitions[2] = transitions[2]._replace(revision_before=1, revision_after=2)
    execution = replace(execution, revision_end=2)

    history = replay(execution, transitions)

    assert history.diagnostics == ()
    assert history.verdict == "verified"


def test_patch_failed_on_the_first_step_fails_the_run() -> None:
    execution, transitions, _ = basic()
    transitions[0] = transitions[0]._replace(
        patch_json='[{"op":"remove","path":"/does_not_exist"}]'
    )

    history = replay(execution, transitions)

    failed = finding(history, "patch_failed")
    assert (failed.sequence, failed.severity, failed.span_id) == (1, "error", NODE_SPAN)
    assert "action_1" in failed.message
    assert not history.step(1).applied
    assert history.verdict == "failed"


def test_patch_failed_after_verified_steps_is_partial_and_skipped() -> None:
    execution, transitions, states = basic()
    # The first op applies before the second fails: the state must not keep it.
    transitions[3] = transitions[3]._replace(
        patch_json=json.dumps(
            [
                {"op": "replace", "path": "/title", "value": "half-applied"},
                {"op": "replace", "path": "/nope/x", "value": 1},
            ]
        ),
    )

    history = replay(execution, transitions)

    assert finding(history, "patch_failed").sequence == 4
    assert history.verdict == "partial"
    assert [step.verified for step in history.steps] == [True, True, True, False, False]
    assert history.state_at(4) == states[3]


def test_end_state_mismatch_names_differing_pointers_and_fails() -> None:
    execution, transitions, states = basic()
    recorded = copy.deepcopy(states[-1])
    recorded["title"] = "tampered"
    recorded["meta"]["tags"] = ["a"]
    execution = replace(execution, state_end=json.dumps(recorded))

    history = replay(execution, transitions)

    mismatch = finding(history, "end_state_mismatch")
    assert mismatch.severity == "error"
    assert "/meta/tags/1" in mismatch.message and "/title" in mismatch.message
    assert history.verdict == "failed"
    assert not any(step.verified for step in history.steps)
    assert history.recorded_end == recorded
    assert history.replayed_end == states[-1]


def test_end_state_mismatch_treats_true_and_one_as_different() -> None:
    execution, transitions, _ = scenario(
        {"flag": False}, [[{"op": "replace", "path": "/flag", "value": True}]]
    )
    execution = replace(execution, state_end='{"flag": 1}')

    history = replay(execution, transitions)

    assert "end_state_mismatch" in codes(history)


def test_iter_differences_yields_leaves_in_document_order_with_json_equality() -> None:
    left: JsonValue = {"b": [1, 2, True], "a": {"x": 1}, "c": "same", "d~/": False}
    right: JsonValue = {"b": [1.0, 3], "a": {"x": 1.0, "y": None}, "c": "same", "d~/": 0}

    assert list(iter_differences(left, right)) == [
        ("/a/y", MISSING, None),
        ("/b/1", 2, 3),
        ("/b/2", True, MISSING),
        ("/d~0~1", False, 0),
    ]
    assert list(iter_differences(True, 1)) == [("", True, 1)]
    assert list(iter_differences({"n": 1e300}, {"n": 1e300})) == []


def test_claimed_reconstructable_but_failed_only_when_not_verified() -> None:
    execution, transitions, _ = basic()

    honest = replay(replace(execution, reconstructable=False), transitions[:-1])
    claimed = replay(execution, transitions[:-1])
    fine = replay(execution, transitions)

    assert "claimed_reconstructable_but_failed" not in codes(honest)
    assert finding(claimed, "claimed_reconstructable_but_failed").severity == "warning"
    assert "claimed_reconstructable_but_failed" not in codes(fine)


def test_otlp_data_dropped_names_the_span_and_the_event_limit() -> None:
    execution, transitions, _ = basic()
    spans = [
        EvidenceSpan(TRACE, NODE_SPAN, "AppendNode", "node", 0, 1872, 0),
        EvidenceSpan(TRACE, OWNER_SPAN, "Demo Workflow", "workflow", 3, 0, 0),
        EvidenceSpan(TRACE, "2222222222222222", "Quiet", "node", 0, 0, 0),
    ]

    history = replay(execution, transitions, evidence_spans=spans)

    events, attributes = [d for d in history.diagnostics if d.code == "otlp_data_dropped"]
    assert events.span_id == NODE_SPAN
    assert "1872 events" in events.message
    assert "128" in events.message and "OTEL_SPAN_EVENT_COUNT_LIMIT" in events.message
    assert attributes.span_id == OWNER_SPAN
    assert "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT" in attributes.message


def test_otlp_data_dropped_is_only_info_when_every_transition_of_the_run_arrived() -> None:
    # A subflow span carries its own store's writes beside its parent's: what it
    # dropped is no loss of a run whose whole interval arrived.
    execution, transitions, _ = basic()
    spans = [EvidenceSpan(TRACE, NODE_SPAN, "Review", "subflow", 0, 5, 0)]

    whole = replay(execution, transitions, evidence_spans=spans)
    cut = replay(execution, transitions[1:], evidence_spans=spans)

    assert whole.verdict == "verified"
    assert finding(whole, "otlp_data_dropped").severity == "info"
    assert "every transition of this run arrived" in finding(whole, "otlp_data_dropped").message
    assert cut.verdict == "partial"
    assert finding(cut, "otlp_data_dropped").severity == "warning"


def test_otlp_data_dropped_by_another_runs_span_is_that_runs_loss() -> None:
    # basic()'s transitions are carried by NODE_SPAN, outside the subtree given here.
    execution, transitions, _ = basic()
    sibling, elsewhere = "3333333333333333", "4444444444444444"
    spans = [
        EvidenceSpan(TRACE, OWNER_SPAN, "Demo Workflow", "workflow", 0, 0, 0),
        EvidenceSpan(TRACE, NODE_SPAN, "Carrier", "node", 0, 7, 0),
        EvidenceSpan(TRACE, sibling, "Sibling subflow", "subflow", 0, 9, 0),
        EvidenceSpan(TRACE, elsewhere, "Own child", "node", 2, 0, 0),
    ]

    history = replay(
        execution, transitions, evidence_spans=spans, owner_span_ids={OWNER_SPAN, elsewhere}
    )

    dropped = {d.span_id for d in history.diagnostics if d.code == "otlp_data_dropped"}
    # Its own subtree's loss and its store's carrier count; a sibling's does not.
    assert dropped == {NODE_SPAN, elsewhere}
    unbounded = replay(execution, transitions, evidence_spans=spans)
    assert {d.span_id for d in unbounded.diagnostics if d.code == "otlp_data_dropped"} == {
        NODE_SPAN, sibling, elsewhere,
    }


def test_invalid_json_payload_in_a_cut_patch() -> None:
    execution, transitions, _ = basic()
    transitions[1] = transitions[1]._replace(patch_json=transitions[1].patch_json[:20])

    history = replay(execution, transitions)

    invalid = finding(history, "invalid_json_payload")
    assert (invalid.sequence, invalid.span_id) == (2, NODE_SPAN)
    assert "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT" in invalid.message
    assert history.verdict == "partial"
    assert history.verified_at(1) and not history.verified_at(2)


def test_invalid_json_payload_in_a_cut_start_state_fails() -> None:
    execution, transitions, _ = basic()

    history = replay(replace(execution, state_start='{"title": "", "ite'), transitions)

    assert codes(history)[0] == "invalid_json_payload"
    assert history.verdict == "failed"
    assert not history.has_states
    assert len(history.steps) == 5
    with pytest.raises(StateUnavailableError):
        history.state_at(0)


def test_invalid_json_payload_in_a_cut_end_state_is_partial() -> None:
    execution, transitions, states = basic()

    history = replay(replace(execution, state_end='{"title": "dr'), transitions)

    assert finding(history, "invalid_json_payload").sequence is None
    assert history.verdict == "partial"
    assert history.recorded_end is MISSING
    assert history.replayed_end == states[-1]


def test_claimed_reconstructable_names_the_causes_the_evidence_shows() -> None:
    execution, transitions, _ = basic()
    gap = [t for t in transitions if t.sequence != 2]

    def message(*evidence: EvidenceSpan) -> str:
        history = replay(execution, gap, evidence_spans=evidence)
        return finding(history, "claimed_reconstructable_but_failed").message

    # An untraced write: the sequence is missing, yet no span counted a loss.
    untraced = message(EvidenceSpan(TRACE, NODE_SPAN, "DemoNode", "node", 0, 0, 0))
    assert "never recorded in any span received (" in untraced
    assert "a store write with no recording span current" in untraced
    assert "dropped" not in untraced and "span event limit" not in untraced
    # The span event limit dropped as many events as are missing: that is the cause.
    limited = message(EvidenceSpan(TRACE, NODE_SPAN, "DemoNode", "node", 0, 1, 0))
    assert "1 event the span event limit dropped" in limited
    assert "never recorded" not in limited
    # A cut payload, no gap: neither drops nor unrecorded writes are named.
    cut = [transitions[0]._replace(patch_json="[{"), *transitions[1:]]
    cut_message = finding(replay(execution, cut), "claimed_reconstructable_but_failed").message
    assert "payloads cut on the way" in cut_message
    assert "dropped" not in cut_message and "never recorded" not in cut_message


def test_state_withheld_start_is_not_applicable() -> None:
    execution, transitions, _ = basic()

    history = replay(replace(execution, state_start=None, state_start_mode="redacted"), transitions)

    withheld = finding(history, "state_withheld")
    assert withheld.severity == "info" and "redacted" in withheld.message
    assert "no_start_state" not in codes(history)
    assert history.verdict == "not_applicable"


def test_state_withheld_end_cannot_be_checked_so_partial() -> None:
    execution, transitions, _ = basic()

    history = replay(replace(execution, state_end=None, state_end_mode="excluded"), transitions)

    assert codes(history) == ["state_withheld", "claimed_reconstructable_but_failed"]
    assert all(step.verified for step in history.steps)
    assert history.verdict == "partial"


def test_state_withheld_patch_stops_verification() -> None:
    execution, transitions, _ = basic()
    transitions[2] = transitions[2]._replace(patch_mode="reference", patch_json="ref:abc")

    history = replay(execution, transitions)

    withheld = finding(history, "state_withheld")
    assert (withheld.sequence, withheld.severity) == (3, "warning")
    assert "invalid_json_payload" not in codes(history)
    assert history.verdict == "partial"


def test_owner_not_arrived_gives_in_flight_timeline_without_states() -> None:
    _, transitions, _ = basic()
    spans = [EvidenceSpan(TRACE, NODE_SPAN, "DemoNode", "node", 0, 5, 0)]

    history = replay(None, reversed(transitions), evidence_spans=spans)

    assert codes(history) == ["owner_not_arrived", "otlp_data_dropped"]
    assert history.verdict == "in_flight"
    assert [step.sequence for step in history.steps] == [1, 2, 3, 4, 5]
    assert not any(step.verified for step in history.steps)
    assert timeline(history)[1].changed_paths == ("/items/0",)
    with pytest.raises(StateUnavailableError):
        history.state_at(1)


def test_in_flight_steps_are_numbered_by_position_when_some_lack_a_sequence() -> None:
    patch = [{"op": "replace", "path": "/title", "value": "x"}]
    received = [
        make_transition(None, patch, time_unix_nano=1, event_id="a"),
        make_transition(7, patch, time_unix_nano=2),
        make_transition(None, patch, time_unix_nano=3, event_id="c"),
    ]

    history = replay(None, received)

    assert [step.sequence for step in history.steps] == [1, 2, 3]
    assert [history.step(n).transition.time_unix_nano for n in (1, 2, 3)] == [1, 2, 3]


def test_history_refuses_steps_out_of_sequence_order() -> None:
    _, transitions, _ = basic()
    history = replay(None, transitions)

    with pytest.raises(ValueError, match="ascending"):
        History(
            execution=None, steps=history.steps[::-1], diagnostics=(), verdict="in_flight",
            start_sequence=0, end_sequence=None, states=None, recorded_end=MISSING,
        )


def test_foreign_writer_in_another_trace_is_info_and_still_replayed() -> None:
    execution, transitions, states = basic()
    other_trace = "ffffffffffffffffffffffffffffffff"
    transitions[2] = transitions[2]._replace(trace_id=other_trace, span_id="3333333333333333")

    history = replay(execution, transitions)

    foreign = finding(history, "foreign_writer")
    assert (foreign.severity, foreign.sequence, foreign.span_id) == ("info", 3, "3333333333333333")
    assert other_trace in foreign.message
    assert history.step(3).foreign and not history.step(2).foreign
    assert history.verdict == "verified"
    assert history.replayed_end == states[-1]


def test_foreign_writer_outside_the_owner_subtree() -> None:
    execution, transitions, _ = basic()
    transitions[4] = transitions[4]._replace(span_id="4444444444444444", span_name="Sibling")

    history = replay(execution, transitions, owner_span_ids={OWNER_SPAN, NODE_SPAN})

    foreign = finding(history, "foreign_writer")
    assert foreign.span_id == "4444444444444444"
    assert "'Sibling'" in foreign.message
    assert [step.foreign for step in history.steps] == [False] * 4 + [True]


def test_unknown_contract_version_is_reported_and_replayed_by_newest_rules() -> None:
    execution, transitions, states = basic()

    history = replay(replace(execution, contract_version=9), transitions)

    assert finding(history, "unknown_contract_version").severity == "warning"
    assert history.verdict == "verified"
    assert history.replayed_end == states[-1]


def test_no_start_state_fails_with_a_timeline() -> None:
    execution, transitions, _ = basic()

    history = replay(replace(execution, state_start=None), transitions)

    assert finding(history, "no_start_state").severity == "error"
    assert history.verdict == "failed"
    assert history.steps[0].changed_paths == ("/title",)


def test_verdict_not_applicable_without_a_store_or_without_anything() -> None:
    no_store = replay(make_execution(store_id=None), [])
    nothing = replay(make_execution(state_start=None, state_end=None), [])

    assert no_store.verdict == "not_applicable"
    assert nothing.verdict == "not_applicable"
    assert nothing.diagnostics == ()


def test_verdict_verified_for_an_empty_interval_with_matching_states() -> None:
    history = replay(make_execution(state_start='{"a": 1}', state_end='{"a": 1}'), [])

    assert history.verdict == "verified"
    assert history.state_at(0) == {"a": 1}


# --- captured fixtures --------------------------------------------------------------------

COMPLETE_FIXTURES = [name for name in fixture_names() if name != "g_large_state"]


@pytest.mark.parametrize("name", COMPLETE_FIXTURES)
def test_fixture_replays_to_the_manifest_outcome(name: str) -> None:
    records = load(name)
    root = records.root

    history = replay(
        root,
        records.transitions,
        evidence_spans=records.spans,
        owner_span_ids=records.subtree(root.span_id),
    )

    assert history.verdict == "verified", history.diagnostics
    assert history.diagnostics == ()
    assert json_equal(history.replayed_end, records.expected_final_state())
    assert all(step.verified for step in history.steps)


@pytest.mark.parametrize("name", COMPLETE_FIXTURES)
def test_fixture_every_execution_including_subflows_verifies(name: str) -> None:
    records = load(name)

    for execution in records.executions:
        history = replay(execution, records.transitions, evidence_spans=records.spans)
        assert history.verdict == "verified", (execution.name, history.diagnostics)


def test_fixture_g_large_state_is_partial_with_dropped_events_and_gap() -> None:
    records = load("g_large_state")

    history = replay(records.root, records.transitions, evidence_spans=records.spans)

    assert history.verdict == "partial"
    assert {"otlp_data_dropped", "sequence_gap"} <= set(codes(history))
    gap = finding(history, "sequence_gap")
    assert gap.sequence == 1 and "1-1872" in gap.message
    assert finding(history, "otlp_data_dropped").span_id == history.steps[0].transition.span_id
    assert len(history.steps) == 128
    recorded: Any = history.recorded_end
    assert len(recorded["messages"]) == 2_000


def test_fixture_d_subflow_parent_store_written_by_post_run_actions() -> None:
    records = load("d_subflow")
    parent = records.root
    subflow = records.by_name("Joke and Fact Finder")

    history = replay(parent, records.transitions, owner_span_ids=records.subtree(parent.span_id))

    carriers = {step.transition.span_name for step in history.steps}
    assert "Joke and Fact Finder" in carriers  # post_run_actions sit on the subflow span
    assert not any(step.foreign for step in history.steps)
    assert history.verdict == "verified"
    assert subflow.store_id != parent.store_id
    sub_history = replay(subflow, records.transitions)
    assert {step.transition.store_id for step in sub_history.steps} == {subflow.store_id}


@pytest.mark.parametrize("seed", seeds("HISTORY_SEEDS", 3), ids=seed_id)
def test_fixture_c_concurrent_interleaved_events_replay_in_sequence_order(seed: int) -> None:
    records = load("c_concurrent")
    shuffled = list(records.transitions)
    random.Random(seed).shuffle(shuffled)

    history = replay(records.root, shuffled)

    spans = [step.transition.span_name for step in history.steps]
    assert len(set(spans[:9])) > 1  # the concurrent nodes really interleave
    assert history.verdict == "verified"
    assert json_equal(history.replayed_end, records.expected_final_state())


def test_fixture_f_exclude_serializer_empty_patches_with_revision_bump() -> None:
    records = load("f_exclude_serializer")

    history = replay(records.root, records.transitions)

    empty = [
        step for step in history.steps
        if step.transition.patch_json == "[]"
        and step.transition.revision_after == (step.transition.revision_before or 0) + 1
    ]  # fmt: skip
    assert empty
    assert history.verdict == "verified"


# --- corrupted fixture variants -------------------------------------------------------------


def corrupted(name: str, change: Any) -> History:
    records = load(name)
    root = records.root
    mine = sorted(
        (t for t in records.transitions if t.store_id == root.store_id),
        key=lambda t: t.sequence or 0,
    )
    return replay(root, change(mine), evidence_spans=records.spans)


def test_corrupted_fixture_dropped_transition_is_a_gap() -> None:
    history = corrupted("a_linear", lambda ts: ts[:5] + ts[6:])

    assert finding(history, "sequence_gap").sequence == 6
    assert history.verdict == "partial"


def test_corrupted_fixture_duplicated_transition_collapses() -> None:
    history = corrupted("a_linear", lambda ts: ts + ts[3:6])

    assert history.verdict == "verified"


def test_corrupted_fixture_conflicting_duplicate_is_reported() -> None:
    def duplicate(ts: list[Transition]) -> list[Transition]:
        return [*ts, ts[0]._replace(event_id="x", patch_json="[]")]

    history = corrupted("a_linear", duplicate)

    assert finding(history, "duplicate_sequence").sequence == 1


def test_corrupted_fixture_swapped_sequences_are_caught() -> None:
    def swap(ts: list[Transition]) -> list[Transition]:
        ts = list(ts)
        ts[2], ts[3] = ts[3]._replace(sequence=3), ts[2]._replace(sequence=4)
        return ts

    history = corrupted("a_linear", swap)

    assert {"patch_failed", "end_state_mismatch"} & set(codes(history))
    assert history.verdict in ("partial", "failed")


def test_corrupted_fixture_truncated_transitions_are_missing_at_the_end() -> None:
    history = corrupted("l_split_batches", lambda ts: ts[:-2])

    assert finding(history, "missing_trailing_transitions").sequence == 5
    assert history.verdict == "partial"


def test_corrupted_fixture_broken_revision_is_a_discontinuity() -> None:
    def bump(ts: list[Transition]) -> list[Transition]:
        return [*ts[:4], ts[4]._replace(revision_before=40), *ts[5:]]

    history = corrupted("b_graph_loop", bump)

    assert finding(history, "revision_discontinuity").sequence == 5


def test_corrupted_fixture_cut_payload_is_invalid_json() -> None:
    def cut(ts: list[Transition]) -> list[Transition]:
        return [*ts[:2], ts[2]._replace(patch_json=ts[2].patch_json[:-3]), *ts[3:]]

    history = corrupted("c_concurrent", cut)

    assert finding(history, "invalid_json_payload").sequence == 3
    assert history.verdict == "partial"


# --- array indexes in pointers ---------------------------------------------------------------


@pytest.mark.parametrize("token", ["0", "7", "10"])
def test_list_index_reads_ascii_decimal_indexes(token: str) -> None:
    assert list_index(token) == int(token)


# Superscript two, Arabic-Indic one, fullwidth one: digits to str.isdigit, not to RFC 6901.
@pytest.mark.parametrize("token", ["01", "-", "", "+1", " 1", "1.0", "\u00b2", "\u0661", "\uff11"])
def test_list_index_names_no_index_for_any_other_token(token: str) -> None:
    assert list_index(token) is None


UNICODE_DIGITS: list[Patch] = [
    [
        {"op": "add", "path": "/x/\u00b2", "value": 1},
        {"op": "add", "path": "/x/\u0661", "value": 2},
        {"op": "replace", "path": "/x", "value": [0, 5]},
    ]
]


def test_replay_treats_a_unicode_digit_token_as_a_member_name_not_an_index() -> None:
    # The tokens name members while /x is an object; once /x is an array they name nothing.
    execution, transitions, _ = scenario({"x": {}}, UNICODE_DIGITS)
    touched = TouchedValues()
    history = replay(execution, transitions, on_applied=touched)
    assert history.verdict == "verified"
    assert resolve(history.state_at(1), "/x/\u0661") is MISSING
    watched = field_index(history, execution.run_id, touched.nodes)
    walked = field_index(history, execution.run_id)
    assert {row.path for row in watched.rows} == {row.path for row in walked.rows}
    # The last element is indexed twice, at its index and as [-1] (`~-1`).
    assert {row.path for row in walked.rows} == {"/x", "/x/0", "/x/1", "/x/~-1"}


def test_provenance_does_not_take_a_unicode_digit_token_for_a_shifted_index() -> None:
    execution, transitions, _ = scenario({"x": {}}, UNICODE_DIGITS)

    entries = provenance(replay(execution, transitions), "/x/0").entries

    assert [(e.sequence, e.op, e.relation) for e in entries] == [(1, "replace", "ancestor")]


# --- provenance ------------------------------------------------------------------------------


def test_provenance_on_a_nested_path_lists_each_write_with_values() -> None:
    execution, transitions, _ = basic()
    history = replay(execution, transitions)

    result = provenance(history, "/meta/tags/1")

    parent, write = result.entries
    assert (parent.sequence, parent.relation) == (4, "ancestor")
    assert (parent.before, parent.after, parent.changed) == (MISSING, MISSING, False)
    assert (write.sequence, write.op, write.relation) == (5, "add", "self")
    assert (write.before, write.after) == (MISSING, "b")
    assert (write.action, write.span_id, write.span_name, write.store_id) == (
        "action_5",
        NODE_SPAN,
        "DemoNode",
        STORE,
    )
    assert write.time_unix_nano == transitions[4].time_unix_nano
    assert result.last_writer == write


def test_provenance_includes_replacement_of_a_parent_object() -> None:
    patches: list[Patch] = [
        [{"op": "replace", "path": "/meta/owner", "value": "bea"}],
        [{"op": "replace", "path": "/meta", "value": {"owner": "cid"}}],
        [{"op": "replace", "path": "/meta", "value": {"owner": "cid", "x": 1}}],
    ]
    execution, transitions, _ = scenario({"meta": {"owner": "ana"}}, patches)

    result = provenance(replay(execution, transitions), "/meta/owner")

    assert [(e.sequence, e.relation, e.before, e.after) for e in result.entries] == [
        (1, "self", "ana", "bea"),
        (2, "ancestor", "bea", "cid"),
        (3, "ancestor", "cid", "cid"),
    ]
    assert result.last_writer is not None and result.last_writer.sequence == 2


def test_provenance_of_a_parent_lists_descendant_writes() -> None:
    execution, transitions, _ = basic()

    result = provenance(replay(execution, transitions), "/meta")

    assert [(e.sequence, e.relation) for e in result.entries] == [(4, "self"), (5, "descendant")]
    replaced, inside = result.entries
    assert (replaced.value_path, replaced.before) == ("/meta", None)
    assert replaced.after == {"owner": "ana", "tags": ["a"]}
    # A write inside the field shows the value it wrote, not the whole field again.
    assert (inside.value_path, inside.before, inside.after) == ("/meta/tags/1", MISSING, "b")
    assert result.last_writer == inside


@pytest.mark.slow
def test_provenance_of_a_list_appended_to_at_every_step_stays_linear() -> None:
    """10,000 appends to a 1,000-element list: each write costs its element, not the list."""
    start = {"log": [f"entry {i}" for i in range(1_000)]}
    patches: list[Patch] = [
        [{"op": "add", "path": "/log/-", "value": f"step {i}"}] for i in range(1, 10_001)
    ]
    execution, transitions, _ = scenario(start, patches)

    result = provenance(replay(execution, transitions), "/log")

    assert len(result.entries) == 10_000
    last = result.entries[-1]
    assert (last.value_path, last.before, last.after) == ("/log/10999", MISSING, "step 10000")
    assert all(isinstance(e.after, str) for e in result.entries)


def test_provenance_follows_list_moves_and_shifts() -> None:
    patches: list[Patch] = [
        [{"op": "move", "from": "/items/2", "path": "/items/0"}],
        [{"op": "remove", "path": "/items/1"}],
        [{"op": "add", "path": "/other", "value": 1}],
    ]
    execution, transitions, _ = scenario({"items": ["a", "b", "c"]}, patches)
    history = replay(execution, transitions)

    first = provenance(history, "/items/0")
    second = provenance(history, "/items/1")

    assert [(e.sequence, e.relation, e.before, e.after) for e in first.entries] == [
        (1, "self", "a", "c")
    ]
    assert first.entries[0].from_path == "/items/2"
    assert [(e.sequence, e.relation, e.before, e.after) for e in second.entries] == [
        (1, "shifted", "b", "a"),
        (2, "self", "a", "b"),
    ]


def test_provenance_does_not_name_a_step_that_put_the_value_back() -> None:
    # jsonpatch.make_patch(["p", "q"], ["q", "q", "p"]), as junjo sent it: the add
    # shifts "q" off /items/1 and the move brings it back, so step 1 left
    # /items/1 as it was; /items/0 and /items/2 it did write.
    patches: list[Patch] = [
        [
            {"op": "add", "path": "/items/0", "value": "q"},
            {"op": "move", "from": "/items/1", "path": "/items/2"},
        ],
        [{"op": "add", "path": "/other", "value": 1}],
    ]
    execution, transitions, _ = scenario({"items": ["p", "q"]}, patches)
    history = replay(execution, transitions)

    kept = provenance(history, "/items/1")
    assert [(e.relation, e.before, e.after, e.undone) for e in kept.entries] == [
        ("shifted", "q", "p", True),
        ("self", "p", "q", True),
    ]
    assert kept.last_writer is None
    assert [e.changed for e in kept.entries] == [False, False]
    for pointer, value in (("/items/0", "q"), ("/items/2", "p")):
        written = provenance(history, pointer).last_writer
        assert written is not None and (written.sequence, written.after) == (1, value)
        assert not written.undone


def test_provenance_copy_writes_only_its_target() -> None:
    patches = [[{"op": "copy", "from": "/a", "path": "/b"}]]
    execution, transitions, _ = scenario({"a": {"v": 1}}, patches)
    history = replay(execution, transitions)

    assert provenance(history, "/a/v").entries == ()
    (write,) = provenance(history, "/b/v").entries
    assert (write.relation, write.before, write.after) == ("ancestor", MISSING, 1)


def test_provenance_reads_values_copied_or_moved_across_members_it_skipped() -> None:
    """Writes to other members are skipped, yet a copy or move across sees them."""
    patches: list[Patch] = [
        [{"op": "add", "path": "/other/x", "value": 1}],
        [
            {"op": "replace", "path": "/other/x", "value": 2},
            {"op": "add", "path": "/n", "value": 0},
        ],
        [{"op": "copy", "from": "/other/x", "path": "/target"}],
        [{"op": "add", "path": "/other/list", "value": []}],
        [{"op": "move", "from": "/target", "path": "/other/list/0"}],
        [{"op": "add", "path": "/other/y", "value": 3}],
        [{"op": "move", "from": "/other/y", "path": "/target"}],
    ]
    execution, transitions, states = scenario({"other": {}}, patches)

    result = provenance(replay(execution, transitions), "/target")

    assert [(e.sequence, e.op, e.before, e.after) for e in result.entries] == [
        (3, "copy", MISSING, 2),
        (5, "move", 2, MISSING),
        (7, "move", MISSING, 3),
    ]
    assert states[-1]["target"] == 3 and states[-1]["other"] == {"x": 2, "list": [2]}


def test_provenance_last_writer_is_none_for_a_value_from_the_start_state() -> None:
    execution, transitions, _ = basic()

    result = provenance(replay(execution, transitions), "/untouched")

    assert result.entries == ()
    assert result.last_writer is None


def test_provenance_marks_writes_after_a_gap_unverified() -> None:
    execution, transitions, _ = basic()
    history = replay(execution, [t for t in transitions if t.sequence != 2])

    result = provenance(history, "/meta/owner")

    assert [(e.sequence, e.verified) for e in result.entries] == [(4, False)]


def test_provenance_lists_received_writes_that_did_not_apply_after_a_gap() -> None:
    """A span limit dropped the write that made /scratch; the later writes into it arrived."""
    patches: list[Patch] = [
        [{"op": "add", "path": "/n", "value": 1}],
        [{"op": "add", "path": "/scratch", "value": {}}],
        *([{"op": "add", "path": f"/scratch/{key}", "value": key}] for key in ("3", "4")),
        [{"op": "remove", "path": "/scratch"}],
    ]
    execution, transitions, _ = scenario({}, patches)
    history = replay(execution, [t for t in transitions if t.sequence != 2])

    result = provenance(history, "/scratch")
    inside = provenance(history, "/scratch/3")

    assert [(e.sequence, e.op, e.relation, e.value_path) for e in result.entries] == [
        (3, "add", "descendant", "/scratch/3"),
        (4, "add", "descendant", "/scratch/4"),
        (5, "remove", "self", "/scratch"),
    ]
    assert all(not e.applied and not e.verified and not e.changed for e in result.entries)
    assert {e.not_applied for e in result.entries} == {"after_missing_transitions"}
    assert [e.attempted for e in result.entries] == ["3", "4", MISSING]
    # They changed no replayed state, so none of them is the writer.
    assert result.last_writer is None
    write = inside.entries[0]
    assert (write.sequence, write.relation, write.applied) == (3, "self", False)
    assert (write.before, write.after, write.attempted) == (MISSING, MISSING, "3")


def test_provenance_says_why_a_write_did_not_apply() -> None:
    patches: list[Patch] = [
        [{"op": "add", "path": "/a", "value": {}}],
        [{"op": "replace", "path": "/a", "value": 2}],
    ]
    execution, transitions, _ = scenario({}, patches)
    broken = json.dumps([{"op": "replace", "path": "/a/x", "value": 1}])
    transitions[0] = transitions[0]._replace(patch_json=broken)

    entries = provenance(replay(execution, transitions), "/a").entries

    # /a does not exist yet, so the first write fails on a proven state; the next follows it.
    assert [(e.sequence, e.applied, e.not_applied) for e in entries] == [
        (1, False, "patch_failed"),
        (2, False, "after_broken_evidence"),
    ]


def test_provenance_on_fixture_a_linear_finds_the_list_reorder() -> None:
    records = load("a_linear")
    history = replay(records.root, records.transitions)

    result = provenance(history, "/items")

    assert any(entry.op == "move" for entry in result.entries)
    last = result.last_writer
    assert last is not None and (last.op, last.from_path) == ("move", "/items/2")
    # A move inside /items changes it in two places, so it shows the whole list.
    assert last.value_path == "/items"
    assert last.after == records.expected_final_state()["items"]


def test_provenance_rejects_a_malformed_pointer() -> None:
    execution, transitions, _ = basic()

    with pytest.raises(ValueError, match="start with '/'"):
        provenance(replay(execution, transitions), "items")
