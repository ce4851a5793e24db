"""The spans and events of one run, as docs/convention.md lays them out.

`RunEmitter` owns a run's execution span and numbers nothing itself: callers give each
transition its sequence and the recorded state after it. The start state and every
transition, rollback and rejection go out on short spans ended at once (live first); the
execution span, ended by `finish`, carries the end state and the outcome. The run id of the
run in progress is kept in a context variable, so a run started inside another (a journal in
a graph node) names its parent without being told.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any, Final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode, Tracer, TracerProvider
from opentelemetry.util.types import AttributeValue

from statetrail_producer import keys
from statetrail_producer.canonical import compact_json, digest
from statetrail_producer.state import Change, RecordedState

SCOPE_NAME: Final = "statetrail_producer"
SCOPE_VERSION: Final = "0.1.0"

CURRENT_RUN_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "statetrail_current_run_id", default=None
)


def get_tracer(tracer_provider: TracerProvider | None) -> Tracer:
    return trace.get_tracer(SCOPE_NAME, SCOPE_VERSION, tracer_provider=tracer_provider)


def new_id() -> str:
    return uuid.uuid4().hex


class RunEmitter:
    """Emits one run: `start`, then transitions, rollbacks and rejections, then `finish`."""

    def __init__(
        self,
        tracer: Tracer,
        *,
        name: str,
        kind: str,
        framework: str,
        framework_version: str | None,
        store_id: str,
        parent_id: str | None = None,
        run_id: str | None = None,
        parent_context: otel_context.Context | None = None,
    ) -> None:
        self.tracer = tracer
        self.name = name
        self.kind = kind
        self.framework = framework
        self.framework_version = framework_version
        self.store_id = store_id
        self.parent_id = parent_id if parent_id is not None else CURRENT_RUN_ID.get()
        self.run_id = run_id or new_id()
        self.sequence_start = 0
        self.sequence = 0
        self.revision_start = 0
        self.revision = 0
        self.transition_count = 0
        self.finished = False
        self._span: Span = tracer.start_span(name, context=parent_context, attributes={
            keys.CONVENTION_VERSION: keys.CONVENTION_VERSION_NUMBER,
            keys.SPAN_TYPE: keys.SPAN_EXECUTION,
            **self._identity(),
        })
        self._context = trace.set_span_in_context(self._span)
        self._start_digest = ""

    @property
    def recording(self) -> bool:
        """False when no SDK records the spans: callers may skip all the work."""
        return self._span.is_recording()

    @property
    def context(self) -> otel_context.Context:
        """The context with the execution span current, for work done inside the run."""
        return self._context

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        """Make this run the current span and run for the duration of a block."""
        token = CURRENT_RUN_ID.set(self.run_id)
        try:
            # The run records its own error once, in finish().
            with trace.use_span(self._span, end_on_exit=False, record_exception=False,
                                set_status_on_exception=False):
                yield
        finally:
            CURRENT_RUN_ID.reset(token)

    def enter(self) -> tuple[contextvars.Token[str | None], object]:
        """`current()` without a context manager, for hot loops: pair with `leave`."""
        return CURRENT_RUN_ID.set(self.run_id), otel_context.attach(self._context)

    def leave(self, tokens: tuple[contextvars.Token[str | None], object]) -> None:
        run_token, otel_token = tokens
        otel_context.detach(otel_token)  # type: ignore[arg-type]
        CURRENT_RUN_ID.reset(run_token)

    def start(self, state: RecordedState, *, sequence: int, revision: int | None = None,
              graph: str | None = None) -> None:
        """Send the start state; `sequence` is the store's sequence before the first transition."""
        self.sequence_start = self.sequence = sequence
        self.revision_start = self.revision = sequence if revision is None else revision
        canonical = state.canonical()
        self._start_digest = digest(canonical)
        attributes: dict[str, AttributeValue] = {
            **self._identity(),
            keys.SEQUENCE_START: self.sequence_start,
            keys.REVISION_START: self.revision_start,
            keys.STATE_START: canonical,
            keys.STATE_START_MODE: state.mode(),
            keys.STATE_START_DIGEST: self._start_digest,
            keys.POLICY: state.policy.to_json(),
        }
        if graph is not None:
            attributes[keys.GRAPH] = graph
        self._emit(f"{self.name} start", keys.SPAN_EXECUTION_START, keys.EVENT_RUN_START,
                   attributes)

    def transition(
        self,
        state: RecordedState,
        change: Change,
        *,
        sequence: int,
        action: str,
        step: int | None = None,
        writes: Sequence[dict[str, Any]] | None = None,
        writes_mode: str = keys.MODE_FULL,
        reducers: dict[str, str] | str | None = None,
        transaction: tuple[str, int] | None = None,
        span_name: str | None = None,
        patch_json: str | None = None,
    ) -> None:
        """Send one committed transition; `state` is the recorded state after it."""
        before = self.revision
        after = before + 1 if change.ops else before
        attributes: dict[str, AttributeValue] = {
            keys.RUN_ID: self.run_id,
            keys.STORE_ID: self.store_id,
            keys.SEQUENCE: sequence,
            keys.REVISION_BEFORE: before,
            keys.REVISION_AFTER: after,
            keys.PATCH: patch_json if patch_json is not None else compact_json(change.ops),
            keys.PATCH_MODE: change.mode,
            keys.STATE_DIGEST: state.digest(),
            keys.ACTION: action,
        }
        if step is not None:
            attributes[keys.STEP] = step
        if writes is not None:
            attributes[keys.WRITES] = compact_json(list(writes))
            attributes[keys.WRITES_MODE] = writes_mode
            attributes[keys.REDUCERS] = (reducers if isinstance(reducers, str)
                                         else compact_json(reducers or {}))
        if transaction is not None:
            attributes[keys.TRANSACTION_ID] = transaction[0]
            attributes[keys.TRANSACTION_BEGIN] = transaction[1]
        self.revision = after
        self.sequence = sequence
        self.transition_count += 1
        self._emit(span_name or action, keys.SPAN_STEP, keys.EVENT_TRANSITION, attributes)

    def rollback(self, *, transaction_id: str, begin_ns: int, discarded_json: str, mode: str,
                 reason: str | None, action: str | None) -> None:
        attributes: dict[str, AttributeValue] = {
            keys.RUN_ID: self.run_id,
            keys.STORE_ID: self.store_id,
            keys.SEQUENCE_LAST: self.sequence,
            keys.TRANSACTION_ID: transaction_id,
            keys.TRANSACTION_BEGIN: begin_ns,
            keys.TRANSACTION_DISCARDED: discarded_json,
            keys.TRANSACTION_DISCARDED_MODE: mode,
        }
        if reason is not None:
            attributes[keys.TRANSACTION_REASON] = reason
        if action is not None:
            attributes[keys.ACTION] = action
        self._emit(action or "rollback", keys.SPAN_STEP, keys.EVENT_ROLLBACK, attributes)

    def rejection(self, *, update_json: str, mode: str, field: str, message: str,
                  action: str | None) -> None:
        attributes: dict[str, AttributeValue] = {
            keys.RUN_ID: self.run_id,
            keys.STORE_ID: self.store_id,
            keys.SEQUENCE_LAST: self.sequence,
            keys.REJECTION_UPDATE: update_json,
            keys.REJECTION_UPDATE_MODE: mode,
            keys.REJECTION_FIELD: field,
            keys.REJECTION_MESSAGE: message,
        }
        if action is not None:
            attributes[keys.ACTION] = action
        self._emit(action or "rejection", keys.SPAN_STEP, keys.EVENT_REJECTION, attributes)

    def finish(self, state: RecordedState, *, status: str, error: BaseException | None = None,
               error_action: str | None = None) -> None:
        """End the execution span with the end state and the outcome (once)."""
        if self.finished:
            return
        self.finished = True
        canonical = state.canonical()
        span = self._span
        span.set_attributes({
            keys.SEQUENCE_START: self.sequence_start,
            keys.SEQUENCE_END: self.sequence,
            keys.REVISION_START: self.revision_start,
            keys.REVISION_END: self.revision,
            keys.STATE_START_DIGEST: self._start_digest,
            keys.STATE_END: canonical,
            keys.STATE_END_MODE: state.mode(),
            keys.STATE_END_DIGEST: digest(canonical),
            keys.RUN_STATUS: status,
            keys.RUN_TRANSITION_COUNT: self.transition_count,
        })
        if error_action is not None:
            span.set_attribute(keys.RUN_ERROR_ACTION, error_action)
        if error is not None and status == keys.STATUS_FAILED:
            span.set_attribute(keys.ERROR_TYPE, type(error).__name__)
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, str(error)))
        span.end()

    def _identity(self) -> dict[str, AttributeValue]:
        identity: dict[str, AttributeValue] = {
            keys.RUN_ID: self.run_id,
            keys.RUN_NAME: self.name,
            keys.RUN_KIND: self.kind,
            keys.FRAMEWORK_NAME: self.framework,
            keys.STORE_ID: self.store_id,
        }
        if self.parent_id is not None:
            identity[keys.RUN_PARENT_ID] = self.parent_id
        if self.framework_version is not None:
            identity[keys.FRAMEWORK_VERSION] = self.framework_version
        return identity

    def _emit(self, span_name: str, span_type: str, event: str,
              attributes: dict[str, AttributeValue]) -> None:
        now = time.time_ns()
        span = self.tracer.start_span(span_name, context=self._context, start_time=now,
                                      attributes={
                                          keys.CONVENTION_VERSION: keys.CONVENTION_VERSION_NUMBER,
                                          keys.SPAN_TYPE: span_type,
                                      })
        span.add_event(event, attributes, timestamp=now)
        span.end(end_time=now)
