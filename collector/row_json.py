"""Stored rows as the JSON documents statetrail prints and serves.

The command line reads the database file itself when it is free and asks the
running server when it is not (`statetrail executions`, `statetrail keys
list`); both answers come from the functions here, so a row looks the same
either way. The studio's API and admin routes import them for the same reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from collector.timestamps import rfc3339

if TYPE_CHECKING:
    # Types only: importing the store loads DuckDB, and the command line imports
    # this module while it is still building its parser.
    from collector.store import ApiKey
    from collector.store.listing import ExecutionRow


def execution_json(row: ExecutionRow) -> dict[str, Any]:
    return {
        "id": row.run_id,
        "kind": row.kind,
        "workflow": row.name,
        "service": row.service,
        "status": row.status,
        "error": row.status_message or None,
        "error_type": row.error_type,
        "verdict": row.verdict or "pending",
        "started_at": rfc3339(row.start_unix_nano),
        "ended_at": rfc3339(row.end_unix_nano),
        "start_unix_nano": row.start_unix_nano,
        "end_unix_nano": row.end_unix_nano,
        "duration_nano": row.end_unix_nano - row.start_unix_nano,
        "transition_count": row.transition_count,
        "received_transitions": row.received_transitions,
        "trace_id": row.trace_id,
        "span_id": row.span_id,
        "store_id": row.store_id,
        "parent_id": row.parent_run_id,
        "diagnostic_errors": row.error_count,
        "diagnostic_warnings": row.warning_count,
        "correlation": (
            {"type": row.correlation_type, "id": row.correlation_id}
            if row.correlation_id is not None
            else None
        ),
        "index_truncated": row.index_truncated,
    }


def key_json(key: ApiKey) -> dict[str, Any]:
    return {
        "name": key.name,
        "active": key.active,
        "created_at": rfc3339(key.created_unix_nano),
        "last_used_at": rfc3339(key.last_used_unix_nano),
        "revoked_at": rfc3339(key.revoked_unix_nano),
        "created_unix_nano": key.created_unix_nano,
        "last_used_unix_nano": key.last_used_unix_nano,
        "revoked_unix_nano": key.revoked_unix_nano,
    }
