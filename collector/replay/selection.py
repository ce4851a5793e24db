"""Selection stage: which transitions belong to an execution, and in what order.

Replay (walk.py) walks what this module hands it; the rules (per contract version,
in flight, duplicates) are specified in docs/guarantees.md, "The rules replay follows".

Invariant: the sequences handed out ascend, so the History built from them can
look steps up by bisection. Pure: no I/O, no logging, no clock; inputs are
never mutated.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Final, TypeAlias

from collector.model import EvidenceSpan, Execution, Transition

KNOWN_CONTRACT_VERSIONS: Final = frozenset({1, 2, 3})

Sequenced: TypeAlias = list[tuple[int, Transition]]
"""Selected transitions, each with the sequence replay numbers its step by."""


@dataclass(frozen=True, slots=True)
class Interval:
    """The sequences that belong to the execution: `lower < sequence <= upper`.

    `upper` None means unbounded. `by_time` (contract 1, and in flight without
    sequences) means the transitions are ordered by time and numbered 1..n.
    """

    lower: int
    upper: int | None
    by_time: bool


@dataclass(frozen=True, slots=True)
class Conflict:
    """One sequence received more than once with different content; `variants[0]` is replayed."""

    sequence: int
    variants: tuple[Transition, ...]

    @property
    def patches_differ(self) -> bool:
        """Whether the copies disagree on the change itself, not just on ids or counters."""
        return len({t.patch_json for t in self.variants}) > 1


def contract_version(execution: Execution, received: Iterable[Transition]) -> int:
    """The contract rules to replay by: the declared version if known, else inferred."""
    declared = execution.contract_version
    if declared in KNOWN_CONTRACT_VERSIONS:
        return declared
    if execution.transition_start is not None:
        return 3
    return 3 if any(t.sequence is not None for t in received) else 1


def interval_of(execution: Execution, version: int) -> Interval:
    if version == 1:
        return Interval(0, None, by_time=True)
    lower = execution.transition_start or 0
    upper = execution.transition_end
    if upper is None and execution.transition_count is not None:
        upper = lower + execution.transition_count
    return Interval(lower, upper, by_time=False)


def own_evidence(
    execution: Execution,
    received: Iterable[Transition],
    evidence: Iterable[EvidenceSpan],
    owner_span_ids: Collection[str] | None,
) -> list[EvidenceSpan]:
    """The evidence whose losses can touch this run: its own spans and its store's
    carriers (another span's losses are another run's); all, without a known subtree."""
    if owner_span_ids is None:
        return list(evidence)
    store_id = execution.store_id
    carriers = {(t.trace_id, t.span_id) for t in received if t.store_id == store_id}
    return [
        span
        for span in evidence
        if span.span_id in owner_span_ids or (span.trace_id, span.span_id) in carriers
    ]


def select(
    execution: Execution, received: Iterable[Transition], interval: Interval
) -> dict[int, list[Transition]]:
    """Transitions of the interval grouped by sequence (time order for contract 1)."""
    mine = [t for t in received if t.store_id == execution.store_id]
    if interval.by_time:
        # Without sequences a retried export would take a position of its own,
        # so identical copies are dropped before positions are handed out.
        window = _distinct(sorted(mine, key=_time_order))
        timed = [t for t in window if _in_time_window(execution, t)]
        return {position: [t] for position, t in enumerate(timed, 1)}
    groups: dict[int, list[Transition]] = defaultdict(list)
    for transition in mine:
        sequence = transition.sequence
        if sequence is None or sequence <= interval.lower:
            continue
        if interval.upper is not None and sequence > interval.upper:
            continue
        groups[sequence].append(transition)
    return {sequence: sorted(groups[sequence], key=_time_order) for sequence in sorted(groups)}


def own_run_first(
    grouped: dict[int, list[Transition]], run_id: str
) -> tuple[dict[int, list[Transition]], list[Conflict]]:
    """A convention run's own transitions where other runs of its store reused the sequence.

    A store's sequence should never repeat, but a LangGraph run forked from an old
    checkpoint numbers its steps from there again. Where this run recorded a sequence
    itself, the copies other runs recorded are set aside and returned as conflicts
    (the run's own first), so they are reported without making the step ambiguous.
    """
    kept: dict[int, list[Transition]] = {}
    reused: list[Conflict] = []
    for sequence, variants in grouped.items():
        own = [t for t in variants if t.run_id == run_id]
        others = _distinct(t for t in variants if t.run_id != run_id)
        if own and others:
            kept[sequence] = own
            reused.append(Conflict(sequence, (own[0], *others)))
        else:
            kept[sequence] = variants
    return kept, reused


def resolve_duplicates(
    grouped: dict[int, list[Transition]],
) -> tuple[list[Transition], list[Conflict]]:
    """One transition per sequence (the earliest), and the sequences received in conflict.

    Identical copies collapse silently; a conflict is ambiguous for replay when
    the patches differ (`Conflict.patches_differ`).
    """
    chosen: list[Transition] = []
    conflicts: list[Conflict] = []
    for sequence, variants in grouped.items():
        unique = _distinct(variants)
        chosen.append(unique[0])
        if len(unique) > 1:
            conflicts.append(Conflict(sequence, tuple(unique)))
    return chosen, conflicts


def assign_sequences(chosen: list[Transition], interval: Interval) -> Sequenced:
    """Each chosen transition with its step's sequence: its position when ordered by time."""
    if interval.by_time:
        return list(enumerate(chosen, 1))
    return [(t.sequence, t) for t in chosen if t.sequence is not None]


def in_flight_order(received: Collection[Transition]) -> Sequenced:
    """What arrived before the owner span, ordered and numbered (see the rules above)."""
    by_time = any(t.sequence is None for t in received)
    ordered = _distinct(sorted(received, key=_time_order if by_time else _sequence_order))
    return assign_sequences(ordered, Interval(0, None, by_time=by_time))


def foreign_by_carrier(
    execution: Execution, sequenced: Sequenced, owner_span_ids: Collection[str] | None
) -> dict[str, Sequenced]:
    """The transitions carried outside the owner (another trace, or outside its subtree)."""
    foreign: dict[str, Sequenced] = defaultdict(list)
    for sequence, transition in sequenced:
        outside_trace = transition.trace_id != execution.trace_id
        outside_owner = owner_span_ids is not None and transition.span_id not in owner_span_ids
        if outside_trace or outside_owner:
            foreign[transition.span_id].append((sequence, transition))
    return dict(foreign)


def _distinct(transitions: Iterable[Transition]) -> list[Transition]:
    """The first of each group of identical transitions, in the given order."""
    first: dict[tuple[object, ...], Transition] = {}
    for transition in transitions:
        first.setdefault(_content(transition), transition)
    return list(first.values())


def _time_order(transition: Transition) -> tuple[int, int, str]:
    return transition.time_unix_nano, transition.event_index, transition.event_id


def _sequence_order(transition: Transition) -> tuple[int, int, int, str]:
    return (transition.sequence or 0, *_time_order(transition))


def _in_time_window(execution: Execution, transition: Transition) -> bool:
    if execution.end_unix_nano <= 0:
        return transition.time_unix_nano >= execution.start_unix_nano
    return execution.start_unix_nano <= transition.time_unix_nano <= execution.end_unix_nano


def _content(transition: Transition) -> tuple[object, ...]:
    # What makes two copies of an event "the same": a retried export repeats all
    # of it, while a genuine conflict differs in the event id or the change.
    return (
        transition.event_id,
        transition.patch_json,
        transition.revision_before,
        transition.revision_after,
        transition.action,
    )
