"""The execution page: one run's header, verdict, state timeline, state, graph and spans.

Thin handlers: parse the request into a `Selection`, assemble the pure view models of
studio/render/ with what reads the store (relatives, spans, other traces' writers),
render. The HTML twin of /api/executions/{id}: every view is a URL (`?step=N`,
`&path=/a/b`, `&state=recorded`), so it works with JavaScript off and can be shared;
static/execution.js only adds keyboard stepping and swaps, asking for a part of the
page with `&partial=step` (the selected step's panel) or `&partial=explorer` (the
timeline with it), which read no graph, header or findings. Blocking work runs in a
worker thread, so one slow page never stalls the event loop (and the OTLP/HTTP
receiver on it).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from collector.model import Execution
from collector.producers.junjo import APPLICATION_RUN_SUFFIX
from collector.replay.history import Diagnostic, History
from collector.replay.jsondoc import resolve
from collector.replay.lineage import carrier_runs
from collector.store import Store
from collector.store.listing import ExecutionRow
from studio.inspect import Inspection, parent_and_children
from studio.links import Links
from studio.params import BadParameter, pointer_param
from studio.render.bounded import cut_line, cut_text
from studio.render.convention import (
    StoreRunsView,
    framework_label,
    store_runs_view,
)
from studio.render.convention import graph_snapshot as convention_graph
from studio.render.convention import node_runs as convention_node_runs
from studio.render.graph import GraphError, GraphView, layout, node_runs, spans_lost
from studio.render.list_return import ListReturn, list_return
from studio.render.outcome import Outcome, outcome
from studio.render.provenance import ProvenanceView, provenance_view
from studio.render.span import span_view
from studio.render.start_writer import start_writer
from studio.render.state_tree import StateView, state_view
from studio.render.store_runs import store_position
from studio.render.text import href
from studio.render.timeline import (
    StepDetail,
    Timeline,
    build_timeline,
    selected_sequence,
    step_detail,
)
from studio.render.verdict import verdict_sentences
from studio.render.waterfall import MESSAGE_CHARS, NAME_CHARS, Waterfall, build_waterfall
from studio.render.writers import Writers, foreign_carriers, other_traces
from studio.services import inspector_of, store_of
from studio.templating import templates

POLL_SECONDS: Final = 2


# --- view models ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Header:
    run_id: str
    title: str
    kind: str
    service: str
    status: str
    error_type: str | None
    error_message: str
    start_unix_nano: int
    duration_nano: int | None
    trace_id: str
    span_id: str | None
    store_id: str | None
    correlation_type: str | None
    correlation_id: str | None
    verdict: str
    verdict_text: tuple[str, ...]
    parent: ExecutionRow | None
    children: tuple[ExecutionRow, ...]
    received: int
    expected: int | None
    application_writes: ApplicationWrites | None
    # The parent's own ancestors, outermost first (the breadcrumb before the parent).
    ancestors: tuple[ExecutionRow, ...] = ()
    # The field index holds only part of this run's states (filters may miss it).
    index_truncated: bool = False
    # A failed or cancelled run: how it ended, and where (studio/render/outcome.py).
    outcome: Outcome | None = None
    # A convention run: its framework and how it ended, and its place among its
    # store's runs (studio/render/convention.py).
    framework: str | None = None
    store_runs: StoreRunsView | None = None


@dataclass(frozen=True, slots=True)
class ApplicationWrites:
    """The application store's steps while an agent ran, and where to read them: steps of
    the store's owning run, verified with its history, and *while* the agent ran (other
    writers included), not all of them its own."""

    store_id: str
    first: int
    last: int
    owner: ExecutionRow | None
    href: str


@dataclass(frozen=True, slots=True)
class Finding:
    code: str
    severity: str
    message: str
    sequence: int | None
    span_id: str | None
    href: str | None
    # The executions list of the other trace a finding names.
    trace_href: str | None
    # The run a foreign writer's span ran in, when known.
    writer_run_id: str | None = None
    writer_href: str | None = None


@dataclass(frozen=True, slots=True)
class ExecutionView:
    header: Header
    in_flight: bool
    timeline: Timeline
    step: StepDetail | None
    state: StateView
    provenance: ProvenanceView | None
    findings: tuple[Finding, ...]
    waterfall: Waterfall
    graph: GraphView | None
    graph_note: str | None
    base_href: str
    poll_seconds: int
    # The breadcrumb's way back to the list the user was reading (studio/render/list_return.py).
    back: ListReturn
    # In flight and still expecting its owner span: the page refreshes itself.
    polling: bool = False
    # In flight: when its trace last received a span; and that time again once nothing has
    # arrived for so long that the page calls it "no activity since" and stops refreshing.
    last_activity: int | None = None
    quiet_since: int | None = None


@dataclass(frozen=True, slots=True)
class ExplorerView:
    """The state explorer alone, under the names ExecutionView gives it, so the page
    and a partial render it with the same templates."""

    in_flight: bool
    timeline: Timeline
    step: StepDetail | None
    state: StateView
    provenance: ProvenanceView | None
    base_href: str


# What `?partial=` may ask for, and the template that renders it alone.
PARTIAL_TEMPLATES: Final = {
    "step": "_execution_step_partial.html",
    "explorer": "_execution_explorer.html",
}


@dataclass(frozen=True, slots=True)
class Selection:
    """What the query string asked for, already validated."""

    step: int | None
    pointer: str | None
    state: str  # "recorded", "replayed", or "" for the default
    partial: str = ""  # a key of PARTIAL_TEMPLATES, or "" for the whole page

    def shows_recorded(self, history: History) -> bool:
        """The recorded end state when asked, and by default for a run that is not verified.

        The replay of an unverified run cannot be trusted, so its page opens on the
        end state exactly as the producer recorded it.
        """
        if self.state == "recorded":
            return True
        default = self.state == "" and self.step is None
        return default and history.verdict in ("partial", "failed")


# --- handlers ------------------------------------------------------------------------


async def execution_page(request: Request) -> Response:
    """GET /executions/{run_id}: the whole page (or 404, or 400 for a bad parameter)."""
    run_id = request.path_params["run_id"]
    try:
        selection = _selection(request.query_params)
    except BadParameter as exc:
        return _error_page(request, 400, str(exc), run_id)
    if selection.partial:
        explorer = await run_in_threadpool(_build_explorer, request, run_id, selection)
        if explorer is None:
            return _missing(request, run_id)
        template = PARTIAL_TEMPLATES[selection.partial]
        return templates.TemplateResponse(request, template, {"view": explorer})
    view = await run_in_threadpool(_build, request, run_id, selection)
    if view is None:
        return _missing(request, run_id)
    return templates.TemplateResponse(request, "execution.html", {"view": view})


async def provenance_partial(request: Request) -> Response:
    """GET /executions/{run_id}/provenance?path=…&step=N: just the provenance panel."""
    run_id = request.path_params["run_id"]
    try:
        selection = _selection(request.query_params)
    except BadParameter as exc:
        return _error_page(request, 400, str(exc), run_id)
    inspection = await run_in_threadpool(inspector_of(request).inspect, run_id)
    if inspection is None:
        return _missing(request, run_id)
    links = Links.of(request)
    step = selected_sequence(inspection.history, selection.step)
    found = (
        None  # no field asked: the empty panel (Back to a page without one)
        if selection.pointer is None
        else await run_in_threadpool(_panel, request, inspection, links, step, selection.pointer)
    )
    return templates.TemplateResponse(
        request, "_execution_provenance.html", {"provenance": found}
    )


async def span_page(request: Request) -> Response:
    """GET /executions/{run_id}/spans/{span_id}: every attribute and event of one span,
    and the resource and scope it was sent under (studio/render/span.py)."""
    run_id, span_id = request.path_params["run_id"], request.path_params["span_id"]
    inspection = await run_in_threadpool(inspector_of(request).inspect, run_id)
    if inspection is None:
        return _missing(request, run_id)
    store = store_of(request)
    spans = await run_in_threadpool(store.spans_of_trace, inspection.trace_id)
    span = next((s for s in spans if s.span_id == span_id), None)
    if span is None:
        return _error_page(request, 404, f"no span {span_id!r} in this run's trace", run_id)
    resource = await run_in_threadpool(store.resource_of_span, inspection.trace_id, span_id)
    # The parent's own page when it is in this trace (a root span has none).
    parent_href = (
        Links.of(request).execution_span(run_id, span.parent_span_id)
        if any(s.span_id == span.parent_span_id for s in spans)
        else None
    )
    context = {
        "run_id": run_id, "span": span, "view": span_view(span, resource),
        "parent_href": parent_href,
    }
    return templates.TemplateResponse(request, "span.html", context)


# --- building the page ---------------------------------------------------------------


def _build(request: Request, run_id: str, selection: Selection) -> ExecutionView | None:
    inspection = inspector_of(request).inspect(run_id)
    if inspection is None:
        return None
    store = store_of(request)
    links = Links.of(request)
    base = links.execution(run_id)
    history = inspection.history
    owner_span = inspection.execution.span_id if inspection.execution else None
    waterfall = build_waterfall(store.spans_of_trace(inspection.trace_id), owner_span)
    execution = inspection.execution
    # Read once: the header lists the children and the graph links its subflows to them.
    parent, children = (
        parent_and_children(store, run_id, execution.parent_run_id)
        if execution is not None
        else (None, [])
    )
    graph, graph_note = _graph(inspection, children, waterfall, links)
    writers = _writers(store, history, inspection.trace_id, waterfall)
    explorer = _explorer(request, inspection, selection, links, writers)
    quiet = _quiet(inspection)
    flight = inspection.in_flight if execution is None else None
    return ExecutionView(
        header=_header(store, inspection, waterfall, links, quiet, parent, children),
        in_flight=explorer.in_flight,
        timeline=explorer.timeline,
        step=explorer.step,
        state=explorer.state,
        provenance=explorer.provenance,
        findings=tuple(
            _finding(d, links, base, waterfall, writers, inspection.trace_id)
            for d in history.diagnostics
        ),
        waterfall=waterfall,
        graph=graph,
        graph_note=graph_note,
        base_href=base,
        poll_seconds=POLL_SECONDS,
        polling=inspection.execution is None and not quiet,
        back=list_return(request),
        last_activity=flight.latest_activity_unix_nano if flight is not None else None,
        quiet_since=flight.latest_activity_unix_nano if flight is not None and quiet else None,
    )


def _build_explorer(
    request: Request, run_id: str, selection: Selection
) -> ExplorerView | None:
    """The explorer alone: the spans are read (they name each step's writer), the graph,
    the header's relatives and the findings are not."""
    inspection = inspector_of(request).inspect(run_id)
    if inspection is None:
        return None
    store = store_of(request)
    owner_span = inspection.execution.span_id if inspection.execution else None
    waterfall = build_waterfall(store.spans_of_trace(inspection.trace_id), owner_span)
    writers = _writers(store, inspection.history, inspection.trace_id, waterfall)
    return _explorer(request, inspection, selection, Links.of(request), writers)


def _explorer(
    request: Request,
    inspection: Inspection,
    selection: Selection,
    links: Links,
    writers: Writers,
) -> ExplorerView:
    history = inspection.history
    base = links.execution(inspection.run_id)
    selected = selected_sequence(history, selection.step)
    return ExplorerView(
        in_flight=inspection.execution is None,
        timeline=build_timeline(
            history, links, base, selected, selection.step, writers, selection.pointer
        ),
        step=step_detail(history, selected, links, writers, inspection.run_id),
        state=state_view(
            inspection, links, base, selected, selection.pointer,
            recorded=selection.shows_recorded(history),
        ),
        provenance=(
            _provenance(request, inspection, links, selected, selection.pointer, writers)
            if selection.pointer is not None
            else None
        ),
        base_href=base,
    )


def _panel(
    request: Request, inspection: Inspection, links: Links, step: int, pointer: str
) -> ProvenanceView:
    """The provenance panel alone, its writes' spans linked as the whole page links them."""
    store = store_of(request)
    owner_span = inspection.execution.span_id if inspection.execution else None
    waterfall = build_waterfall(store.spans_of_trace(inspection.trace_id), owner_span)
    writers = _writers(store, inspection.history, inspection.trace_id, waterfall)
    return _provenance(request, inspection, links, step, pointer, writers)


def _provenance(
    request: Request,
    inspection: Inspection,
    links: Links,
    step: int,
    pointer: str,
    writers: Writers,
) -> ProvenanceView:
    """The provenance panel; for a value from a shared store's start state, who set it.

    The earlier runs are read only then, so a run on a store of its own pays nothing.
    """
    base = links.execution(inspection.run_id)
    view = provenance_view(inspection, links, base, step, pointer, writers)
    if view.store_href is None or not view.from_start:
        return view
    store = store_of(request)
    writer = start_writer(
        inspection, pointer, store.store_run_before, inspector_of(request).inspect,
        store.store_transitions_between, links,
    )
    return dataclasses.replace(view, start_writer=writer)


def _writers(store: Store, history: History, trace_id: str, waterfall: Waterfall) -> Writers:
    """Who wrote the steps: this trace's runs from the waterfall, others' from their traces.

    Only traces that carried a step are read (spans without their bytes), so a
    run whose store nobody else wrote pays nothing.
    """
    carriers = foreign_carriers(history, trace_id)
    elsewhere = (
        carrier_runs(carriers, store.evidence_spans_for(other_traces(carriers), ()))
        if carriers
        else {}
    )
    return Writers.of(trace_id, waterfall, elsewhere)


def _quiet(inspection: Inspection) -> bool:
    """Whether an in-flight run's trace stopped receiving evidence long ago (by this
    server's clock): its page then says "no activity since" and stops refreshing."""
    flight = inspection.in_flight
    if inspection.execution is not None or flight is None:
        return False
    return flight.is_quiet(time.time_ns())


def _selection(params: Mapping[str, str]) -> Selection:
    text = params.get("step", "").strip()
    step: int | None = None
    if text:
        try:
            step = int(text)
        except ValueError as exc:
            raise BadParameter("step", "must be a whole number (a transition sequence)") from exc
    pointer: str | None = None
    if "path" in params:
        try:
            pointer = pointer_param(params["path"])
            resolve(None, pointer)  # raises ValueError for a malformed pointer
        except ValueError as exc:
            raise BadParameter("path", str(exc)) from exc
    state = params.get("state", "")
    if state not in ("", "recorded", "replayed"):
        raise BadParameter("state", "must be 'recorded' or 'replayed'")
    partial = params.get("partial", "")
    if partial and partial not in PARTIAL_TEMPLATES:
        raise BadParameter("partial", f"must be one of {', '.join(sorted(PARTIAL_TEMPLATES))}")
    return Selection(step, pointer, state, partial)


# --- header and findings --------------------------------------------------------------


def _header(
    store: Store,
    inspection: Inspection,
    waterfall: Waterfall,
    links: Links,
    quiet: bool,
    parent: ExecutionRow | None,
    children: Sequence[ExecutionRow],
) -> Header:
    history = inspection.history
    execution, row = inspection.execution, inspection.row
    expected = None
    if history.end_sequence is not None:
        expected = history.end_sequence - history.start_sequence
    verdict_text = tuple(verdict_sentences(history, waterfall, quiet=quiet))
    if execution is None or row is None:
        flight = inspection.in_flight
        assert flight is not None
        return Header(
            run_id=inspection.run_id, title="Run in flight", kind="workflow",
            service=flight.service, status="in flight", error_type=None, error_message="",
            start_unix_nano=flight.first_unix_nano,
            duration_nano=flight.last_unix_nano - flight.first_unix_nano,
            trace_id=flight.trace_id, span_id=None, store_id=None,
            correlation_type=None, correlation_id=None, verdict="in_flight",
            verdict_text=verdict_text, parent=None, children=(),
            received=len(history.steps), expected=None, application_writes=None,
        )
    return Header(
        run_id=inspection.run_id, title=cut_line(execution.name, NAME_CHARS),
        kind=execution.kind, service=execution.service, status=execution.status,
        error_type=execution.error_type and cut_line(execution.error_type, NAME_CHARS),
        error_message=cut_text(execution.status_message, MESSAGE_CHARS),
        start_unix_nano=execution.start_unix_nano,
        duration_nano=execution.end_unix_nano - execution.start_unix_nano,
        trace_id=execution.trace_id, span_id=execution.span_id, store_id=execution.store_id,
        correlation_type=execution.correlation_type, correlation_id=execution.correlation_id,
        verdict=history.verdict, verdict_text=verdict_text, parent=parent,
        children=tuple(children),
        received=len(history.steps), expected=expected,
        application_writes=_application_writes(execution, parent, links),
        ancestors=_ancestors(store, inspection.run_id, parent),
        index_truncated=row.index_truncated,
        outcome=outcome(
            execution.status, execution.error_type, execution.status_message,
            execution.cancelled_reason, waterfall, links,
        ),
        framework=framework_label(execution),
        store_runs=_store_runs(store, execution, links),
    )


def _store_runs(store: Store, execution: Execution, links: Links) -> StoreRunsView | None:
    """A convention run's place among its store's runs (a thread's interrupts and resumes)."""
    if execution.convention_version is None or not execution.store_id:
        return None
    runs = store.store_runs(execution.store_id)
    return store_runs_view(
        store_position(execution.store_id, runs, execution.run_id), links
    )


# Bounds the breadcrumb's walk: Junjo nests a few levels, and corrupt links may loop.
MAX_ANCESTORS = 16


def _ancestors(
    store: Store, run_id: str, parent: ExecutionRow | None
) -> tuple[ExecutionRow, ...]:
    """The parent's ancestors, outermost first, stopping at a loop or MAX_ANCESTORS."""
    found: list[ExecutionRow] = []
    seen = {run_id, parent.run_id} if parent else {run_id}
    row = parent
    while row is not None and row.parent_run_id and len(found) < MAX_ANCESTORS:
        if row.parent_run_id in seen:
            break
        seen.add(row.parent_run_id)
        row = store.execution_row(row.parent_run_id)
        if row is not None:
            found.append(row)
    return tuple(reversed(found))


def _application_writes(
    execution: Execution, parent: ExecutionRow | None, links: Links
) -> ApplicationWrites | None:
    store_id = execution.application_store_id
    start, end = execution.application_transition_start, execution.application_transition_end
    if store_id is None or start is None or end is None or end <= start:
        return None
    owner = parent if parent is not None and parent.store_id == store_id else None
    # No run above owns the store: its history is the agent's application-store run's.
    run_id = owner.run_id if owner is not None else execution.run_id + APPLICATION_RUN_SUFFIX
    where = href(links.execution(run_id), step=start + 1)
    return ApplicationWrites(store_id, start + 1, end, owner, where)


def _finding(
    diagnostic: Diagnostic,
    links: Links,
    base: str,
    waterfall: Waterfall,
    writers: Writers,
    trace_id: str,
) -> Finding:
    target: str | None = None
    if diagnostic.sequence is not None:
        target = href(base, step=diagnostic.sequence)
    elif diagnostic.span_id is not None and waterfall.row(diagnostic.span_id) is not None:
        target = f"#span-{diagnostic.span_id}"
    trace_href = None
    if diagnostic.trace_id is not None:
        trace_href = links.executions(trace=diagnostic.trace_id)
    writer = None
    if diagnostic.code == "foreign_writer" and diagnostic.span_id is not None:
        writer = writers.run_of(diagnostic.trace_id or trace_id, diagnostic.span_id)
    return Finding(
        diagnostic.code, diagnostic.severity, cut_text(diagnostic.message, MESSAGE_CHARS),
        diagnostic.sequence, diagnostic.span_id, target, trace_href,
        writer, links.execution(writer) if writer else None,
    )


def _graph(
    inspection: Inspection, children: Sequence[ExecutionRow], waterfall: Waterfall, links: Links
) -> tuple[GraphView | None, str | None]:
    execution = inspection.execution
    if execution is None:
        return None, "The graph arrives with the workflow span."
    if not execution.graph_snapshot:
        return None, "This run recorded no execution graph."
    subflow_runs: dict[str, str] = {}
    for child in children:
        # Keyed as graph.node_runs keys a subflow's span.
        key = child.definition_id if child.kind == "subflow" else None
        key = key or child.structural_id
        if key:
            subflow_runs.setdefault(key, links.execution(child.run_id))
    snapshot: str | None = execution.graph_snapshot
    runs = node_runs(waterfall.rows)
    if execution.convention_version is not None:
        # A convention run's graph names nodes by id, and its steps say who ran.
        snapshot = convention_graph(snapshot)
        runs = convention_node_runs(inspection.history.steps, execution.error_action)
    if snapshot is None:
        return None, "The execution graph cannot be drawn: it has no node list."
    try:
        graph = layout(snapshot, runs, subflow_runs)
    except GraphError as exc:
        return None, f"The execution graph cannot be drawn: {exc}."
    # A node whose span never arrived did not necessarily not run (if every node
    # was seen running, there is nothing to qualify).
    incomplete = graph.executed < graph.total and (
        bool(inspection.history.missing_sequences) or spans_lost(waterfall.rows, runs)
    )
    return dataclasses.replace(graph, incomplete=incomplete), None


# --- small helpers -------------------------------------------------------------------------


def _missing(request: Request, run_id: str) -> Response:
    return _error_page(request, 404, f"No execution with id {run_id!r} has arrived.", run_id)


def _error_page(request: Request, status: int, message: str, run_id: str) -> Response:
    context: dict[str, Any] = {"status": status, "message": message, "run_id": run_id}
    return templates.TemplateResponse(
        request, "_execution_missing.html", context, status_code=status
    )
