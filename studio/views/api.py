"""The JSON API: executions, their timelines, states and field provenance.

Thin handlers, plain functions on purpose: Starlette runs those in its thread pool, so
a slow DuckDB query never blocks the event loop. Errors are JSON too (400 naming the
parameter and, for a filter, the position; 404 for an unknown run). Values deeper than
API_MAX_DEPTH are cut and marked, so every answer serialises.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any, NamedTuple

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from collector.index.query import parse_path
from collector.index.query_ast import pattern_path
from collector.model import Execution, Transition
from collector.producers.convention import PROJECTED_POLICY_PREFIX
from collector.producers.junjo import APPLICATION_RUN_SUFFIX
from collector.replay.history import Diagnostic, History, StateUnavailableError, Step
from collector.replay.jsondoc import (
    MISSING,
    JsonPatchOp,
    JsonValue,
    Missing,
    parse_json,
    parse_patch,
)
from collector.replay.provenance import Provenance, ProvenanceEntry
from collector.row_json import execution_json
from collector.store import Store
from collector.store.in_flight import InFlightRow
from collector.timestamps import rfc3339
from studio.inspect import Inspection, parent_and_children
from studio.json_errors import json_error
from studio.links import Links
from studio.params import BadParameter, execution_query, next_cursor, pointer_param
from studio.render.bounded import api_value
from studio.render.field_columns import value_columns, value_json
from studio.render.outcome import ended_badly, outcome, outcome_json
from studio.render.start_writer import start_writer
from studio.render.store_runs import store_position, store_position_json
from studio.render.suggestions import paths_json, values_json
from studio.render.waterfall import build_waterfall
from studio.services import inspector_of, store_of, suggestions_of


def bad_parameter(exc: BadParameter) -> JSONResponse:
    extra: dict[str, Any] = {"parameter": exc.name}
    if exc.position is not None:
        extra["position"] = exc.position
    return json_error(400, str(exc), **extra)


def in_flight_json(row: InFlightRow) -> dict[str, Any]:
    return {
        "id": row.run_id,
        "kind": "workflow",
        "workflow": None,
        "service": row.service,
        "status": "in_flight",
        "verdict": "in_flight",
        "started_at": rfc3339(row.first_unix_nano),
        "ended_at": None,
        "start_unix_nano": row.first_unix_nano,
        "transition_count": None,
        "received_transitions": row.transition_count,
        "trace_id": row.trace_id,
        "store_ids": list(row.store_ids),
        # Of those, the run's own store: the one its timeline replays.
        "store_id": row.own_store_id,
        "span_count": row.span_count,
        # When its trace last received a span; repeated as `no_activity_since` once that is
        # so long ago that the run is taken to have stopped (InFlightRow.is_quiet).
        "last_activity_at": rfc3339(row.latest_activity_unix_nano),
        "no_activity_since": (
            rfc3339(row.latest_activity_unix_nano) if row.is_quiet(time.time_ns()) else None
        ),
    }


def diagnostic_json(diagnostic: Diagnostic) -> dict[str, Any]:
    return dataclasses.asdict(diagnostic)


def json_value(value: JsonValue | Missing) -> JsonValue:
    """A value as answered: null when absent; past API_MAX_DEPTH levels, the truncation object."""
    return None if isinstance(value, Missing) else api_value(value)


def list_executions(request: Request) -> Response:
    try:
        query = execution_query(request.query_params)
    except BadParameter as exc:
        return bad_parameter(exc)
    store = store_of(request)
    if query.verdict == "in_flight":
        rows = store.in_flight(limit=query.limit, matching=query)
        return JSONResponse(
            {"executions": [in_flight_json(r) for r in rows], "next": None}
        )
    found = store.search(query)
    page = found[: query.limit]
    # A `where` filter adds each run's end value of the paths it tests.
    fields = value_json(store, page, value_columns(query.where))
    return JSONResponse(
        {
            "executions": [
                execution_json(r) | ({"fields": fields[r.run_id]} if fields else {})
                for r in page
            ],
            "next": next_cursor(found, query),
        }
    )


def execution_detail(request: Request) -> Response:
    inspection = _inspect(request)
    if inspection is None:
        return _unknown(request)
    store = store_of(request)
    history = inspection.history
    summary: dict[str, Any]
    if inspection.row is not None:
        summary = execution_json(inspection.row)
        summary["verdict"] = history.verdict
        parent, children = parent_and_children(
            store, inspection.run_id, inspection.row.parent_run_id
        )
    else:
        assert inspection.in_flight is not None
        summary = in_flight_json(inspection.in_flight)
        parent, children = None, []
    execution = inspection.execution
    if execution is not None:
        summary |= {
            "transition_start": execution.transition_start,
            "transition_end": execution.transition_end,
            "revision_start": execution.revision_start,
            "revision_end": execution.revision_end,
            "reconstructable": execution.reconstructable,
            "contract_version": execution.contract_version,
            "state_start_mode": execution.state_start_mode,
            "state_end_mode": execution.state_end_mode,
            "parent_store_id": execution.parent_store_id,
            "cancelled_reason": execution.cancelled_reason,
            "application_store": (
                {
                    "id": execution.application_store_id,
                    "transition_start": execution.application_transition_start,
                    "transition_end": execution.application_transition_end,
                    # The store's history over the agent's run, a child run of the agent.
                    "run_id": execution.run_id + APPLICATION_RUN_SUFFIX,
                }
                if execution.application_store_id is not None
                else None
            ),
        }
        if execution.convention_version is not None:
            summary |= convention_json(store, execution)
    return JSONResponse(
        {
            **summary,
            "parent": execution_json(parent) if parent else None,
            "children": [execution_json(child) for child in children],
            "diagnostics": [diagnostic_json(d) for d in history.diagnostics],
            "outcome": _outcome(request, inspection),
        }
    )


def convention_json(store: Store, execution: Execution) -> dict[str, Any]:
    """What a run of the state-evidence convention adds to its detail: the framework, how
    the producer says it ended, its digests and its place among its store's runs."""
    position = None
    if execution.store_id:
        runs = store.store_runs(execution.store_id)
        position = store_position(execution.store_id, runs, execution.run_id)
    return {
        "framework": execution.framework,
        "framework_version": execution.framework_version,
        "convention_version": execution.convention_version,
        "run_status": execution.run_status,
        "error_action": execution.error_action,
        "state_start_digest": execution.state_start_digest,
        "state_end_digest": execution.state_end_digest,
        # The producer's own modes (docs/convention.md 6): a truncated or redacted state
        # still replays and verifies, so `state_*_mode` above says `full`.
        "state_start_projection": projection_of(execution.state_start_policy),
        "state_end_projection": projection_of(execution.state_end_policy),
        "store_runs": store_position_json(position),
    }


def projection_of(policy: str | None) -> str | None:
    """The convention's mode of a payload, from where extraction kept it."""
    if policy is None or not policy.startswith(PROJECTED_POLICY_PREFIX):
        return None
    return policy.removeprefix(PROJECTED_POLICY_PREFIX)


def _outcome(request: Request, inspection: Inspection) -> dict[str, Any] | None:
    """How a failed or cancelled run ended, and where, as its page's banner says (null
    for a run that ended well or is still in flight); reads its trace's spans only then."""
    execution = inspection.execution
    if inspection.row is None or execution is None:
        return None
    if not ended_badly(execution.status, execution.error_type):
        return None
    spans = store_of(request).spans_of_trace(execution.trace_id)
    return outcome_json(
        outcome(
            execution.status, execution.error_type, execution.status_message,
            execution.cancelled_reason, build_waterfall(spans, execution.span_id),
            Links.of(request),
        )
    )


class TimelineEntry(NamedTuple):
    """One row of the timeline JSON twin: a step flattened, with its patch parsed."""

    sequence: int
    time_unix_nano: int
    action: str
    store_id: str
    span_id: str
    span_name: str
    patch: tuple[JsonPatchOp, ...] | None
    changed_paths: tuple[str, ...]
    applied: bool
    verified: bool
    foreign: bool
    # Convention runs (docs/convention.md 3.1); None for Junjo's.
    digest_matched: bool | None = None
    superstep: int | None = None
    writes: JsonValue = None
    reducers: JsonValue = None
    transaction_id: str | None = None


def timeline(history: History) -> tuple[TimelineEntry, ...]:
    """One flattened record per step, with the patch parsed (None if unreadable)."""
    return tuple(_timeline_entry(step) for step in history.steps)


def _timeline_entry(step: Step) -> TimelineEntry:
    transition = step.transition
    # An applied patch was parsed and checked by replay already; parsing it again
    # plainly saves the per-op checks on long timelines.
    ops = json.loads(transition.patch_json) if step.applied else parse_patch(transition.patch_json)
    return TimelineEntry(
        sequence=step.sequence,
        time_unix_nano=transition.time_unix_nano,
        action=transition.action,
        store_id=transition.store_id,
        span_id=transition.span_id,
        span_name=transition.span_name,
        patch=tuple(ops) if ops is not None else None,
        changed_paths=step.changed_paths,
        applied=step.applied,
        verified=step.verified,
        foreign=step.foreign,
        digest_matched=step.digest_matched,
        superstep=transition.superstep,
        writes=_parsed_or_none(transition.writes),
        reducers=_parsed_or_none(transition.reducers),
        transaction_id=transition.transaction_id,
    )


def _parsed_or_none(text: str | None) -> JsonValue:
    """A convention payload parsed, or None when absent or not JSON."""
    if text is None:
        return None
    parsed = parse_json(text)
    return None if parsed is MISSING else parsed


def timeline_json(entry: TimelineEntry) -> dict[str, Any]:
    return {
        "sequence": entry.sequence,
        "time_unix_nano": entry.time_unix_nano,
        "time": rfc3339(entry.time_unix_nano),
        "action": entry.action,
        "store_id": entry.store_id,
        "span_id": entry.span_id,
        "node": entry.span_name,
        "patch": list(entry.patch) if entry.patch is not None else None,
        "changed_paths": list(entry.changed_paths),
        "applied": entry.applied,
        "verified": entry.verified,
        "foreign": entry.foreign,
        "digest_matched": entry.digest_matched,
        "superstep": entry.superstep,
        "writes": entry.writes,
        "reducers": entry.reducers,
        "transaction_id": entry.transaction_id,
    }


def note_json(note: Transition) -> dict[str, Any]:
    """A rollback or rejection of a convention run, as the timeline lists it."""
    return {
        "kind": note.note_kind,
        "after_sequence": note.note_after_sequence,
        "time_unix_nano": note.time_unix_nano,
        "time": rfc3339(note.time_unix_nano),
        "action": note.action,
        "span_id": note.span_id,
        "transaction_id": note.transaction_id,
        "field": note.note_field,
        "message": note.note_message,
        "payload": _parsed_or_none(note.patch_json),
    }


def execution_timeline(request: Request) -> Response:
    inspection = _inspect(request)
    if inspection is None:
        return _unknown(request)
    history = inspection.history
    return JSONResponse(
        {
            "id": inspection.run_id,
            "start_sequence": history.start_sequence,
            "end_sequence": history.end_sequence,
            "start": api_value(_state_or_none(history, history.start_sequence)),
            "end": json_value(history.recorded_end),
            "verdict": history.verdict,
            "diagnostics": [diagnostic_json(d) for d in history.diagnostics],
            "transitions": [timeline_json(entry) for entry in timeline(history)],
            "notes": [note_json(note) for note in history.notes],
            "missing": [
                {"first": first, "last": last}
                for first, last in sorted(history.missing_sequences.values())
            ],
        }
    )


def execution_state(request: Request) -> Response:
    inspection = _inspect(request)
    if inspection is None:
        return _unknown(request)
    history = inspection.history
    text = request.query_params.get("sequence", "")
    try:
        sequence = int(text) if text else history.last_sequence
    except ValueError:
        return json_error(400, "sequence: must be a whole number", parameter="sequence")
    if history.has_states and not history.start_sequence <= sequence <= history.last_sequence:
        # A sequence outside the run is the caller's mistake (400); 404 below means
        # this run has no states at all (start state missing or withheld).
        return json_error(
            400,
            f"sequence: must be between {history.start_sequence} and {history.last_sequence}",
            parameter="sequence",
        )
    try:
        state = history.state_at(sequence)
        verified = history.verified_at(sequence)
    except StateUnavailableError as exc:
        return json_error(404, str(exc), parameter="sequence")
    # A sequence that never arrived has no state of its own: say so, and whose
    # state is shown instead (the last step received before it, or the start).
    hole = next(
        (
            {"first": first, "last": last}
            for first, last in history.missing_sequences.values()
            if first <= sequence <= last
        ),
        None,
    )
    index = history.index_at(sequence)
    shown = history.steps[index].sequence if index >= 0 else history.start_sequence
    return JSONResponse(
        {
            "id": inspection.run_id,
            "sequence": sequence,
            "verified": verified,
            "state": api_value(state),
            "missing": hole,
            "state_of_sequence": sequence if hole is None or shown is None else shown,
        }
    )


def provenance_entry_json(entry: ProvenanceEntry) -> dict[str, Any]:
    return {
        "sequence": entry.sequence,
        "time_unix_nano": entry.time_unix_nano,
        "time": rfc3339(entry.time_unix_nano),
        "op": entry.op,
        "op_path": entry.op_path,
        "from_path": entry.from_path,
        "relation": entry.relation,
        "value_path": entry.value_path,
        "before": json_value(entry.before),
        "before_present": entry.before is not MISSING,
        "after": json_value(entry.after),
        "after_present": entry.after is not MISSING,
        "action": entry.action,
        "store_id": entry.store_id,
        "span_id": entry.span_id,
        "node": entry.span_name,
        "verified": entry.verified,
        # Added fields: a received write whose patch did not apply changed nothing.
        "applied": entry.applied,
        "not_applied_because": entry.not_applied,
        "attempted": json_value(entry.attempted),
        "attempted_present": entry.attempted is not MISSING,
        # Later operations of the same step put the value back: not a writer.
        "undone": entry.undone,
    }


def provenance_json(found: Provenance) -> dict[str, Any]:
    return {
        "path": found.pointer,
        "writes": [provenance_entry_json(e) for e in found.entries],
        "last_writer": provenance_entry_json(found.last_writer) if found.last_writer else None,
    }


def execution_provenance(request: Request) -> Response:
    inspection = _inspect(request)
    if inspection is None:
        return _unknown(request)
    try:
        pointer = pointer_param(request.query_params.get("path", ""))
        found = inspection.provenance(pointer)
    except (BadParameter, ValueError) as exc:
        return json_error(400, f"path: {exc}", parameter="path")
    # Added field: when no write of this run set the final value, the earlier run on
    # its shared store that did (null when none can be shown: studio/render/start_writer.py).
    origin = None
    untouched = all(entry.applied for entry in found.entries)
    if found.last_writer is None and untouched and not inspection.history.missing_count:
        origin = start_writer(
            inspection, pointer, store_of(request).store_run_before,
            inspector_of(request).inspect, store_of(request).store_transitions_between,
            Links.of(request),
        )
    return JSONResponse(
        {
            "id": inspection.run_id,
            **provenance_json(found),
            "start_writer": dataclasses.asdict(origin) if origin else None,
        }
    )


def _inspect(request: Request) -> Inspection | None:
    return inspector_of(request).inspect(request.path_params["run_id"])


def _unknown(request: Request) -> JSONResponse:
    return json_error(404, f"no execution with id {request.path_params['run_id']!r}")


def _state_or_none(history: History, sequence: int) -> JsonValue:
    try:
        return history.state_at(sequence)
    except StateUnavailableError:
        return None


# --- the filter box's suggestions (studio/render/suggestions.py) ---------------------


def field_paths(request: Request) -> Response:
    """GET /api/fields?workflow=W: the end-state paths of the newest runs (of W)."""
    workflow = request.query_params.get("workflow") or None
    return JSONResponse(paths_json(suggestions_of(request).help(store_of(request), workflow)))


def field_values(request: Request) -> Response:
    """GET /api/fields/values?path=P&workflow=W: P's commonest end values in the newest runs."""
    text = request.query_params.get("path", "")
    try:
        if not text:
            raise ValueError("give a field path, e.g. refund.eligible or /refund/eligible")
        # A pointer may hold characters the filter language's tokenizer refuses.
        path = pattern_path(text) if text.startswith("/") else parse_path(text)
    except ValueError as exc:
        return json_error(400, f"path: {exc}", parameter="path")
    workflow = request.query_params.get("workflow") or None
    sampled, values = suggestions_of(request).examples(store_of(request), path, workflow)
    return JSONResponse(values_json(path, workflow, sampled, values))
