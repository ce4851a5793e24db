"""Plain records passed between the stages (decode -> extract -> store -> replay).

Immutable and free of I/O. Records made by the thousand are NamedTuples (several
times cheaper to build than frozen dataclasses). Ids are lowercase hex strings and
times integer Unix nanoseconds end to end, never floats before a template.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, Literal, NamedTuple

# "application_store": an agent's application store over the agent's run, a run of
# its own (collector/producers/junjo.py `application_execution`): no other run may own that store.
# "graph", "subgraph", "journal", "run": runs of the state-evidence convention
# (collector/producers/convention.py; "run" stands for a kind word it does not know).
ExecutionKind = Literal[
    "workflow", "subflow", "agent", "application_store", "graph", "subgraph", "journal", "run"
]
ExecutionStatus = Literal["ok", "error", "cancelled"]

FULL_MODE: Final = "full"
"""The payload mode of a state or patch sent whole; any other mode withheld it."""


def withheld(mode: str | None) -> bool:
    """Whether a payload's mode says the producer withheld it (redacted, excluded, a reference).

    None means no mode was sent, and the payload is taken as sent whole.
    """
    return mode is not None and mode != FULL_MODE


class Transition(NamedTuple):
    """One committed store update: a `set_state` span event, wherever it sat.

    `patch_json` is the payload exactly as received; it may be cut or invalid
    JSON, which replay reports rather than hides. `sequence` is None for
    contract v1 producers, which are ordered by event time instead.
    """

    store_id: str
    sequence: int | None
    store_name: str
    action: str
    revision_before: int | None
    revision_after: int | None
    patch_json: str
    patch_mode: str
    patch_policy: str
    event_id: str
    trace_id: str
    span_id: str
    event_index: int
    time_unix_nano: int
    contract_version: int | None
    span_name: str = ""
    # The state-evidence convention's (docs/convention.md 3.1); None for Junjo's.
    run_id: str | None = None
    state_digest: str | None = None
    superstep: int | None = None
    writes: str | None = None
    writes_mode: str | None = None
    reducers: str | None = None
    transaction_id: str | None = None
    transaction_begin_unix_nano: int | None = None
    # A row that is no transition: `NOTE_ROLLBACK` (patch_json: the discarded
    # writes) or `NOTE_REJECTION` (patch_json: the rejected update). It has no
    # sequence; `note_after_sequence` is the store's sequence when it happened.
    note_kind: str | None = None
    note_after_sequence: int | None = None
    note_field: str | None = None
    note_message: str | None = None


NOTE_ROLLBACK: Final = "rollback"
NOTE_REJECTION: Final = "rejection"
EMPTY_PATCH: Final = "[]"


def committed(transition: Transition) -> Transition:
    """The transition as it changed the store: a patch the store did not commit reads as none.

    Junjo diffs the serialized states but keeps the new state only if it differs in
    Python, so values equal in Python that serialize differently (Decimal 0.10 and 0.1,
    True and 1) give a patch with the revision unchanged: replaying it would show a
    value the store never held.
    """
    revision = transition.revision_before
    if revision is None or transition.revision_after != revision:
        return transition
    if transition.patch_json == EMPTY_PATCH or withheld(transition.patch_mode):
        return transition
    return transition._replace(patch_json=EMPTY_PATCH)


@dataclass(frozen=True, slots=True)
class Execution:
    """One owner span (Junjo workflow, subflow or agent) keyed by its run id. States are
    kept as received text (`state_*_mode` says if withheld); transitions with
    `transition_start < sequence <= transition_end` belong to this run."""

    run_id: str
    kind: ExecutionKind
    name: str
    service: str
    trace_id: str
    span_id: str
    parent_span_id: str
    parent_run_id: str | None
    status: ExecutionStatus
    status_message: str
    error_type: str | None
    start_unix_nano: int
    end_unix_nano: int
    store_id: str | None
    parent_store_id: str | None
    state_start: str | None
    state_start_mode: str | None
    state_start_policy: str | None
    state_end: str | None
    state_end_mode: str | None
    state_end_policy: str | None
    revision_start: int | None
    revision_end: int | None
    transition_start: int | None
    transition_end: int | None
    transition_count: int | None
    reconstructable: bool | None
    graph_snapshot: str | None
    contract_version: int | None
    definition_id: str | None
    structural_id: str | None
    cancelled_reason: str | None
    # The application's own identity for the run (`execute(correlation=...)`).
    correlation_type: str | None
    correlation_id: str | None
    # An agent's application store (`agent.execute(store=...)`) and its (start, end].
    application_store_id: str | None
    application_transition_start: int | None
    application_transition_end: int | None
    # The state-evidence convention's runs (docs/convention.md 2.1); None for Junjo's.
    framework: str | None = None
    framework_version: str | None = None
    convention_version: int | None = None
    # completed, failed, interrupted or cancelled, as the producer said it.
    run_status: str | None = None
    error_action: str | None = None
    state_start_digest: str | None = None
    state_end_digest: str | None = None


class RunStart(NamedTuple):
    """A convention run's start event (docs/convention.md 2.2), which leaves before its owner.

    Stored on its own, keyed by the run id; the owner's execution row takes
    its start state and graph from here whichever of the two arrives first.
    """

    run_id: str
    trace_id: str
    span_id: str
    name: str
    kind: str
    parent_run_id: str | None
    framework: str | None
    framework_version: str | None
    store_id: str
    sequence_start: int | None
    revision_start: int | None
    state_start: str | None
    state_start_mode: str | None
    state_start_policy: str | None
    state_start_digest: str | None
    graph_snapshot: str | None
    convention_version: int
    time_unix_nano: int


class SpanRole(NamedTuple):
    """Where a producer's span sits: its type and the run ids linking it to its owner
    (`parent_runtime_id` lets a run be listed in flight before its owner span arrives)."""

    span_type: str
    runtime_id: str | None
    parent_runtime_id: str | None


@dataclass(frozen=True, slots=True)
class Evidence:
    """What one batch of spans says about executions and store transitions.

    `roles` is keyed by (trace id, span id).
    """

    executions: list[Execution]
    transitions: list[Transition]
    roles: dict[tuple[str, str], SpanRole]
    run_starts: list[RunStart] = field(default_factory=list)


class EvidenceSpan(NamedTuple):
    """What replay needs to know about a span that carried evidence, loss counters
    included: the SDK keeps only a span's last events and says so only there."""

    trace_id: str
    span_id: str
    name: str
    span_type: str | None
    dropped_attributes_count: int
    dropped_events_count: int
    dropped_links_count: int
    # The instrumentation scope: tells a Junjo span that lost junjo.span_type.
    scope_name: str = ""


def span_subtree(root: str, edges: Iterable[tuple[str, str]]) -> frozenset[str]:
    """The span ids under `root` (itself included), from (span_id, parent_span_id) pairs.

    Iterative, and safe against cycles: telemetry can claim any parent.
    """
    children: dict[str, list[str]] = {}
    for span_id, parent_span_id in edges:
        children.setdefault(parent_span_id, []).append(span_id)
    found = {root}
    pending = [root]
    while pending:
        for child in children.get(pending.pop(), ()):
            if child not in found:
                found.add(child)
                pending.append(child)
    return frozenset(found)
