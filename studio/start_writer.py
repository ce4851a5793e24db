"""Who wrote a start-state value: the earlier runs of a store that several runs share.

A live store lent to several `execute(store=...)` calls (SCHEMA.md 7.1, 7.4)
starts each run with the state the earlier runs left. The run's own
provenance then ends at "the value comes from the start state"; the store
keeps the earlier runs' transitions, so the question "who set it" has an
answer one or more runs back. This stage walks back through the store's runs,
newest first, each one's own provenance, until a run whose history wrote the
value.

Invariant: a writer is named only when the walk can show the value it left is
the value this run started with: every run on the way must hold, at the point
the walk enters it, the same value (else the walk stops and names none). It is
marked unverified when transitions on the way never arrived or fall between
runs, since one of those may have written the same value later. The walk reads
at most MAX_EARLIER_RUNS runs, each replayed (and cached) by the Inspector.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from collector.history import StateUnavailableError
from collector.jsondoc import Missing, json_equal, resolve
from collector.store.listing import StoreRun
from studio.inspect import Inspection
from studio.links import Links

# Junjo lends a store to a handful of runs; a long chain of runs that never wrote
# the field is cut here rather than replaying the whole store.
MAX_EARLIER_RUNS: Final = 8

FindRun = Callable[[str, int, Sequence[str]], StoreRun | None]
Inspect = Callable[[str], Inspection | None]


@dataclass(frozen=True, slots=True)
class StartWriter:
    """The write of an earlier run on the same store that set a start-state value."""

    run_id: str
    run_name: str
    sequence: int
    action: str
    span_name: str
    # The earlier run's page at that step, with the field's provenance open.
    href: str
    # False when a transition after it never arrived, or lies in no stored run's interval.
    verified: bool


def start_writer(
    inspection: Inspection, pointer: str, find_run: FindRun, inspect: Inspect, links: Links
) -> StartWriter | None:
    """The earlier run's write that left `pointer`'s start-state value, if the store shows one.

    None when the run's store was fresh, the start state lacks the field, or the
    walk cannot tie the value to a write (a run on the way is missing, has no
    states, or holds another value: then the start state came from elsewhere,
    say an untraced write). `pointer` must be well formed.
    """
    execution, history = inspection.execution, inspection.history
    if execution is None or execution.store_id is None or not history.has_states:
        return None
    sequence = history.start_sequence
    if sequence <= 0:
        return None
    value = resolve(history.state_at(sequence), pointer)
    if isinstance(value, Missing):
        return None
    visited = [inspection.run_id]
    doubtful = False
    for _ in range(MAX_EARLIER_RUNS):
        run = find_run(execution.store_id, sequence, visited)
        earlier = inspect(run.run_id) if run is not None else None
        if run is None or earlier is None or not earlier.history.has_states:
            return None
        visited.append(run.run_id)
        # Transitions between this run's end and `sequence` are in no stored run.
        doubtful = doubtful or run.transition_end < sequence
        reached = min(run.transition_end, sequence)
        past = earlier.history
        try:
            held = resolve(past.state_at(reached), pointer)
        except StateUnavailableError:
            return None
        if not json_equal(held, value):
            return None
        writes = [
            e for e in earlier.provenance(pointer).entries if e.changed and e.sequence <= reached
        ]
        since = writes[-1].sequence if writes else past.start_sequence
        doubtful = doubtful or past.missing_through(reached) > past.missing_through(since)
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
        sequence = past.start_sequence
    return None
