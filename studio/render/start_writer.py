"""Who wrote a start-state value: the earlier runs of a store that several runs share.

A live store lent to several `execute(store=...)` calls (SCHEMA.md 7.1, 7.4) starts
each run with the state the earlier runs left, so a run's own provenance can end at
"the start state". This walks back through the store's earlier runs, newest first,
each one's provenance, until one wrote the value; writes between runs, in a span
that is no run's, are replayed from the earlier run's end and named as no run's.

Invariant: a writer is named only when every run on the way holds the same value
where the walk enters it; it is unverified when transitions on the way never arrived.
At most MAX_EARLIER_RUNS runs are read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from collector.model import Transition
from collector.replay.history import StateUnavailableError
from collector.replay.jsondoc import (
    MISSING,
    PATCH_ERRORS,
    JsonPatchOp,
    JsonValue,
    Missing,
    clone,
    clone_or_missing,
    json_equal,
    parse_patch,
    patch_in_place,
    pointer_parts,
    resolve,
    resolve_parts,
)
from collector.replay.provenance import op_relation
from collector.store.listing import StoreRun
from studio.inspect import Inspection
from studio.links import Links

# Junjo lends a store to a handful of runs; a long chain of runs that never wrote
# the field is cut here rather than replaying the whole store.
MAX_EARLIER_RUNS: Final = 8

FindRun = Callable[[str, int, Sequence[str]], StoreRun | None]
Inspect = Callable[[str], Inspection | None]
# A store's transitions with after < sequence <= through: Store.store_transitions_between.
Between = Callable[[str, int, int], Sequence[Transition]]


@dataclass(frozen=True, slots=True)
class StartWriter:
    """The write (of an earlier run, or between runs) that set a start-state value."""

    # None for a write between runs on the store, in a span that is no run's.
    run_id: str | None
    run_name: str | None
    sequence: int
    action: str
    span_name: str
    # The earlier run's page at that step, with the field's provenance open; for
    # a write between runs, the runs of the trace whose page shows its span.
    href: str
    # False when a transition after it (up to this run's start) never arrived.
    verified: bool


@dataclass(frozen=True, slots=True)
class _Walk:
    """Where the walk back through a store stands: the value, and how sure it is."""

    store_id: str
    pointer: str
    value: JsonValue
    links: Links
    doubtful: bool = False


def start_writer(
    inspection: Inspection,
    pointer: str,
    find_run: FindRun,
    inspect: Inspect,
    between: Between,
    links: Links,
) -> StartWriter | None:
    """The write that left `pointer`'s start-state value, if the store shows one; None
    when the walk cannot tie the value to a write (say, an untraced one)."""
    execution, history = inspection.execution, inspection.history
    if execution is None or execution.store_id is None or not history.has_states:
        return None
    sequence = history.start_sequence
    if sequence <= 0:
        return None
    value = resolve(history.state_at(sequence), pointer)
    if isinstance(value, Missing):
        return None
    walk = _Walk(execution.store_id, pointer, value, links)
    visited = [inspection.run_id]
    for _ in range(MAX_EARLIER_RUNS):
        run = find_run(execution.store_id, sequence, visited)
        if run is None:
            # No earlier run: the store was written before its first run, if at all.
            return _before_runs(walk, between, sequence)
        earlier = inspect(run.run_id)
        if earlier is None or not earlier.history.has_states:
            return None
        visited.append(run.run_id)
        reached = min(run.transition_end, sequence)
        past = earlier.history
        try:
            held = resolve(past.state_at(reached), pointer)
        except StateUnavailableError:
            return None
        if reached < sequence:
            # Transitions between this run's end and `sequence` are in no stored run.
            found, walk = _between_runs(walk, past.state_at(reached), between, reached, sequence)
            if found is not None:
                return found
        if not json_equal(held, value):
            return None
        writes = [
            e for e in earlier.provenance(pointer).entries if e.changed and e.sequence <= reached
        ]
        since = writes[-1].sequence if writes else past.start_sequence
        doubtful = walk.doubtful or past.missing_through(reached) > past.missing_through(since)
        if writes:
            write = writes[-1]
            return StartWriter(
                run_id=run.run_id,
                run_name=run.name,
                sequence=write.sequence,
                action=write.action,
                span_name=write.span_name,
                href=links.provenance(run.run_id, pointer, step=write.sequence),
                verified=write.verified and not doubtful,
            )
        walk = dataclasses.replace(walk, doubtful=doubtful)
        sequence = past.start_sequence
    return None


def _between_runs(
    walk: _Walk, base: JsonValue, between: Between, after: int, through: int
) -> tuple[StartWriter | None, _Walk]:
    """The last received write in (after, through] that changed the value, replayed from
    `base` (the earlier run's end), named only if the replay ends with the value sought;
    otherwise the walk goes on into the earlier run."""
    received = _first_per_sequence(between(walk.store_id, after, through))
    complete = [t.sequence for t in received] == list(range(after + 1, through + 1))
    walk = dataclasses.replace(walk, doubtful=walk.doubtful or not complete)
    parts = pointer_parts(walk.pointer)
    doc = clone(base)
    # Copies: the patches change `doc` in place, and with it what resolve returns.
    held = clone_or_missing(resolve_parts(doc, parts))
    writer: Transition | None = None
    for transition in received:
        ops = parse_patch(transition.patch_json)
        if ops is None:
            return None, walk
        try:
            doc = patch_in_place(doc, ops)
        except PATCH_ERRORS:
            return None, walk
        now = clone_or_missing(resolve_parts(doc, parts))
        if not json_equal(now, held):
            writer = transition
        held = now
    if writer is None or held is MISSING or not json_equal(held, walk.value):
        return None, walk
    return _between_writer(walk, writer, verified=not walk.doubtful), walk


def _before_runs(walk: _Walk, between: Between, through: int) -> StartWriter | None:
    """The received write before the store's first run that set the value, if one shows it:
    with no earlier state known, only an op that wrote the field (or an ancestor) whole."""
    received = _first_per_sequence(between(walk.store_id, 0, through))
    parts = pointer_parts(walk.pointer)
    for transition in reversed(received):
        ops = parse_patch(transition.patch_json) or []
        for op in reversed(ops):
            touched = _touches(op, parts)
            if touched is None:
                continue
            if touched is MISSING or not json_equal(touched, walk.value):
                return None
            complete = [t.sequence for t in received] == list(range(1, through + 1))
            return _between_writer(walk, transition, verified=complete and not walk.doubtful)
    return None


def _touches(op: JsonPatchOp, parts: tuple[str, ...]) -> JsonValue | Missing | None:
    """What `op` leaves at `parts`: None if it cannot change it, MISSING if that is unknown.

    An add or replace of the field or of an ancestor says the value; any other
    op on it, inside it, or shifting an array it sits in leaves it unknown.
    """
    relation = op_relation(op, parts)
    if relation is None:
        return None
    path = op.get("path")
    if relation in ("self", "ancestor") and op.get("op") in ("add", "replace"):
        assert isinstance(path, str)  # parse_patch let only well-formed ops through
        return resolve_parts(op.get("value"), parts[len(pointer_parts(path)) :])
    return MISSING


def _between_writer(walk: _Walk, transition: Transition, verified: bool) -> StartWriter:
    """A write of no run (between runs on the store), as a start writer."""
    return StartWriter(
        run_id=None,
        run_name=None,
        sequence=transition.sequence or 0,
        action=transition.action,
        span_name=transition.span_name,
        href=walk.links.executions(trace=transition.trace_id),
        verified=verified,
    )


def _first_per_sequence(transitions: Sequence[Transition]) -> list[Transition]:
    """Each sequence once (the first copy), in sequence order; as replay reads duplicates."""
    seen: dict[int, Transition] = {}
    for transition in transitions:
        if transition.sequence is not None:
            seen.setdefault(transition.sequence, transition)
    return [seen[sequence] for sequence in sorted(seen)]
