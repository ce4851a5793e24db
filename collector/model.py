"""Plain records passed between the stages (decode -> extract -> store -> replay).

Everything here is immutable and free of I/O. The records made by the
thousand (one per transition or span) are NamedTuples: a frozen dataclass's
generated __init__ cost 5 µs against 0.7 µs, a tenth of replaying a long
history and of extracting a request. Ids are lowercase hex strings and
times are integer nanoseconds since the Unix epoch, end to end; nothing is
divided into floats before it reaches a template.
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

    Junjo records the patch between the old and the new *serialized* state, but
    keeps the new state (and counts a revision) only if it differs from the old
    in Python. Values equal in Python that serialize differently (Decimal 0.10
    and 0.1, True and 1 in an Any field, one instant in two time zones) give a
    patch with the revision unchanged while the store keeps its old state:
    replaying that patch would show a value the store never held, and the
    recorded end state would contradict it.
    """
    revision = transition.revision_before
    if revision is None or transition.revision_after != revision:
        return transition
    if transition.patch_json == EMPTY_PATCH or withheld(transition.patch_mode):
        return transition
    return transition._replace(patch_json=EMPTY_PATCH)


@dataclass(frozen=True, slots=True)
class Execution:
    """One owner span (Junjo workflow, subflow or agent) keyed by its run id.

    State payloads are kept as received text; `state_*_mode` says whether the
    producer withheld them (anything but `FULL_MODE` is redacted, excluded or
    a reference). Bounds are Junjo's: transitions with
    `transition_start < sequence <= transition_end` belong to this run.
    """

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
    # An agent given an application store (`agent.execute(store=...)`) writes it
    # too: the store's id and the agent's (start, end] interval of its sequences.
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
    """Where a producer's span sits: its type and the run ids that link it to its owner.

    A node span names its enclosing run (for Junjo, a workflow or subflow, or
    a RunConcurrent) in `parent_runtime_id`, which is how an execution whose
    owner span has not arrived yet can be listed as in flight.
    """

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
    """What replay needs to know about a span that carried evidence.

    The OTLP loss counters matter: the SDK silently keeps only the last 128
    events of a span and says so only in `dropped_events_count`.
    """

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
