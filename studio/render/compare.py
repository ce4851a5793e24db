"""Comparing two executions: where their state chronologies part, and how they end.

Pure: two Inspections in, a `Comparison` of plain values out, for the page and its
JSON twin. Steps are aligned by position (step k against step k, 0 the start states),
since two runs need not share sequences, stores or step counts; the first divergence
is the first k whose states differ or that only one run reached. Bounded: an explicit
stack, at most MAX_DIFF_ENTRIES places, values cut at API_MAX_DEPTH.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any, Final

from collector.replay.history import History, Step, walk
from collector.replay.jsondoc import MISSING, JsonValue, Missing, escape_token, json_equal
from collector.timestamps import rfc3339
from studio.inspect import Inspection
from studio.render.bounded import API_MAX_DEPTH, copy_to_depth, cut_line, cut_text, deeper_than
from studio.render.waterfall import MESSAGE_CHARS, NAME_CHARS

MAX_DIFF_ENTRIES: Final = 500
"""Most entries a comparison reports per diff; a whole-state rewrite stays readable."""


@dataclass(frozen=True, slots=True)
class DiffEntry:
    """One place where two JSON documents differ; MISSING means absent on that side."""

    pointer: str
    a: JsonValue | Missing
    b: JsonValue | Missing


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one run ended, for the side-by-side header."""

    run_id: str
    workflow: str
    service: str
    kind: str
    status: str
    verdict: str
    error: str | None
    error_type: str | None
    start_unix_nano: int
    duration_nano: int | None
    received_transitions: int
    transition_count: int | None


@dataclass(frozen=True, slots=True)
class StepSide:
    """One run's step at the divergence; None fields mean the run has no such step."""

    sequence: int | None
    action: str | None
    node: str | None
    changed_paths: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Divergence:
    """The first position whose states differ (0 = the start states)."""

    position: int
    a: StepSide
    b: StepSide
    differences: tuple[DiffEntry, ...]
    truncated: bool


@dataclass(frozen=True, slots=True)
class Comparison:
    """Everything the compare page shows. `unavailable` explains an empty comparison."""

    a: Outcome
    b: Outcome
    compared_steps: int
    divergence: Divergence | None
    final_diff: tuple[DiffEntry, ...]
    final_truncated: bool
    unavailable: str | None


def bounded_diff(
    a: JsonValue | Missing, b: JsonValue | Missing
) -> tuple[list[DiffEntry], bool]:
    """The first MAX_DIFF_ENTRIES places `a` and `b` differ, and whether there are more.

    Positional, in document order (`differences`); the values are the callers'
    own (not copied). Only one entry past the bound is looked for, so a rewrite
    of a large state costs no more than the entries shown.
    """
    found = [
        DiffEntry(pointer, left, right)
        for pointer, left, right in islice(differences(a, b), MAX_DIFF_ENTRIES + 1)
    ]
    return found[:MAX_DIFF_ENTRIES], len(found) > MAX_DIFF_ENTRIES


def differences(
    a: JsonValue | Missing, b: JsonValue | Missing
) -> Iterator[tuple[str, JsonValue | Missing, JsonValue | Missing]]:
    """(pointer, a's value, b's value) at each leaf-most place the two differ, lazily.

    As `collector.replay.jsondoc.iter_differences` orders them (object keys sorted,
    array items by index, depth first), but walked with an explicit stack of
    lazy child pairs, and two containers API_MAX_DEPTH levels down are compared
    whole and reported as one place, so no depth of nesting can exhaust the
    interpreter's stack and the first few places cost little in a huge state.
    """
    pending: list[Iterator[tuple[str, JsonValue | Missing, JsonValue | Missing]]] = [
        iter((("", a, b),))
    ]
    while pending:
        item = next(pending[-1], None)
        if item is None:
            pending.pop()
            continue
        pointer, left, right = item
        children = _paired_children(left, right) if len(pending) <= API_MAX_DEPTH else None
        if children is not None:
            pending.append(_under(pointer, children))
        elif not _equal_here(left, right):
            yield pointer, left, right


def _under(
    pointer: str, children: Iterator[tuple[str, JsonValue | Missing, JsonValue | Missing]]
) -> Iterator[tuple[str, JsonValue | Missing, JsonValue | Missing]]:
    return ((f"{pointer}/{escape_token(key)}", one, other) for key, one, other in children)


def _paired_children(
    left: JsonValue | Missing, right: JsonValue | Missing
) -> Iterator[tuple[str, JsonValue | Missing, JsonValue | Missing]] | None:
    """The two containers' children side by side; None unless both are objects or arrays."""
    if isinstance(left, dict) and isinstance(right, dict):
        return (
            (key, left.get(key, MISSING), right.get(key, MISSING))
            for key in sorted(left.keys() | right.keys())
        )
    if isinstance(left, list) and isinstance(right, list):
        return (
            (
                str(index),
                left[index] if index < len(left) else MISSING,
                right[index] if index < len(right) else MISSING,
            )
            for index in range(max(len(left), len(right)))
        )
    return None


def _equal_here(left: JsonValue | Missing, right: JsonValue | Missing) -> bool:
    """JSON's equality at one place; containers met at the depth bound are walked for it."""
    if isinstance(left, dict | list) and isinstance(right, dict | list):
        return type(left) is type(right) and next(differences_below(left, right), None) is None
    return _leaf_equal(left, right)


def differences_below(left: JsonValue, right: JsonValue) -> Iterator[None]:
    """One item per leaf that differs between two containers, at any depth, without recursion."""
    pending: list[tuple[JsonValue | Missing, JsonValue | Missing]] = [(left, right)]
    while pending:
        one, other = pending.pop()
        children = _paired_children(one, other)
        if children is not None:
            pending += [(a, b) for _, a, b in children]
        elif not _leaf_equal(one, other):
            yield None


def _leaf_equal(left: JsonValue | Missing, right: JsonValue | Missing) -> bool:
    """JSON's equality where the two are not both objects or both arrays.

    Numbers are equal by value (`1` is `1.0`), a boolean is never a number
    (`true` is not `1`), and values of different kinds never are.
    """
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    if isinstance(left, int | float) and isinstance(right, int | float):
        return left == right
    return type(left) is type(right) and left == right


def states_equal(a: JsonValue | Missing, b: JsonValue | Missing) -> bool:
    """JSON's equality of two states, at any depth.

    `collector.replay.jsondoc.json_equal` compares in C but recursively, so states
    nested deeper than API_MAX_DEPTH are compared with an explicit stack instead.
    """
    if _deep(a) or _deep(b):
        return next(differences(a, b), None) is None
    return json_equal(a, b)


def _deep(value: JsonValue | Missing) -> bool:
    return not isinstance(value, Missing) and deeper_than(value, API_MAX_DEPTH)


def compare(a: Inspection, b: Inspection) -> Comparison:
    """Outcomes of both runs, their first divergence, and how their final states differ."""
    final_diff, final_truncated = bounded_diff(_final_state(a.history), _final_state(b.history))
    unavailable = _unavailable(a, b)
    divergence, compared = (None, 0) if unavailable else first_divergence(a.history, b.history)
    return Comparison(
        a=outcome(a),
        b=outcome(b),
        compared_steps=compared,
        divergence=divergence,
        final_diff=_copied(final_diff),
        final_truncated=final_truncated,
        unavailable=unavailable,
    )


def first_divergence(a: History, b: History) -> tuple[Divergence | None, int]:
    """The first position where the states differ, and how many positions were compared.

    Both histories are walked once, in step; a state is compared only with the
    state at the same position of the other run. Raises StateUnavailableError
    when either history has no start state.
    """
    start_a, start_b = _start_state(a), _start_state(b)
    if not states_equal(start_a, start_b):
        return _divergence(0, None, None, start_a, start_b), 0
    walk_a, walk_b = walk(a), walk(b)
    position = 0
    while True:
        next_a, next_b = next(walk_a, None), next(walk_b, None)
        if next_a is None and next_b is None:
            return None, position
        position += 1
        # A run that ran out of steps stays in its last state.
        step_a, state_a = next_a if next_a is not None else (None, a.replayed_end)
        step_b, state_b = next_b if next_b is not None else (None, b.replayed_end)
        if step_a is None or step_b is None or not states_equal(state_a, state_b):
            return _divergence(position, step_a, step_b, state_a, state_b), position


def outcome(inspection: Inspection) -> Outcome:
    """The run's header facts, from its stored row or, while in flight, what arrived."""
    row = inspection.row
    if row is not None:
        return Outcome(
            run_id=row.run_id,
            workflow=cut_line(row.name, NAME_CHARS),
            service=row.service,
            kind=row.kind,
            status=row.status,
            verdict=inspection.history.verdict,
            error=cut_text(row.status_message, MESSAGE_CHARS) or None,
            error_type=row.error_type and cut_line(row.error_type, NAME_CHARS),
            start_unix_nano=row.start_unix_nano,
            duration_nano=row.end_unix_nano - row.start_unix_nano,
            received_transitions=len(inspection.history.steps),
            transition_count=row.transition_count,
        )
    assert inspection.in_flight is not None
    flight = inspection.in_flight
    return Outcome(
        run_id=flight.run_id,
        workflow="",
        service=flight.service,
        kind="workflow",
        status="in_flight",
        verdict=inspection.history.verdict,
        error=None,
        error_type=None,
        start_unix_nano=flight.first_unix_nano,
        duration_nano=None,
        received_transitions=len(inspection.history.steps),
        transition_count=None,
    )


def comparison_json(comparison: Comparison) -> dict[str, Any]:
    """The JSON twin's body; MISSING values become null with a `*_present` flag."""
    divergence = comparison.divergence
    return {
        "a": _outcome_json(comparison.a),
        "b": _outcome_json(comparison.b),
        "compared_steps": comparison.compared_steps,
        "unavailable": comparison.unavailable,
        "divergence": None
        if divergence is None
        else {
            "position": divergence.position,
            "a": _step_json(divergence.a),
            "b": _step_json(divergence.b),
            "differences": [_entry_json(e) for e in divergence.differences],
            "truncated": divergence.truncated,
        },
        "final_diff": [_entry_json(e) for e in comparison.final_diff],
        "final_truncated": comparison.final_truncated,
    }


def _divergence(
    position: int,
    step_a: Step | None,
    step_b: Step | None,
    state_a: JsonValue | Missing,
    state_b: JsonValue | Missing,
) -> Divergence:
    # The states may be walk()'s live documents: copy what the result keeps.
    differences, truncated = bounded_diff(state_a, state_b)
    return Divergence(
        position, _side(step_a), _side(step_b), _copied(differences), truncated
    )


def _side(step: Step | None) -> StepSide:
    if step is None:
        return StepSide(None, None, None, ())
    return StepSide(
        step.sequence, step.transition.action, step.transition.span_name, step.changed_paths
    )


def _start_state(history: History) -> JsonValue:
    return history.state_at(history.start_sequence)


def _final_state(history: History) -> JsonValue | Missing:
    """The producer's recorded end state when readable, else the replayed end.

    The recorded end is what the run itself saw, so it is right even when
    events were lost on the way; the replay is the best we can do without it.
    """
    recorded = history.recorded_end
    if recorded is not MISSING or not history.has_states:
        return recorded
    return history.replayed_end


def _unavailable(a: Inspection, b: Inspection) -> str | None:
    for label, inspection in (("A", a), ("B", b)):
        if not inspection.history.has_states:
            return (
                f"run {label} ({inspection.run_id}) has no start state to replay from, "
                "so its steps cannot be compared"
            )
    return None


def _copied(entries: list[DiffEntry]) -> tuple[DiffEntry, ...]:
    return tuple(DiffEntry(e.pointer, _copy(e.a), _copy(e.b)) for e in entries)


def _copy(value: JsonValue | Missing) -> JsonValue | Missing:
    return value if isinstance(value, Missing) else copy_to_depth(value)


def _outcome_json(found: Outcome) -> dict[str, Any]:
    return {
        "id": found.run_id,
        "workflow": found.workflow or None,
        "service": found.service,
        "kind": found.kind,
        "status": found.status,
        "verdict": found.verdict,
        "error": found.error,
        "error_type": found.error_type,
        "started_at": rfc3339(found.start_unix_nano),
        "start_unix_nano": found.start_unix_nano,
        "duration_nano": found.duration_nano,
        "received_transitions": found.received_transitions,
        "transition_count": found.transition_count,
    }


def _step_json(side: StepSide) -> dict[str, Any] | None:
    if side.sequence is None:
        return None
    return {
        "sequence": side.sequence,
        "action": side.action,
        "node": side.node,
        "changed_paths": list(side.changed_paths),
    }


def _entry_json(entry: DiffEntry) -> dict[str, Any]:
    return {
        "path": entry.pointer,
        "a": None if isinstance(entry.a, Missing) else entry.a,
        "a_present": entry.a is not MISSING,
        "b": None if isinstance(entry.b, Missing) else entry.b,
        "b_present": entry.b is not MISSING,
    }
