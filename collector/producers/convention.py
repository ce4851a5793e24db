"""The state-evidence convention's adapter: its attribute keys, and extraction of its evidence.

Pure stage, a sibling of collector/producers/junjo.py. A span is evidence only when it
carries `statetrail.convention.version` (docs/convention.md section 1). For version 1,
an execution span becomes an execution; its start event (which leaves first, on its own
short span) a `RunStart`, joined to the execution by run id when stored; each
`statetrail.transition` event a transition; each rollback and rejection a transition row
of its own kind (`Transition.note_kind`) with no sequence. Events are read from their own
attributes, never from the span that happened to carry them. For any other version the
spans are kept, nothing is extracted, and the owner span becomes a storeless execution
that says which version it saw, so the run is listed as not reconstructable.

The convention's payload modes (`truncated`, `redacted`) describe a projection that
still replays and verifies, unlike Junjo's non-`full` modes, which withhold a payload:
such a payload is stored with mode `full` and its own mode in the policy column as
`statetrail:<mode>` (`PROJECTED_POLICY_PREFIX`). Values of the wrong type read as absent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Final

from collector.decode.otlp import (
    AttributeValues,
    DecodedSpan,
    SpanRecord,
    int_attribute,
    string_attribute,
)
from collector.decode.wire import EventView, SpanView
from collector.model import (
    FULL_MODE,
    NOTE_REJECTION,
    NOTE_ROLLBACK,
    Evidence,
    Execution,
    ExecutionKind,
    ExecutionStatus,
    RunStart,
    SpanRole,
    Transition,
)
from collector.producers.junjo import MAX_ID_CHARS, STATUS_CODE_ERROR, bounded_id

KNOWN_VERSIONS: Final = frozenset({1})

# Attributes every span of the convention carries.
CONVENTION_VERSION: Final = "statetrail.convention.version"
SPAN_TYPE: Final = "statetrail.span_type"
SPAN_EXECUTION: Final = "execution"
SPAN_EXECUTION_START: Final = "execution.start"
SPAN_STEP: Final = "step"

EVENT_RUN_START: Final = "statetrail.run.start"
EVENT_TRANSITION: Final = "statetrail.transition"
EVENT_ROLLBACK: Final = "statetrail.transaction.rollback"
EVENT_REJECTION: Final = "statetrail.rejection"

# The run: on the execution span and on the start event.
RUN_ID: Final = "statetrail.run.id"
RUN_NAME: Final = "statetrail.run.name"
RUN_KIND: Final = "statetrail.run.kind"
RUN_PARENT_ID: Final = "statetrail.run.parent_id"
RUN_STATUS: Final = "statetrail.run.status"
RUN_TRANSITION_COUNT: Final = "statetrail.run.transition.count"
RUN_ERROR_ACTION: Final = "statetrail.run.error.action"
FRAMEWORK_NAME: Final = "statetrail.framework.name"
FRAMEWORK_VERSION: Final = "statetrail.framework.version"
POLICY: Final = "statetrail.policy"
GRAPH: Final = "statetrail.graph"
ERROR_TYPE: Final = "error.type"

# The store.
STORE_ID: Final = "statetrail.store.id"
SEQUENCE_START: Final = "statetrail.store.sequence.start"
SEQUENCE_END: Final = "statetrail.store.sequence.end"
SEQUENCE: Final = "statetrail.store.sequence"
SEQUENCE_LAST: Final = "statetrail.store.sequence.last"
REVISION_START: Final = "statetrail.store.revision.start"
REVISION_END: Final = "statetrail.store.revision.end"
REVISION_BEFORE: Final = "statetrail.store.revision.before"
REVISION_AFTER: Final = "statetrail.store.revision.after"

# State payloads and their digests (lowercase hex SHA-256 of the RFC 8785 text).
STATE_START: Final = "statetrail.state.start"
STATE_START_MODE: Final = "statetrail.state.start.mode"
STATE_START_DIGEST: Final = "statetrail.state.start.digest"
STATE_END: Final = "statetrail.state.end"
STATE_END_MODE: Final = "statetrail.state.end.mode"
STATE_END_DIGEST: Final = "statetrail.state.end.digest"
STATE_DIGEST: Final = "statetrail.state.digest"

# Transitions.
PATCH: Final = "statetrail.transition.patch"
PATCH_MODE: Final = "statetrail.transition.patch.mode"
ACTION: Final = "statetrail.transition.action"
STEP: Final = "statetrail.transition.step"
WRITES: Final = "statetrail.transition.writes"
WRITES_MODE: Final = "statetrail.transition.writes.mode"
REDUCERS: Final = "statetrail.transition.reducers"

# Transactions and rejections.
TRANSACTION_ID: Final = "statetrail.transaction.id"
TRANSACTION_BEGIN: Final = "statetrail.transaction.begin_time_unix_nano"
TRANSACTION_DISCARDED: Final = "statetrail.transaction.discarded"
TRANSACTION_DISCARDED_MODE: Final = "statetrail.transaction.discarded.mode"
TRANSACTION_REASON: Final = "statetrail.transaction.reason"
REJECTION_UPDATE: Final = "statetrail.rejection.update"
REJECTION_UPDATE_MODE: Final = "statetrail.rejection.update.mode"
REJECTION_FIELD: Final = "statetrail.rejection.field"
REJECTION_MESSAGE: Final = "statetrail.rejection.message"

STATUS_FAILED: Final = "failed"
STATUS_CANCELLED: Final = "cancelled"
STATUS_INTERRUPTED: Final = "interrupted"

# Modes of a projection that still replays (docs/convention.md section 6).
PROJECTION_MODES: Final = frozenset(
    {"full", "truncated", "redacted", "truncated,redacted"}
)
PROJECTED_POLICY_PREFIX: Final = "statetrail:"
_FULL_PROJECTION: Final = (FULL_MODE, PROJECTED_POLICY_PREFIX + FULL_MODE)

_KINDS: Final[dict[str, ExecutionKind]] = {
    "graph": "graph",
    "subgraph": "subgraph",
    "workflow": "workflow",
    "journal": "journal",
}
# Span types that name the run they belong to (Store.in_flight lists a run from them).
IN_RUN_SPAN_TYPES: Final = (SPAN_EXECUTION_START, SPAN_STEP)


def is_convention_span(attributes: AttributeValues) -> bool:
    """Whether a span declares the convention (whatever its version)."""
    return CONVENTION_VERSION in attributes


def extract(spans: Iterable[DecodedSpan]) -> Evidence:
    """Pull executions, run starts and transitions out of the convention's spans."""
    evidence = Evidence([], [], {}, [])
    for span, view in spans:
        if is_convention_span(view.attributes):
            extract_span(span, view, evidence)
    return evidence


def extract_span(span: SpanRecord, view: SpanView, into: Evidence) -> None:
    """Add what one convention span says to `into` (its caller checked the version key)."""
    attributes = view.attributes
    version = int_attribute(attributes, CONVENTION_VERSION)
    span_type = _str(attributes, SPAN_TYPE)
    if version not in KNOWN_VERSIONS:
        if span_type == SPAN_EXECUTION:
            into.executions.append(_unknown_version_execution(span, attributes, version))
        return
    if span_type == SPAN_EXECUTION:
        run_id = _id(attributes, RUN_ID)
        if run_id:
            into.roles[(span.trace_id, span.span_id)] = SpanRole(
                span_type, run_id, _id(attributes, RUN_PARENT_ID)
            )
            into.executions.append(_execution(span, attributes, run_id))
    event_run: str | None = None
    for index, event in enumerate(view.events):
        name = event.name
        if name == EVENT_TRANSITION:
            transition = _transition(span, event, index)
        elif name == EVENT_ROLLBACK:
            transition = _rollback(span, event, index)
        elif name == EVENT_REJECTION:
            transition = _rejection(span, event, index)
        elif name == EVENT_RUN_START:
            start = _run_start(span, event)
            if start is not None:
                into.run_starts.append(start)
                event_run = start.run_id
            continue
        else:
            continue
        if transition is not None:
            into.transitions.append(transition)
            event_run = transition.run_id
    if event_run and span_type in IN_RUN_SPAN_TYPES:
        # The run this short span belongs to, so a run in flight is listed from it.
        into.roles[(span.trace_id, span.span_id)] = SpanRole(span_type, None, event_run)


def _execution(span: SpanRecord, attrs: AttributeValues, run_id: str) -> Execution:
    store_id = _id(attrs, STORE_ID)
    run_status = _str(attrs, RUN_STATUS)
    end_mode, end_policy = projection_mode(_str(attrs, STATE_END_MODE))
    return Execution(
        run_id=run_id,
        kind=_KINDS.get(_str(attrs, RUN_KIND) or "", "run"),
        name=_str(attrs, RUN_NAME) or span.name,
        service=span.resource.service_name,
        trace_id=span.trace_id,
        span_id=span.span_id,
        parent_span_id=span.parent_span_id,
        parent_run_id=_id(attrs, RUN_PARENT_ID),
        status=_status(span.status_code, run_status),
        status_message=span.status_message,
        error_type=_id(attrs, ERROR_TYPE),
        start_unix_nano=span.start_unix_nano,
        end_unix_nano=span.end_unix_nano,
        store_id=store_id,
        parent_store_id=None,
        # The start state and graph leave on the start event; the store copies them
        # in from there (collector/store/writes.py).
        state_start=None,
        state_start_mode=None,
        state_start_policy=None,
        state_end=_str(attrs, STATE_END),
        state_end_mode=end_mode,
        state_end_policy=end_policy,
        revision_start=_int(attrs, REVISION_START),
        revision_end=_int(attrs, REVISION_END),
        transition_start=_int(attrs, SEQUENCE_START),
        transition_end=_int(attrs, SEQUENCE_END),
        transition_count=_int(attrs, RUN_TRANSITION_COUNT),
        reconstructable=None,
        graph_snapshot=None,
        contract_version=None,
        definition_id=None,
        structural_id=None,
        cancelled_reason=None,
        correlation_type=None,
        correlation_id=None,
        application_store_id=None,
        application_transition_start=None,
        application_transition_end=None,
        framework=_id(attrs, FRAMEWORK_NAME),
        framework_version=_id(attrs, FRAMEWORK_VERSION),
        convention_version=1,
        run_status=_id(attrs, RUN_STATUS),
        error_action=_id(attrs, RUN_ERROR_ACTION),
        state_start_digest=_id(attrs, STATE_START_DIGEST),
        state_end_digest=_id(attrs, STATE_END_DIGEST),
    )


def _unknown_version_execution(
    span: SpanRecord, attrs: AttributeValues, version: int | None
) -> Execution:
    """An owner span of a version this collector does not implement: listed, never replayed.

    Nothing of its evidence is read but what names it; no store id, so nothing is
    joined to it. Its run id (or, without one, its span id) keeps it apart.
    """
    run_id = _id(attrs, RUN_ID) or f"{span.trace_id}:{span.span_id}"
    listed = _execution(span, {}, run_id)
    return dataclasses.replace(
        listed,
        name=_str(attrs, RUN_NAME) or span.name,
        status=_status(span.status_code, _str(attrs, RUN_STATUS)),
        error_type=_id(attrs, ERROR_TYPE),
        state_end_mode=None,
        state_end_policy=None,
        reconstructable=False,
        framework=_id(attrs, FRAMEWORK_NAME),
        # A version outside the int32 column's range reads as unknown (-1) all the same.
        convention_version=version if version is not None and abs(version) < 2**31 else -1,
    )


def _run_start(span: SpanRecord, event: EventView) -> RunStart | None:
    attrs = event.attributes
    run_id = _id(attrs, RUN_ID)
    store_id = _id(attrs, STORE_ID)
    if not run_id or not store_id:
        return None
    mode, policy = projection_mode(_str(attrs, STATE_START_MODE))
    return RunStart(
        run_id=run_id,
        trace_id=span.trace_id,
        span_id=span.span_id,
        name=_str(attrs, RUN_NAME) or "",
        kind=_KINDS.get(_str(attrs, RUN_KIND) or "", "run"),
        parent_run_id=_id(attrs, RUN_PARENT_ID),
        framework=_id(attrs, FRAMEWORK_NAME),
        framework_version=_id(attrs, FRAMEWORK_VERSION),
        store_id=store_id,
        sequence_start=_int(attrs, SEQUENCE_START),
        revision_start=_int(attrs, REVISION_START),
        state_start=_str(attrs, STATE_START),
        state_start_mode=mode,
        state_start_policy=policy,
        state_start_digest=_id(attrs, STATE_START_DIGEST),
        graph_snapshot=_str(attrs, GRAPH),
        convention_version=1,
        time_unix_nano=event.time_unix_nano,
    )


def _transition(span: SpanRecord, event: EventView, index: int) -> Transition | None:
    attrs = event.attributes
    store_id = _id(attrs, STORE_ID)
    if not store_id:
        return None
    run_id = _id(attrs, RUN_ID)
    patch_mode, patch_policy = projection_mode(_str(attrs, PATCH_MODE))
    writes = _str(attrs, WRITES)
    # Positional, in Transition's field order (as collector/producers/junjo.py does).
    return Transition(
        store_id,
        _int(attrs, SEQUENCE),
        "",
        _id(attrs, ACTION) or "",
        _int(attrs, REVISION_BEFORE),
        _int(attrs, REVISION_AFTER),
        _str(attrs, PATCH) or "",
        patch_mode,
        patch_policy,
        # The run: a fork that reuses a sequence in the store differs here.
        run_id or "",
        span.trace_id,
        span.span_id,
        index,
        event.time_unix_nano,
        None,
        span.name,
        run_id,
        _id(attrs, STATE_DIGEST),
        _int(attrs, STEP),
        writes,
        projection_mode(_str(attrs, WRITES_MODE))[0] if writes is not None else None,
        _str(attrs, REDUCERS),
        _id(attrs, TRANSACTION_ID),
        _int(attrs, TRANSACTION_BEGIN),
    )


def _rollback(span: SpanRecord, event: EventView, index: int) -> Transition | None:
    attrs = event.attributes
    return _note(
        span, event, index, NOTE_ROLLBACK,
        payload=_str(attrs, TRANSACTION_DISCARDED),
        mode=_str(attrs, TRANSACTION_DISCARDED_MODE),
        field=None,
        message=_str(attrs, TRANSACTION_REASON),
    )


def _rejection(span: SpanRecord, event: EventView, index: int) -> Transition | None:
    attrs = event.attributes
    return _note(
        span, event, index, NOTE_REJECTION,
        payload=_str(attrs, REJECTION_UPDATE),
        mode=_str(attrs, REJECTION_UPDATE_MODE),
        field=_str(attrs, REJECTION_FIELD),
        message=_str(attrs, REJECTION_MESSAGE),
    )


def _note(
    span: SpanRecord,
    event: EventView,
    index: int,
    kind: str,
    *,
    payload: str | None,
    mode: str | None,
    field: str | None,
    message: str | None,
) -> Transition | None:
    """A rollback or rejection as a transition row without a sequence (it changes nothing)."""
    attrs = event.attributes
    store_id = _id(attrs, STORE_ID)
    if not store_id:
        return None
    run_id = _id(attrs, RUN_ID)
    payload_mode, payload_policy = projection_mode(mode)
    return Transition(
        store_id, None, "", _id(attrs, ACTION) or "", None, None, payload or "",
        payload_mode, payload_policy, run_id or "", span.trace_id, span.span_id, index,
        event.time_unix_nano, None, span.name, run_id, None, None, None, None, None,
        _id(attrs, TRANSACTION_ID), _int(attrs, TRANSACTION_BEGIN),
        kind, _int(attrs, SEQUENCE_LAST), field, message,
    )


def projection_mode(mode: str | None) -> tuple[str, str]:
    """A payload's (mode, policy) columns for the convention's mode attribute.

    A projection (`full`, `truncated`, `redacted`) still replays: mode `full`, the
    convention's own mode kept in the policy. Any other word is kept as the mode,
    which replay treats as withheld (it must not guess what the producer meant).
    """
    if mode is None:
        return FULL_MODE, ""
    if mode == FULL_MODE:
        return _FULL_PROJECTION
    if mode in PROJECTION_MODES:
        return FULL_MODE, PROJECTED_POLICY_PREFIX + mode
    return mode, ""


def _status(status_code: int, run_status: str | None) -> ExecutionStatus:
    if status_code == STATUS_CODE_ERROR or run_status == STATUS_FAILED:
        return "error"
    if run_status == STATUS_CANCELLED:
        return "cancelled"
    return "ok"


_str = string_attribute
_int = int_attribute


def _id(attrs: AttributeValues, key: str) -> str | None:
    # bounded_id's test inline, as junjo.py's: several ids a transition, almost never long.
    text = string_attribute(attrs, key)
    return text if text is None or len(text) <= MAX_ID_CHARS else bounded_id(text)
