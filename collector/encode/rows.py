"""The rows of one ingest write, as Arrow tables: built without the database.

Pure (no SQL). `prepare_write` does the Python half of storing a group of
decoded, extracted batches (dedupe, then one Arrow column per table column),
and `Store.commit` the database half. Between the two the decoded batches can
be let go: only the Arrow tables are held while DuckDB commits
(collector/intake/extractor.py). Each batch's span bytes become one compressed chunk
(collector/encode/span_bytes.py), numbered from 0 within the write and stored
as a row per piece; the store numbers them for good when it commits
(collector/store/prepared.py). No Arrow compute function is used here, so the
extraction worker never loads pyarrow.compute.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, fields
from itertools import accumulate
from typing import Any, TypeVar

import pyarrow as pa

from collector.decode.otlp import ResourceRecord, SpanRecord
from collector.encode import documents, span_bytes
from collector.model import Evidence, Execution, RunStart, SpanRole, Transition

_T = TypeVar("_T")
_EXECUTION_COLUMNS = tuple(field.name for field in fields(Execution))
_TRANSITION_COLUMNS = Transition._fields
# Where a span's bytes are: chunk id (within the write), offset, length.
_Place = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class IngestBatch:
    """One export request, decoded and extracted, ready to be written."""

    spans: list[SpanRecord]
    evidence: Evidence


@dataclass(frozen=True, slots=True)
class PreparedWrite:
    """Everything one transaction inserts, as Arrow tables only.

    No Python records are kept, so that the batches they came from are let go
    before the commit: their executions and transitions are several MB a run.
    """

    resources: pa.Table
    spans: pa.Table
    span_chunk_pieces: pa.Table
    executions: pa.Table
    transitions: pa.Table
    # Convention runs' start events (collector/producers/convention.py).
    run_starts: pa.Table


def prepare_write(batches: Sequence[IngestBatch]) -> PreparedWrite:
    """The rows of several batches, each span, execution and transition once: a span's
    first copy wins, with its own batch's evidence, so two different deliveries of one
    span never mix."""
    now = time.time_ns()
    spans, places, chunks, first_batch = _placed_spans(batches)

    def firsts(index: int, trace_id: str, span_id: str) -> bool:
        # Evidence whose span is not in this write (built by hand) stays with its batch.
        return first_batch.get((trace_id, span_id), index) == index

    resources = _unique({s.resource.key: s.resource for s in spans})
    executions: dict[str, Execution] = {}
    transitions: dict[tuple[str, str, int], Transition] = {}
    roles: dict[tuple[str, str], SpanRole] = {}
    starts: dict[str, RunStart] = {}
    for index, batch in enumerate(batches):
        evidence = batch.evidence
        for e in evidence.executions:
            if firsts(index, e.trace_id, e.span_id):
                executions.setdefault(e.run_id, e)
        for t in evidence.transitions:
            if firsts(index, t.trace_id, t.span_id):
                transitions.setdefault((t.trace_id, t.span_id, t.event_index), t)
        for key, role in evidence.roles.items():
            if firsts(index, *key):
                roles.setdefault(key, role)
        for start in evidence.run_starts:
            if firsts(index, start.trace_id, start.span_id):
                starts.setdefault(start.run_id, start)
    return PreparedWrite(
        resources=_resources_table(resources),
        spans=_spans_table(spans, places, roles, now),
        span_chunk_pieces=chunk_pieces_table(
            [(chunk_id, span_bytes.CODEC, size, body)
             for chunk_id, (body, size) in enumerate(chunks)]
        ),
        executions=_executions_table(list(executions.values()), now),
        transitions=_transitions_table(list(transitions.values()), now),
        run_starts=run_starts_table(list(starts.values()), now),
    )


def _placed_spans(
    batches: Sequence[IngestBatch],
) -> tuple[list[SpanRecord], list[_Place], list[tuple[bytes, int]], dict[tuple[str, str], int]]:
    """Each span once, where its bytes sit, the chunks (body, raw size), and which batch
    holds each span's first copy (a batch with no first copy gets no chunk)."""
    first: dict[tuple[str, str], tuple[int, int, SpanRecord]] = {}
    for index, batch in enumerate(batches):
        for position, s in enumerate(batch.spans):
            first.setdefault((s.trace_id, s.span_id), (index, position, s))
    chunk_of: dict[int, int] = {}
    offsets: dict[int, list[int]] = {}
    chunks: list[tuple[bytes, int]] = []
    for index in sorted({index for index, _, _ in first.values()}):
        raws = [s.raw for s in batches[index].spans]
        chunk_of[index] = len(chunks)
        offsets[index] = list(accumulate(map(len, raws), initial=0))
        chunks.append(span_bytes.pack(raws))
    spans = [s for _, _, s in first.values()]
    places = [
        (chunk_of[index], offsets[index][position], len(s.raw))
        for index, position, s in first.values()
    ]
    return spans, places, chunks, {key: index for key, (index, _, _) in first.items()}


def _transposed(rows: Sequence[tuple[Any, ...]], names: Sequence[str]) -> dict[str, Sequence[Any]]:
    """Tuples (NamedTuples) as columns by name, in one pass in C (a comprehension per
    column and value was a noticeable cost per span)."""
    if not rows:
        return {name: () for name in names}
    return dict(zip(names, zip(*rows, strict=True), strict=True))


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
            "resource_raw": pa.array([r.resource_raw for r in resources], pa.binary()),
            "resource_schema_url": pa.array(
                [r.resource_schema_url for r in resources], pa.string()
            ),
            "scope_raw": pa.array([r.scope_raw for r in resources], pa.binary()),
            "scope_schema_url": pa.array([r.scope_schema_url for r in resources], pa.string()),
        }
    )


def chunk_pieces_table(chunks: Sequence[tuple[int, str, int, bytes]]) -> pa.Table:
    """The `span_chunk_pieces` rows of chunks given as (id, codec, raw size, body)."""
    rows = [
        (chunk_id, number, codec, raw_size, piece)
        for chunk_id, codec, raw_size, body in chunks
        for number, piece in enumerate(span_bytes.pieces(body))
    ]
    column = _transposed(rows, ("chunk_id", "piece", "codec", "raw_size", "body"))
    return pa.table(
        {
            "chunk_id": pa.array(column["chunk_id"], pa.int64()),
            "piece": pa.array(column["piece"], pa.int32()),
            "codec": pa.array(column["codec"], pa.string()),
            "raw_size": pa.array(column["raw_size"], pa.int64()),
            "body": pa.array(column["body"], pa.binary()),
        }
    )


def _spans_table(
    spans: list[SpanRecord],
    places: list[_Place],
    roles: dict[tuple[str, str], SpanRole],
    now: int,
) -> pa.Table:
    span_roles = [roles.get((s.trace_id, s.span_id)) for s in spans]
    chunk_ids, offsets, lengths = zip(*places, strict=True) if places else ((), (), ())
    field = _transposed(spans, SpanRecord._fields)
    return pa.table(
        {
            "trace_id": pa.array(field["trace_id"], pa.string()),
            "span_id": pa.array(field["span_id"], pa.string()),
            "parent_span_id": pa.array(field["parent_span_id"], pa.string()),
            "name": pa.array(field["name"], pa.string()),
            "kind": pa.array(field["kind"], pa.int8()),
            "start_unix_nano": pa.array(field["start_unix_nano"], pa.int64()),
            "end_unix_nano": pa.array(field["end_unix_nano"], pa.int64()),
            "status_code": pa.array(field["status_code"], pa.int8()),
            "status_message": pa.array(field["status_message"], pa.string()),
            "resource_key": [s.resource.key for s in spans],
            "service_name": [s.resource.service_name for s in spans],
            "scope_name": [s.resource.scope_name for s in spans],
            "span_type": pa.array([r and r.span_type for r in span_roles], pa.string()),
            "junjo_runtime_id": pa.array([r and r.runtime_id for r in span_roles], pa.string()),
            "junjo_parent_runtime_id": pa.array(
                [r and r.parent_runtime_id for r in span_roles], pa.string()
            ),
            "dropped_attributes_count": pa.array(field["dropped_attributes_count"], pa.int64()),
            "dropped_events_count": pa.array(field["dropped_events_count"], pa.int64()),
            "dropped_links_count": pa.array(field["dropped_links_count"], pa.int64()),
            "event_count": pa.array(field["event_count"], pa.int64()),
            "received_unix_nano": pa.array([now] * len(spans), pa.int64()),
            # The bytes are in the chunk; `raw` holds those of spans stored before m011.
            "raw": pa.array([b""] * len(spans), pa.binary()),
            "chunk_id": pa.array(chunk_ids, pa.int64()),
            "chunk_offset": pa.array(offsets, pa.int64()),
            "chunk_length": pa.array(lengths, pa.int64()),
        }
    )


def _executions_table(executions: list[Execution], now: int) -> pa.Table:
    columns: dict[str, Any] = {
        name: [getattr(e, name) for e in executions] for name in _EXECUTION_COLUMNS
    }
    for name in ("start_unix_nano", "end_unix_nano", "revision_start", "revision_end",
                 "transition_start", "transition_end", "transition_count",
                 "application_transition_start", "application_transition_end"):
        columns[name] = pa.array(columns[name], pa.int64())
    for name in ("parent_run_id", "error_type", "store_id", "parent_store_id",
                 "state_start_mode", "state_start_policy", "state_end_mode",
                 "state_end_policy", "definition_id", "structural_id", "cancelled_reason",
                 "correlation_type", "correlation_id", "application_store_id",
                 "framework", "framework_version", "run_status", "error_action",
                 "state_start_digest", "state_end_digest"):
        columns[name] = pa.array(columns[name], pa.string())
    for name in documents.COLUMNS:
        columns[name] = documents.packed_column(columns[name])
    columns["reconstructable"] = pa.array(columns["reconstructable"], pa.bool_())
    columns["contract_version"] = pa.array(columns["contract_version"], pa.int32())
    columns["convention_version"] = pa.array(columns["convention_version"], pa.int32())
    columns["received_unix_nano"] = pa.array([now] * len(executions), pa.int64())
    return pa.table(columns)


def run_starts_table(starts: list[RunStart], now: int) -> pa.Table:
    """The `run_starts` rows of convention runs' start events."""
    columns: dict[str, Any] = _transposed(starts, RunStart._fields)
    for name in ("sequence_start", "revision_start", "time_unix_nano"):
        columns[name] = pa.array(columns[name], pa.int64())
    for name in ("parent_run_id", "framework", "framework_version", "state_start_mode",
                 "state_start_policy", "state_start_digest", "name", "kind", "run_id",
                 "trace_id", "span_id", "store_id"):
        columns[name] = pa.array(columns[name], pa.string())
    for name in documents.COLUMNS:
        if name in columns:
            columns[name] = documents.packed_column(columns[name])
    columns["convention_version"] = pa.array(columns["convention_version"], pa.int32())
    columns["received_unix_nano"] = pa.array([now] * len(starts), pa.int64())
    return pa.table(columns)


def _transitions_table(transitions: list[Transition], now: int) -> pa.Table:
    columns: dict[str, Any] = _transposed(transitions, _TRANSITION_COLUMNS)
    columns["patch"] = columns.pop("patch_json")
    for name in ("sequence", "revision_before", "revision_after", "time_unix_nano", "superstep",
                 "transaction_begin_unix_nano", "note_after_sequence"):
        columns[name] = pa.array(columns[name], pa.int64())
    for name in ("run_id", "state_digest", "writes", "writes_mode", "reducers",
                 "transaction_id", "note_kind", "note_field", "note_message"):
        columns[name] = pa.array(columns[name], pa.string())
    columns["contract_version"] = pa.array(columns["contract_version"], pa.int32())
    columns["event_index"] = pa.array(columns["event_index"], pa.int32())
    columns["received_unix_nano"] = pa.array([now] * len(transitions), pa.int64())
    return pa.table(columns)
