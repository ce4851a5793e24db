"""Builders of executions and transitions for replay tests (no I/O, no server)."""

from __future__ import annotations

import json
from typing import Any

import jsonpatch

from collector.model import Execution, Transition

TRACE = "0af7651916cd43dd8448eb211c80319c"
OWNER_SPAN = "b7ad6b7169203331"
NODE_SPAN = "00f067aa0ba902b7"
STORE = "V74HR1qmSsFXBsx61p9XF"

Patch = list[dict[str, Any]]


# --- builders ---------------------------------------------------------------------------


def make_execution(**overrides: Any) -> Execution:
    fields: dict[str, Any] = {
        "run_id": "GJqrZBDFYIL2hSjgKoWta",
        "kind": "workflow",
        "name": "Demo Workflow",
        "service": "demo",
        "trace_id": TRACE,
        "span_id": OWNER_SPAN,
        "parent_span_id": "",
        "parent_run_id": None,
        "status": "ok",
        "status_message": "",
        "error_type": None,
        "start_unix_nano": 1_000,
        "end_unix_nano": 9_000_000,
        "store_id": STORE,
        "parent_store_id": None,
        "state_start": "{}",
        "state_start_mode": "full",
        "state_start_policy": "junjo.full.v1",
        "state_end": "{}",
        "state_end_mode": "full",
        "state_end_policy": "junjo.full.v1",
        "revision_start": 0,
        "revision_end": 0,
        "transition_start": 0,
        "transition_end": 0,
        "transition_count": 0,
        "reconstructable": True,
        "graph_snapshot": None,
        "contract_version": 3,
        "definition_id": None,
        "structural_id": None,
        "cancelled_reason": None,
        "correlation_type": None,
        "correlation_id": None,
        "application_store_id": None,
        "application_transition_start": None,
        "application_transition_end": None,
    }
    fields.update(overrides)
    return Execution(**fields)


def make_transition(sequence: int | None, patch: Any, **overrides: Any) -> Transition:
    position = sequence or 0
    fields: dict[str, Any] = {
        "store_id": STORE,
        "sequence": sequence,
        "store_name": "DemoStore",
        "action": f"action_{position}",
        "revision_before": position - 1,
        "revision_after": position,
        "patch_json": patch if isinstance(patch, str) else json.dumps(patch),
        "patch_mode": "full",
        "patch_policy": "junjo.full.v1",
        "event_id": f"event{position:016d}",
        "trace_id": TRACE,
        "span_id": NODE_SPAN,
        "event_index": 0,
        "time_unix_nano": 10_000 + position,
        "contract_version": 3,
        "span_name": "DemoNode",
    }
    fields.update(overrides)
    return Transition(**fields)


def scenario(
    start: Any, patches: list[Patch], *, first_sequence: int = 1
) -> tuple[Execution, list[Transition], list[Any]]:
    """An execution whose recorded states agree with its patches, and the direct states."""
    states = [start]
    for patch in patches:
        states.append(jsonpatch.apply_patch(states[-1], patch))
    transitions = [
        make_transition(sequence, patch)
        for sequence, patch in enumerate(patches, start=first_sequence)
    ]
    lower = first_sequence - 1
    execution = make_execution(
        state_start=json.dumps(start),
        state_end=json.dumps(states[-1]),
        revision_start=lower,
        revision_end=lower + len(patches),
        transition_start=lower,
        transition_end=lower + len(patches),
        transition_count=len(patches),
    )
    return execution, transitions, states


def pointers(doc: Any, prefix: str = "") -> list[str]:
    """Every JSON pointer of a document, the whole document ("") first."""
    found = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            found += pointers(value, f"{prefix}/{key.replace('~', '~0').replace('/', '~1')}")
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            found += pointers(value, f"{prefix}/{index}")
    return found
