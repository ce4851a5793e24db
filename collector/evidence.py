"""One execution's evidence, read from the store and replayed.

Shared by the background replayer (collector/jobs/replayer.py), which replays many
executions per batch, and the studio's Inspector, which replays one on demand:
both hand `replay_with` the owner's trace and the carrier spans elsewhere. The
Inspector restores a long history from the replayer's snapshot instead
(collector/replay/snapshot.py) when the evidence has not changed since it was taken.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeAlias, cast

from collector.model import Execution, ExecutionKind, RunStart, Transition, span_subtree
from collector.replay.history import History
from collector.replay.jsondoc import DEFAULT_LIMITS, DocumentLimits
from collector.replay.snapshot import MIN_SNAPSHOT_STEPS, restore
from collector.replay.walk import AppliedObserver, replay, replay_in_flight
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


def load_in_flight_history(
    store: Store, trace_id: str, store_id: str | None, run_id: str | None = None
) -> History:
    """Replay what arrived of a run whose owner span has not: its own store's transitions
    only (sequences are per store), every one shown; verified only for a convention run
    whose start arrived first."""
    start = store.run_start(run_id) if run_id else None
    if start is not None:
        # A convention run sent its start first: its states can be rebuilt already.
        transitions = store.transitions_for_store(start.store_id)
        links = store.evidence_spans_for([trace_id], carriers_of(transitions))
        return replay_in_flight(
            provisional_execution(start),
            transitions,
            evidence_spans=[link.span for link in links],
        )
    transitions = store.transitions_for_store(store_id) if store_id else []
    links = store.evidence_spans_for([trace_id], carriers_of(transitions))
    return replay(None, transitions, evidence_spans=[link.span for link in links])


def provisional_execution(start: RunStart) -> Execution:
    """A convention run as its start event describes it, before its owner span arrives.

    No end and no upper bound: replay takes every transition of its store above
    the start's sequence, which is what the run has committed so far.
    """
    return Execution(
        run_id=start.run_id, kind=cast(ExecutionKind, start.kind), name=start.name,
        service="", trace_id=start.trace_id, span_id="", parent_span_id="",
        parent_run_id=start.parent_run_id, status="ok", status_message="", error_type=None,
        start_unix_nano=start.time_unix_nano, end_unix_nano=0, store_id=start.store_id,
        parent_store_id=None, state_start=start.state_start,
        state_start_mode=start.state_start_mode, state_start_policy=start.state_start_policy,
        state_end=None, state_end_mode=None, state_end_policy=None,
        revision_start=start.revision_start, revision_end=None,
        transition_start=start.sequence_start, transition_end=None, transition_count=None,
        reconstructable=None, graph_snapshot=start.graph_snapshot, contract_version=None,
        definition_id=None, structural_id=None, cancelled_reason=None,
        correlation_type=None, correlation_id=None, application_store_id=None,
        application_transition_start=None, application_transition_end=None,
        framework=start.framework, framework_version=start.framework_version,
        convention_version=start.convention_version,
        state_start_digest=start.state_start_digest,
    )


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
