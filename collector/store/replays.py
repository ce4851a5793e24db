"""SQL for replay: loading an execution's evidence and saving what replay found.

The evidence for one execution is its owner span's trace plus every span, in
any trace, that carried a transition of its store (SCHEMA.md section 7: events
sit on many span kinds and even other traces). What replay found (verdict,
diagnostics, field index) is saved per run id and rewritten whenever late
evidence arrives, in one transaction, so a reader never sees half of it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from typing import Any

import duckdb

from collector.fieldindex import FieldIndex
from collector.model import EvidenceSpan, Execution, Transition
from collector.store.filters import delete_field_rows, insert_field_rows

EXECUTION_COLUMNS = tuple(field.name for field in fields(Execution))
EXECUTION_SELECT = ", ".join(f"e.{name}" for name in EXECUTION_COLUMNS)
# The dataclass says `patch_json` (text as received); the column is `patch`.
TRANSITION_SELECT = ", ".join(
    "patch AS patch_json" if field.name == "patch_json" else field.name
    for field in fields(Transition)
)


@dataclass(frozen=True, slots=True)
class SpanLink:
    """An evidence span with its parent, so the owner's subtree can be walked."""

    span: EvidenceSpan
    parent_span_id: str


@dataclass(frozen=True, slots=True)
class ReplayRecord:
    """What one replay found, as stored for lists and filters."""

    run_id: str
    verdict: str
    diagnostics: Sequence[dict[str, Any]]
    error_count: int
    warning_count: int
    received_transitions: int
    index_truncated: bool
    replayed_unix_nano: int


def execution(cursor: duckdb.DuckDBPyConnection, run_id: str) -> Execution | None:
    row = cursor.execute(
        f"SELECT {EXECUTION_SELECT} FROM executions e WHERE e.run_id = ?", [run_id]
    ).fetchone()
    return Execution(*row) if row else None


def executions_for_stores(
    cursor: duckdb.DuckDBPyConnection, store_ids: Iterable[str]
) -> list[Execution]:
    rows = cursor.execute(
        f"SELECT {EXECUTION_SELECT} FROM executions e WHERE list_contains(?, e.store_id)",
        [sorted(store_ids)],
    ).fetchall()
    return [Execution(*row) for row in rows]


def transitions_for_store(cursor: duckdb.DuckDBPyConnection, store_id: str) -> list[Transition]:
    rows = cursor.execute(
        f"SELECT {TRANSITION_SELECT} FROM transitions WHERE store_id = ?"
        " ORDER BY sequence NULLS LAST, time_unix_nano, trace_id, span_id, event_index",
        [store_id],
    ).fetchall()
    return [Transition(*row) for row in rows]


def evidence_spans(
    cursor: duckdb.DuckDBPyConnection, trace_id: str, store_id: str | None
) -> list[SpanLink]:
    rows = cursor.execute(
        """
        SELECT trace_id, span_id, name, span_type, dropped_attributes_count,
               dropped_events_count, dropped_links_count, parent_span_id
        FROM spans
        WHERE trace_id = ?
           OR (trace_id, span_id) IN (
                SELECT DISTINCT trace_id, span_id FROM transitions WHERE store_id = ?)
        """,
        [trace_id, store_id],
    ).fetchall()
    return [SpanLink(EvidenceSpan(*row[:7]), row[7]) for row in rows]


def save(
    cursor: duckdb.DuckDBPyConnection,
    records: Sequence[ReplayRecord],
    indexes: Sequence[FieldIndex],
) -> None:
    """Replace the stored replay of each record's run id (the caller owns the transaction)."""
    run_ids = [record.run_id for record in records]
    cursor.execute("DELETE FROM execution_replays WHERE list_contains(?, run_id)", [run_ids])
    cursor.executemany(
        "INSERT INTO execution_replays (run_id, verdict, diagnostics, error_count,"
        " warning_count, received_transitions, index_truncated, replayed_unix_nano)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            [
                r.run_id, r.verdict, json.dumps(list(r.diagnostics)), r.error_count,
                r.warning_count, r.received_transitions, r.index_truncated,
                r.replayed_unix_nano,
            ]
            for r in records
        ],
    )
    delete_field_rows(cursor, run_ids)
    insert_field_rows(cursor, indexes)
