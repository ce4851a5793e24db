"""Execution page view models for what convention runs record and Junjo's do not.

Pure builders (docs/convention.md): a step's superstep with every writer's own update
beside the merged patch and the reducer that merged each field; the step's digest mark;
the rollbacks and rejections that changed nothing, placed on the timeline after the
step they followed; the run's place among the runs of its store (a LangGraph thread:
the interrupted run and its resume). Values from telemetry are shown through
studio/render/bounded.py, so a huge or deep update costs a capped amount.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from collector.model import NOTE_REJECTION, Execution, Transition
from collector.replay.history import Step
from collector.replay.jsondoc import MISSING, JsonValue, parse_json
from collector.store.replays import StoreRun
from studio.links import Links
from studio.render.bounded import cut_line, json_preview
from studio.render.graph import NodeRun
from studio.render.store_runs import StorePosition
from studio.render.text import DIFF_VALUE_CHARS
from studio.render.waterfall import NAME_CHARS

# Writers listed on one step: a Send map-reduce can have thousands.
MAX_WRITERS_SHOWN: Final = 50
MAX_REDUCERS_SHOWN: Final = 100
# Notes (rollbacks, rejections) listed after one step.
MAX_NOTES_PER_STEP: Final = 20


@dataclass(frozen=True, slots=True)
class WriterUpdate:
    """One writer of a superstep and its raw update, before the reducers merged it."""

    writer: str
    task_id: str | None
    update: str


@dataclass(frozen=True, slots=True)
class Superstep:
    """The framework's step behind a transition: who wrote what, and how it merged."""

    number: int | None
    writers: tuple[WriterUpdate, ...]
    more_writers: int
    reducers: tuple[tuple[str, str], ...]
    more_reducers: int
    writes_mode: str | None
    transaction_id: str | None
    # True/False: the replayed state hashes / does not hash to the producer's digest.
    digest_matched: bool | None


@dataclass(frozen=True, slots=True)
class NoteRow:
    """A rollback or rejection: it changed nothing, so it is an entry, not a step."""

    kind: str
    after_sequence: int | None
    action: str
    field: str | None
    message: str
    payload: str
    time_unix_nano: int


@dataclass(frozen=True, slots=True)
class StoreRunsView:
    """Where the run sits among its store's runs, with links to the runs around it."""

    store_id: str
    index: int
    count: int
    previous_href: str | None
    previous_title: str | None
    next_href: str | None
    next_title: str | None


def superstep(step: Step) -> Superstep | None:
    """The step's superstep, writers and reducers; None for a step of a Junjo run."""
    transition = step.transition
    if transition.run_id is None:
        return None
    writes = _parsed(transition.writes)
    reducers = _parsed(transition.reducers)
    writer_list = writes if isinstance(writes, list) else []
    reducer_items = sorted(reducers.items()) if isinstance(reducers, dict) else []
    return Superstep(
        number=transition.superstep,
        writers=tuple(_writer(item) for item in writer_list[:MAX_WRITERS_SHOWN]),
        more_writers=max(len(writer_list) - MAX_WRITERS_SHOWN, 0),
        reducers=tuple(
            (cut_line(name, NAME_CHARS), cut_line(str(reducer), NAME_CHARS))
            for name, reducer in reducer_items[:MAX_REDUCERS_SHOWN]
        ),
        more_reducers=max(len(reducer_items) - MAX_REDUCERS_SHOWN, 0),
        writes_mode=transition.writes_mode,
        transaction_id=transition.transaction_id,
        digest_matched=step.digest_matched,
    )


def _writer(item: JsonValue) -> WriterUpdate:
    if not isinstance(item, dict):
        return WriterUpdate("(not a writer record)", None, json_preview(item, DIFF_VALUE_CHARS))
    task = item.get("task_id")
    return WriterUpdate(
        writer=cut_line(str(item.get("writer", "")), NAME_CHARS),
        task_id=cut_line(task, NAME_CHARS) if isinstance(task, str) else None,
        update=json_preview(item.get("update"), DIFF_VALUE_CHARS, indent=2),
    )


def notes_by_step(notes: Iterable[Transition]) -> Mapping[int | None, tuple[NoteRow, ...]]:
    """A run's rollbacks and rejections grouped by the sequence they followed."""
    grouped: dict[int | None, list[NoteRow]] = {}
    for note in notes:
        rows = grouped.setdefault(note.note_after_sequence, [])
        if len(rows) < MAX_NOTES_PER_STEP:
            rows.append(_note_row(note))
    return {sequence: tuple(rows) for sequence, rows in grouped.items()}


def _note_row(note: Transition) -> NoteRow:
    payload = parse_json(note.patch_json)
    rejection = note.note_kind == NOTE_REJECTION
    default = "no message" if rejection else "rolled back"
    return NoteRow(
        kind="rejected" if rejection else "rolled back",
        after_sequence=note.note_after_sequence,
        action=cut_line(note.action, NAME_CHARS),
        field=cut_line(note.note_field, NAME_CHARS) if note.note_field else None,
        message=cut_line(note.note_message or default, DIFF_VALUE_CHARS),
        payload=(
            json_preview(payload, DIFF_VALUE_CHARS, indent=2)
            if payload is not MISSING else cut_line(note.patch_json, DIFF_VALUE_CHARS)
        ),
        time_unix_nano=note.time_unix_nano,
    )


def store_runs_view(position: StorePosition | None, links: Links) -> StoreRunsView | None:
    """The header's "run 2 of 3 of store t-1", with its previous and next runs linked."""
    if position is None:
        return None
    return StoreRunsView(
        store_id=position.store_id,
        index=position.index,
        count=position.count,
        previous_href=_href(position.previous, links),
        previous_title=_title(position.previous),
        next_href=_href(position.next, links),
        next_title=_title(position.next),
    )


def framework_label(execution: Execution | None) -> str | None:
    """"langgraph 1.0.2, interrupted": the framework and how the producer says it ended."""
    if execution is None or execution.convention_version is None:
        return None
    parts = [execution.framework or "unknown framework"]
    if execution.framework_version:
        parts[0] += f" {execution.framework_version}"
    if execution.run_status:
        parts.append(execution.run_status)
    if execution.error_action:
        parts.append(f"in {execution.error_action}")
    return cut_line(", ".join(parts), NAME_CHARS)


def graph_snapshot(graph_json: str | None) -> str | None:
    """A convention graph (`{"nodes": [{"id", "name"}], "edges": [{"source", "target",
    "label"}]}`) in the snapshot form studio/render/graph.py lays out; None if it has no
    node list (the page then says the graph cannot be drawn)."""
    graph = _parsed(graph_json)
    listed = graph.get("nodes") if isinstance(graph, dict) else None
    if not isinstance(graph, dict) or not isinstance(listed, list):
        return None
    nodes = [
        {"nodeRuntimeId": node["id"], "nodeStructuralId": node["id"],
         "nodeLabel": str(node.get("name") or node["id"])}
        for node in listed
        if isinstance(node, dict) and isinstance(node.get("id"), str)
    ]
    raw_edges = graph.get("edges")
    edges = [
        {"tailNodeRuntimeId": edge.get("source"), "headNodeRuntimeId": edge.get("target"),
         "edgeConditionLabel": edge.get("label")}
        for edge in (raw_edges if isinstance(raw_edges, list) else [])
        if isinstance(edge, dict)
    ]
    return json.dumps({"nodes": nodes, "edges": edges})


def node_runs(steps: Iterable[Step], failed_action: str | None) -> dict[str, NodeRun]:
    """How often each node wrote a transition of the run (a writer of a superstep, or the
    transition's action), keyed by node id as `graph_snapshot` keys them."""
    counts: dict[str, int] = {}
    for step in steps:
        writes = _parsed(step.transition.writes)
        if isinstance(writes, list) and writes:
            names = [str(w.get("writer")) for w in writes if isinstance(w, dict)]
        else:
            names = step.transition.action.split(", ")
        for name in names:
            counts[name] = counts.get(name, 0) + 1
    runs = {name: NodeRun(count) for name, count in counts.items()}
    if failed_action:
        runs[failed_action] = NodeRun(runs.get(failed_action, NodeRun()).count + 1, failed=True)
    return runs


def _href(run: StoreRun | None, links: Links) -> str | None:
    return links.execution(run.run_id) if run is not None else None


def _title(run: StoreRun | None) -> str | None:
    if run is None:
        return None
    status = f", {run.run_status}" if run.run_status else ""
    return cut_line(f"{run.name}{status}", NAME_CHARS)


def _parsed(text: str | None) -> JsonValue:
    if text is None:
        return None
    parsed = parse_json(text)
    return None if parsed is MISSING else parsed
