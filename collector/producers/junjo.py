"""Junjo producer adapter: Junjo's attribute keys, and extraction of its evidence.

Pure stage. Given decoded span records, it finds the owner spans (workflow,
subflow, agent) that become executions (an agent with an application store
becomes two: its private store's and the application store's), and every
`set_state` event, wherever it sits (node, subflow, RunConcurrent child, a
non-Junjo span, another trace), that becomes a transition. Nothing is joined
here: transitions are grouped later by store id and sequence, because the owner
span arrives last, often in a later request (SCHEMA.md section 7). Another
framework's conventions belong in a sibling module, not in edits here.

Values of the wrong type are treated as absent rather than coerced, so replay
reports the hole instead of trusting a guess.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable
from typing import Final, NamedTuple

from collector.decode.otlp import (
    AttributeValues,
    DecodedSpan,
    SpanRecord,
    bool_attribute,
    int_attribute,
    string_attribute,
)
from collector.decode.wire import SpanView
from collector.model import (
    FULL_MODE,
    Evidence,
    Execution,
    ExecutionKind,
    ExecutionStatus,
    SpanRole,
    Transition,
)

# The tracer Junjo makes its spans with (junjo's JUNJO_OTEL_MODULE_NAME): the
# spans table's scope_name.
SCOPE_NAME: Final = "junjo"
SPAN_TYPE: Final = "junjo.span_type"
CONTRACT_VERSION: Final = "junjo.telemetry.contract_version"
RUNTIME_ID: Final = "junjo.executable_runtime_id"
RUNTIME_ID_V1: Final = "junjo.id"
DEFINITION_ID: Final = "junjo.executable_definition_id"
STRUCTURAL_ID: Final = "junjo.executable_structural_id"
PARENT_RUNTIME_ID: Final = "junjo.parent_executable_runtime_id"
PARENT_TYPE: Final = "junjo.parent_executable_type"
CANCELLED: Final = "junjo.cancelled"
CANCELLED_REASON: Final = "junjo.cancelled_reason"
CORRELATION_TYPE: Final = "junjo.correlation.type"
CORRELATION_ID: Final = "junjo.correlation.id"
ERROR_TYPE: Final = "error.type"

WORKFLOW_STATE_START: Final = "junjo.workflow.state.start"
WORKFLOW_STATE_END: Final = "junjo.workflow.state.end"
WORKFLOW_STORE_ID: Final = "junjo.workflow.store.id"
WORKFLOW_PARENT_STORE_ID: Final = "junjo.workflow.parent_store.id"
GRAPH_SNAPSHOT: Final = "junjo.workflow.execution_graph_snapshot"
# Nodes, subflows and RunConcurrent children the workflow ran (not a node that raised).
WORKFLOW_NODE_COUNT: Final = "junjo.workflow.node.count"
AGENT_STATE_START: Final = "junjo.agent.state.start"
AGENT_STATE_END: Final = "junjo.agent.state.end"
AGENT_STORE_ID: Final = "junjo.agent.store.id"
APPLICATION_STORE_ID: Final = "junjo.agent.application_store.id"
# On an agent's model-request and tool spans, which carry no junjo.span_type (SCHEMA.md 2.4).
AGENT_OPERATION_TYPE: Final = "junjo.agent.operation_type"
APPLICATION_TRANSITION_START: Final = "junjo.agent.application_store.transition.start"
APPLICATION_TRANSITION_END: Final = "junjo.agent.application_store.transition.end"
APPLICATION_STATE_START: Final = "junjo.agent.application_state.start"
APPLICATION_STATE_END: Final = "junjo.agent.application_state.end"
APPLICATION_REVISION_START: Final = "junjo.agent.application_store.revision.start"
APPLICATION_REVISION_END: Final = "junjo.agent.application_store.revision.end"
APPLICATION_TRANSITION_COUNT: Final = "junjo.agent.application_store.transition.count"
APPLICATION_RECONSTRUCTABLE: Final = "junjo.agent.application_store.reconstructable"
# The run id of an agent's application-store run: the agent's own, plus this.
# Junjo's ids are nanoids ([A-Za-z0-9_-]), so no real run id ends this way.
APPLICATION_RUN_SUFFIX: Final = ":application"

REVISION_START: Final = "junjo.store.revision.start"
REVISION_END: Final = "junjo.store.revision.end"
TRANSITION_START: Final = "junjo.store.transition.start"
TRANSITION_END: Final = "junjo.store.transition.end"
TRANSITION_COUNT: Final = "junjo.store.transition.count"
RECONSTRUCTABLE: Final = "junjo.store.reconstructable"

MODE_SUFFIX: Final = ".mode"
POLICY_SUFFIX: Final = ".policy"

SET_STATE_EVENT: Final = "set_state"
EVENT_ID: Final = "id"
STORE_NAME: Final = "junjo.store.name"
STORE_ID: Final = "junjo.store.id"
STORE_ACTION: Final = "junjo.store.action"
SEQUENCE: Final = "junjo.store.transition.sequence"
REVISION_BEFORE: Final = "junjo.store.revision.before"
REVISION_AFTER: Final = "junjo.store.revision.after"
PATCH: Final = "junjo.state_json_patch"
PATCH_MODE: Final = PATCH + MODE_SUFFIX
PATCH_POLICY: Final = PATCH + POLICY_SUFFIX

STATUS_CODE_ERROR: Final = 2
# contract_version is stored as INTEGER (int32); beyond that it is treated as absent.
MAX_INT32: Final = 2**31 - 1

_OWNER_KINDS: Final[dict[str, ExecutionKind]] = {
    "workflow": "workflow",
    "subflow": "subflow",
    "agent": "agent",
}
# Span types whose span owns an execution, sorted (the store's SQL lists them).
OWNER_SPAN_TYPES: Final = tuple(sorted(_OWNER_KINDS))
# Span types whose parent runtime id names the run they ran in: how a run whose
# owner span has not arrived is known (collector/store/in_flight.py).
IN_RUN_SPAN_TYPES: Final = ("node", "run_concurrent", "subflow")
# Span types whose own runtime id other spans may name as their parent though it
# is no run's: a RunConcurrent is the parent of its concurrent children.
NOT_RUN_PARENT_SPAN_TYPES: Final = ("node", "run_concurrent")
class _StoreKeys(NamedTuple):
    """Where an owner span keeps one store's evidence: states, id, revisions, interval."""

    state_start: str
    state_end: str
    store_id: str
    revision_start: str = REVISION_START
    revision_end: str = REVISION_END
    transition_start: str = TRANSITION_START
    transition_end: str = TRANSITION_END
    transition_count: str = TRANSITION_COUNT
    reconstructable: str = RECONSTRUCTABLE


# Where each kind of owner keeps its store's evidence. On an agent span the
# junjo.store.* bounds describe the agent's private AgentStore; its application
# store's are junjo.agent.application_* (SCHEMA.md 2.4).
_STORE_KEYS: Final[dict[ExecutionKind, _StoreKeys]] = {
    "workflow": _StoreKeys(WORKFLOW_STATE_START, WORKFLOW_STATE_END, WORKFLOW_STORE_ID),
    "subflow": _StoreKeys(WORKFLOW_STATE_START, WORKFLOW_STATE_END, WORKFLOW_STORE_ID),
    "agent": _StoreKeys(AGENT_STATE_START, AGENT_STATE_END, AGENT_STORE_ID),
    "application_store": _StoreKeys(
        APPLICATION_STATE_START, APPLICATION_STATE_END, APPLICATION_STORE_ID,
        APPLICATION_REVISION_START, APPLICATION_REVISION_END,
        APPLICATION_TRANSITION_START, APPLICATION_TRANSITION_END,
        APPLICATION_TRANSITION_COUNT, APPLICATION_RECONSTRUCTABLE,
    ),
}


def extract(spans: Iterable[DecodedSpan]) -> Evidence:
    """Pull executions and transitions out of decoded spans."""
    evidence = Evidence([], [], {})
    for span, view in spans:
        extract_span(span, view, evidence)
    return evidence


def extract_span(span: SpanRecord, view: SpanView, into: Evidence) -> None:
    """Add what one span says to `into`: nothing unless it is Junjo's or carries set_state."""
    attributes = view.attributes
    if not _is_junjo(attributes) and not _has_set_state(view):
        return
    span_type = _str(attributes, SPAN_TYPE)
    if span_type is not None:
        into.roles[(span.trace_id, span.span_id)] = SpanRole(
            span_type,
            _id(attributes, RUNTIME_ID) or _id(attributes, RUNTIME_ID_V1),
            _id(attributes, PARENT_RUNTIME_ID),
        )
    if span_type in _OWNER_KINDS:
        execution = _execution(span, attributes, _OWNER_KINDS[span_type])
        if execution is not None:
            into.executions.append(execution)
            if execution.application_store_id:
                into.executions.append(application_execution(span, attributes, execution))
    into.transitions.extend(_transitions(span, view, _int32(attributes, CONTRACT_VERSION)))


def _is_junjo(attributes: AttributeValues) -> bool:
    return SPAN_TYPE in attributes or CONTRACT_VERSION in attributes


def _has_set_state(view: SpanView) -> bool:
    return any(event.name == SET_STATE_EVENT for event in view.events)


def _execution(span: SpanRecord, attrs: AttributeValues, kind: ExecutionKind) -> Execution | None:
    run_id = _id(attrs, RUNTIME_ID) or _id(attrs, RUNTIME_ID_V1)
    if not run_id:
        return None
    keys = _STORE_KEYS[kind]
    parent_type = _str(attrs, PARENT_TYPE)
    return Execution(
        run_id=run_id,
        kind=kind,
        name=span.name,
        service=span.resource.service_name,
        trace_id=span.trace_id,
        span_id=span.span_id,
        parent_span_id=span.parent_span_id,
        parent_run_id=(
            _id(attrs, PARENT_RUNTIME_ID) if parent_type in _OWNER_KINDS else None
        ),
        status=span_status(span.status_code, _bool(attrs, CANCELLED) is True),
        status_message=span.status_message,
        error_type=_id(attrs, ERROR_TYPE),
        start_unix_nano=span.start_unix_nano,
        end_unix_nano=span.end_unix_nano,
        store_id=_id(attrs, keys.store_id),
        parent_store_id=_id(attrs, WORKFLOW_PARENT_STORE_ID),
        state_start=_str(attrs, keys.state_start),
        state_start_mode=_str(attrs, keys.state_start + MODE_SUFFIX),
        state_start_policy=_str(attrs, keys.state_start + POLICY_SUFFIX),
        state_end=_str(attrs, keys.state_end),
        state_end_mode=_str(attrs, keys.state_end + MODE_SUFFIX),
        state_end_policy=_str(attrs, keys.state_end + POLICY_SUFFIX),
        revision_start=_int(attrs, keys.revision_start),
        revision_end=_int(attrs, keys.revision_end),
        transition_start=_int(attrs, keys.transition_start),
        transition_end=_int(attrs, keys.transition_end),
        transition_count=_int(attrs, keys.transition_count),
        reconstructable=_bool(attrs, keys.reconstructable),
        graph_snapshot=_str(attrs, GRAPH_SNAPSHOT),
        contract_version=_int32(attrs, CONTRACT_VERSION),
        definition_id=_id(attrs, DEFINITION_ID),
        structural_id=_id(attrs, STRUCTURAL_ID),
        cancelled_reason=_str(attrs, CANCELLED_REASON) if _bool(attrs, CANCELLED) else None,
        # An empty id would list as an invisible link that filters nothing.
        correlation_type=_str(attrs, CORRELATION_TYPE) or None,
        correlation_id=_str(attrs, CORRELATION_ID) or None,
        application_store_id=_id(attrs, APPLICATION_STORE_ID),
        application_transition_start=_int(attrs, APPLICATION_TRANSITION_START),
        application_transition_end=_int(attrs, APPLICATION_TRANSITION_END),
    )


def application_execution(
    span: SpanRecord, attrs: AttributeValues, agent: Execution
) -> Execution:
    """The agent's application store over the agent's run, as a run of its own.

    The agent's span carries that store's states and interval beside its private
    store's (SCHEMA.md 2.4), and often no other run owns it, so without this run its
    history would be replayed nowhere. It is the agent's child, on the agent's span.
    """
    application = _execution(span, attrs, "application_store")
    assert application is not None  # the agent's run id was read from this span
    return dataclasses.replace(
        application,
        run_id=agent.run_id + APPLICATION_RUN_SUFFIX,
        parent_run_id=agent.run_id,
        graph_snapshot=None,
        application_store_id=None,
        application_transition_start=None,
        application_transition_end=None,
    )


def span_status(status_code: int, cancelled: bool) -> ExecutionStatus:
    """A span's status as Junjo means it: an OTLP error, else cancelled, else ok.

    `cancelled` is the span's `junjo.cancelled` flag; an error outranks it.
    """
    if status_code == STATUS_CODE_ERROR:
        return "error"
    if cancelled:
        return "cancelled"
    return "ok"


def _transitions(
    span: SpanRecord, view: SpanView, contract_version: int | None
) -> list[Transition]:
    found: list[Transition] = []
    for index, event in enumerate(view.events):
        if event.name != SET_STATE_EVENT:
            continue
        attrs = event.attributes
        store_id = _id(attrs, STORE_ID)
        if not store_id:
            # Without a store id the event cannot be grouped with anything; the span
            # itself is still stored, so nothing is lost.
            continue
        # Positional, in Transition's field order: by keyword, NamedTuple's
        # __new__ binds the 16 names in Python, a tenth of extracting a span.
        found.append(Transition(
            store_id,
            _int(attrs, SEQUENCE),
            _id(attrs, STORE_NAME) or "",
            _id(attrs, STORE_ACTION) or "",
            _int(attrs, REVISION_BEFORE),
            _int(attrs, REVISION_AFTER),
            _str(attrs, PATCH) or "",
            _str(attrs, PATCH_MODE) or FULL_MODE,
            _str(attrs, PATCH_POLICY) or "",
            _id(attrs, EVENT_ID) or "",
            span.trace_id,
            span.span_id,
            index,
            event.time_unix_nano,
            contract_version,
            span.name,
        ))
    return found


# Short names for the readers: extraction calls them ~25 times a span. A value
# of the wrong type reads as absent (a bool is never a counter: on the wire it
# is a different member of the value's oneof).
_str = string_attribute
_int = int_attribute
_bool = bool_attribute

# Ids and names land in plain, indexed columns. Junjo's are a few dozen
# characters; a hostile one of tens of MB made DuckDB run out of memory inside
# the commit and then fail the rollback, which invalidated the database.
MAX_ID_CHARS: Final = 1024
_ID_PREFIX_CHARS: Final = 256


def bounded_id(text: str | None) -> str | None:
    """`text`, or for an absurdly long one its start plus a digest of the whole.

    The digest keeps two different long ids apart, and the same id the same
    wherever it appears, so joins by id still hold.
    """
    if text is None or len(text) <= MAX_ID_CHARS:
        return text
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
    return f"{text[:_ID_PREFIX_CHARS]}…[{len(text):,} characters, blake2b {digest}]"


def _id(attrs: AttributeValues, key: str) -> str | None:
    # bounded_id's test inline: ten calls a transition, almost never a long id.
    text = string_attribute(attrs, key)
    return text if text is None or len(text) <= MAX_ID_CHARS else bounded_id(text)


def _int32(attrs: AttributeValues, key: str) -> int | None:
    value = int_attribute(attrs, key)
    return value if value is not None and -MAX_INT32 - 1 <= value <= MAX_INT32 else None
