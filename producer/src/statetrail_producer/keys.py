"""The convention's names: span types, event names and attribute keys (docs/convention.md).

One constant per key, so a producer and a reader of the convention spell each key once.
"""

from __future__ import annotations

from typing import Final

CONVENTION_VERSION_NUMBER: Final = 1

# Attributes every span of the convention carries.
CONVENTION_VERSION: Final = "statetrail.convention.version"
SPAN_TYPE: Final = "statetrail.span_type"

# statetrail.span_type values.
SPAN_EXECUTION: Final = "execution"
SPAN_EXECUTION_START: Final = "execution.start"
SPAN_STEP: Final = "step"

# Event names.
EVENT_RUN_START: Final = "statetrail.run.start"
EVENT_TRANSITION: Final = "statetrail.transition"
EVENT_ROLLBACK: Final = "statetrail.transaction.rollback"
EVENT_REJECTION: Final = "statetrail.rejection"

# The run (execution span and start event).
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

# State payloads.
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

# Run statuses.
STATUS_COMPLETED: Final = "completed"
STATUS_FAILED: Final = "failed"
STATUS_INTERRUPTED: Final = "interrupted"
STATUS_CANCELLED: Final = "cancelled"

# Payload modes.
MODE_FULL: Final = "full"
MODE_TRUNCATED: Final = "truncated"
MODE_REDACTED: Final = "redacted"

# Reducer names the convention fixes.
REDUCER_LAST_VALUE: Final = "last_value"
REDUCER_UNKNOWN: Final = "unknown"
