"""One execution's evidence, read from the store and replayed.

Shared by the background replayer (collector/jobs/replayer.py), which replays many
executions per batch, and the studio's Inspector, which replays one on demand:
both hand `replay_with` the owner's trace and the carrier spans elsewhere. The
Inspector restores a long history from the replayer's snapshot instead
(collector/replay/snapshot.py) when the evidence has not changed since it was taken.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeAlias

from collector.model import Execution, Transition, span_subtree
from collector.replay.history import History
from collector.replay.jsondoc import DEFAULT_LIMITS, DocumentLimits
from collector.replay.snapshot import MIN_SNAPSHOT_STEPS, restore
from collector.replay.walk import AppliedObserver, replay
from collector.store import Store
from collector.store.replays import SpanLink

# `Store.evidence_version`: (transitions of the store, latest span arrival in the
# trace). It changes whenever evidence for an execution arrives; a cache key.
EvidenceVersion: TypeAlias = tuple[int, int]


def load_history(
    store: Store, execution: Execution, limits: DocumentLimits = DEFAULT_LIMITS
) -> tuple[History, EvidenceVersion]:
    """Replay one execution from everything stored about its store and trace, with the
    evidence version of what was read. No replayed state crosses `limits`."""
    transitions = store.transitions_for_store(execution.store_id) if execution.store_id else []
    links = store.evidence_spans_for([execution.trace_id], carriers_of(transitions))
    version = version_of(execution, transitions, links)
    # Only long histories have a snapshot; a short one skips the read.
    long_enough = len(transitions) >= MIN_SNAPSHOT_STEPS
    snapshot = store.replay_snapshot(execution.run_id) if long_enough else None
    if snapshot is not None and snapshot.version == version:
        history = restore(snapshot, execution, transitions)
        if history is not None:
            return history, version
    return replay_with(execution, transitions, links, limits=limits), version


def load_in_flight_history(store: Store, trace_id: str, store_id: str | None) -> History:
    """Replay what arrived of a run whose owner span has not: its own store's transitions
    only (sequences are per store), every one shown and none verified."""
    transitions = store.transitions_for_store(store_id) if store_id else []
    links = store.evidence_spans_for([trace_id], carriers_of(transitions))
    return replay(None, transitions, evidence_spans=[link.span for link in links])


def version_of(
    execution: Execution, transitions: Sequence[Transition], links: Iterable[SpanLink]
) -> EvidenceVersion:
    """`Store.evidence_version` counted from evidence already read for `execution`."""
    latest = max(
        (link.received_unix_nano for link in links if link.span.trace_id == execution.trace_id),
        default=0,
    )
    return (len(transitions), latest)


def carriers_of(transitions: Iterable[Transition]) -> set[tuple[str, str]]:
    """The spans (trace id, span id) that carried these transitions."""
    return {(t.trace_id, t.span_id) for t in transitions}


def replay_with(
    execution: Execution,
    transitions: Sequence[Transition],
    links: Sequence[SpanLink],
    on_applied: AppliedObserver | None = None,
    limits: DocumentLimits = DEFAULT_LIMITS,
) -> History:
    """Replay with the evidence already loaded: the owner's trace plus the carriers."""
    carriers = carriers_of(transitions)
    same_trace = [link for link in links if link.span.trace_id == execution.trace_id]
    elsewhere = [
        link.span
        for link in links
        if link.span.trace_id != execution.trace_id
        and (link.span.trace_id, link.span.span_id) in carriers
    ]
    return replay(
        execution,
        transitions,
        evidence_spans=[link.span for link in same_trace] + elsewhere,
        owner_span_ids=span_subtree(
            execution.span_id, [(link.span.span_id, link.parent_span_id) for link in same_trace]
        ),
        on_applied=on_applied,
        limits=limits,
    )
