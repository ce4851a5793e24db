"""The rows of one ingest write, as Arrow tables: built without the database.

Pure (no SQL). `prepare_write` does the Python half of storing a group of
decoded, extracted batches (dedupe, then one Arrow column per table column),
and `Store.commit` the database half. Between the two the decoded batches can
be let go: only the Arrow tables are held while DuckDB commits
(collector/extractor.py).
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, fields
from typing import Any, TypeVar

import pyarrow as pa

from collector.decode import ResourceRecord, SpanRecord
from collector.junjo import Evidence, SpanRole
from collector.model import Execution, Transition
from collector.store import documents

_T = TypeVar("_T")
_EXECUTION_COLUMNS = tuple(field.name for field in fields(Execution))
_TRANSITION_COLUMNS = Transition._fields


@dataclass(frozen=True, slots=True)
class IngestBatch:
    """One export request, decoded and extracted, ready to be written."""

    spans: list[SpanRecord]
    evidence: Evidence


@dataclass(frozen=True, slots=True)
class WriteResult:
    """What a committed write touched: the replay stage re-reads these stores."""

    store_ids: frozenset[str]
    run_ids: frozenset[str]


@dataclass(frozen=True, slots=True)
class PreparedWrite:
    """Everything one transaction inserts, as Arrow tables only.

    No Python records are kept, so that the batches they came from are let go
    before the commit: their executions and transitions are several MB a run.
    """

    resources: pa.Table
    spans: pa.Table
    executions: pa.Table
    transitions: pa.Table

    def keeping_spans(self, stored: Collection[tuple[str, str]]) -> PreparedWrite:
        """The same write with only the evidence of these (trace id, span id) spans."""
        return PreparedWrite(
            self.resources,
            self.spans,
            _rows_of_spans(self.executions, stored),
            _rows_of_spans(self.transitions, stored),
        )

    def result(self) -> WriteResult:
        return WriteResult(
            store_ids=frozenset(
                _distinct(self.transitions, "store_id") | _distinct(self.executions, "store_id")
            ),
            run_ids=frozenset(_distinct(self.executions, "run_id")),
        )


def _rows_of_spans(table: pa.Table, stored: Collection[tuple[str, str]]) -> pa.Table:
    trace_ids, span_ids = table.column("trace_id").to_pylist(), table.column("span_id").to_pylist()
    keys = zip(trace_ids, span_ids, strict=True)
    return table.filter(pa.array([key in stored for key in keys], pa.bool_()))


def _distinct(table: pa.Table, column: str) -> set[str]:
    return {value for value in table.column(column).unique().to_pylist() if value}


def prepare_write(batches: Sequence[IngestBatch]) -> PreparedWrite:
    """The rows of several batches, each span, execution and transition once."""
    now = time.time_ns()
    spans = _unique({(s.trace_id, s.span_id): s for b in batches for s in b.spans})
    resources = _unique({s.resource.key: s.resource for s in spans})
    executions = _unique({e.run_id: e for b in batches for e in b.evidence.executions})
    transitions = _unique(
        {(t.trace_id, t.span_id, t.event_index): t for b in batches for t in b.evidence.transitions}
    )
    roles = {key: value for b in batches for key, value in b.evidence.roles.items()}
    return PreparedWrite(
        resources=_resources_table(resources),
        spans=_spans_table(spans, roles, now),
        executions=_executions_table(executions, now),
        transitions=_transitions_table(transitions, now),
    )


def _unique(by_key: dict[Any, _T]) -> list[_T]:
    return list(by_key.values())


def _resources_table(resources: list[ResourceRecord]) -> pa.Table:
    return pa.table(
        {
            "resource_key": [r.key for r in resources],
            "service_name": [r.service_name for r in resources],
            "scope_name": [r.scope_name for r in resources],
            "scope_version": [r.scope_version for r in resources],
            "attributes": [r.attributes_json for r in resources],
        }
    )


def _spans_table(
    spans: list[SpanRecord], roles: dict[tuple[str, str], SpanRole], now: int
) -> pa.Table:
    span_roles = [roles.get((s.trace_id, s.span_id)) for s in spans]
    return pa.table(
        {
            "trace_id": [s.trace_id for s in spans],
            "span_id": [s.span_id for s in spans],
            "parent_span_id": [s.parent_span_id for s in spans],
            "name": [s.name for s in spans],
            "kind": pa.array([s.kind for s in spans], pa.int8()),
            "start_unix_nano": pa.array([s.start_unix_nano for s in spans], pa.int64()),
            "end_unix_nano": pa.array([s.end_unix_nano for s in spans], pa.int64()),
            "status_code": pa.array([s.status_code for s in spans], pa.int8()),
            "status_message": [s.status_message for s in spans],
            "resource_key": [s.resource.key for s in spans],
            "service_name": [s.resource.service_name for s in spans],
            "scope_name": [s.resource.scope_name for s in spans],
            "span_type": pa.array([r and r.span_type for r in span_roles], pa.string()),
            "junjo_runtime_id": pa.array([r and r.runtime_id for r in span_roles], pa.string()),
            "junjo_parent_runtime_id": pa.array(
                [r and r.parent_runtime_id for r in span_roles], pa.string()
            ),
            "dropped_attributes_count": [s.dropped_attributes_count for s in spans],
            "dropped_events_count": [s.dropped_events_count for s in spans],
            "dropped_links_count": [s.dropped_links_count for s in spans],
            "event_count": [s.event_count for s in spans],
            "received_unix_nano": pa.array([now] * len(spans), pa.int64()),
            "raw": pa.array([s.raw for s in spans], pa.binary()),
        }
    )


def _executions_table(executions: list[Execution], now: int) -> pa.Table:
    columns: dict[str, Any] = {
        name: [getattr(e, name) for e in executions] for name in _EXECUTION_COLUMNS
    }
    for name in ("start_unix_nano", "end_unix_nano", "revision_start", "revision_end",
                 "transition_start", "transition_end", "transition_count"):
        columns[name] = pa.array(columns[name], pa.int64())
    for name in ("parent_run_id", "error_type", "store_id", "parent_store_id",
                 "state_start_mode", "state_start_policy", "state_end_mode",
                 "state_end_policy", "definition_id", "structural_id", "cancelled_reason"):
        columns[name] = pa.array(columns[name], pa.string())
    for name in documents.COLUMNS:
        columns[name] = documents.packed_column(columns[name])
    columns["reconstructable"] = pa.array(columns["reconstructable"], pa.bool_())
    columns["contract_version"] = pa.array(columns["contract_version"], pa.int32())
    columns["received_unix_nano"] = pa.array([now] * len(executions), pa.int64())
    return pa.table(columns)


def _transitions_table(transitions: list[Transition], now: int) -> pa.Table:
    columns: dict[str, Any] = {
        name: [getattr(t, name) for t in transitions] for name in _TRANSITION_COLUMNS
    }
    columns["patch"] = columns.pop("patch_json")
    for name in ("sequence", "revision_before", "revision_after", "time_unix_nano"):
        columns[name] = pa.array(columns[name], pa.int64())
    columns["contract_version"] = pa.array(columns["contract_version"], pa.int32())
    columns["event_index"] = pa.array(columns["event_index"], pa.int32())
    columns["received_unix_nano"] = pa.array([now] * len(transitions), pa.int64())
    return pa.table(columns)
