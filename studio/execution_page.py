"""The execution page: one run's header, verdict, state timeline, state, graph and spans.

Thin handlers over pure view-model builders. The HTML twin of
/api/executions/{id} (+ /timeline, /state, /provenance): every view is a URL
(`?step=N` selects a transition, `&path=/a/b` opens a field's provenance,
`&state=recorded` shows the producer's recorded end state), so it works with
JavaScript off and can be shared by copying the address. static/execution.js
only adds keyboard stepping and in-place swaps of the same server-rendered HTML.

Cost: replaying is cached by the Inspector; a page renders a window of
TIMELINE_WINDOW transitions around the selected one and caps how many children
of one JSON container are drawn, so a 10,000-transition run on a large state
renders in a bounded time. The blocking work runs in a worker thread so one
slow page never stalls the event loop (and the OTLP/HTTP receiver on it).
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from collector.decode import span_details
from collector.history import (
    MISSING,
    Diagnostic,
    History,
    JsonValue,
    Missing,
    StateUnavailableError,
    Step,
    provenance,
    resolve,
)
from collector.store import Store
from collector.store.listing import ExecutionRow
from studio.api import pointer_param, store_of
from studio.graph import GraphError, GraphView, layout, node_runs
from studio.inspect import Inspection, Inspector
from studio.params import BadParameter
from studio.templating import templates
from studio.waterfall import Waterfall, attribute_text, build_waterfall

TIMELINE_WINDOW: Final = 200
TREE_CHILDREN_SHOWN: Final = 100
STRING_PREVIEW_CHARS: Final = 200
DIFF_VALUE_CHARS: Final = 4000
PATHS_PER_ROW: Final = 3
POLL_SECONDS: Final = 2

TokenKind: TypeAlias = Literal["open", "close", "leaf", "more"]


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
    verdict: str
    verdict_text: tuple[str, ...]
    parent: ExecutionRow | None
    children: tuple[ExecutionRow, ...]
    received: int
    expected: int | None


@dataclass(frozen=True, slots=True)
class TimelineRow:
    sequence: int
    href: str
    offset_nano: int
    span_name: str
    span_id: str
    action: str
    paths: tuple[str, ...]
    more_paths: int
    verified: bool
    applied: bool
    foreign: bool
    selected: bool


@dataclass(frozen=True, slots=True)
class Timeline:
    rows: tuple[TimelineRow, ...]
    total: int
    first_index: int
    start_sequence: int
    last_sequence: int
    selected: int
    start_href: str
    start_selected: bool
    prev_href: str | None
    next_href: str | None
    earlier_href: str | None
    later_href: str | None
    last_href: str | None


@dataclass(frozen=True, slots=True)
class Change:
    op: str
    path: str
    from_path: str | None
    before: str | None
    after: str | None


@dataclass(frozen=True, slots=True)
class StepDetail:
    sequence: int
    action: str
    span_name: str
    span_id: str
    store_id: str
    revision_before: int | None
    revision_after: int | None
    time_unix_nano: int
    verified: bool
    applied: bool
    foreign: bool
    patch: str
    changes: tuple[Change, ...]


@dataclass(frozen=True, slots=True)
class Token:
    """One piece of the flattened JSON tree; the template turns these into nested <details>."""

    kind: TokenKind
    key: str
    pointer: str
    href: str
    summary: str
    value: str
    full: str | None
    value_type: str
    changed: bool
    expanded: bool


@dataclass(frozen=True, slots=True)
class StateView:
    available: bool
    reason: str
    sequence: int
    verified: bool
    recorded: bool
    tokens: tuple[Token, ...]
    json_href: str
    recorded_href: str | None
    replayed_href: str | None


@dataclass(frozen=True, slots=True)
class Write:
    sequence: int
    href: str
    op: str
    op_path: str
    relation: str
    before: str | None
    after: str | None
    action: str
    span_name: str
    verified: bool
    last: bool


@dataclass(frozen=True, slots=True)
class ProvenanceView:
    pointer: str
    error: str | None
    writes: tuple[Write, ...]
    last_writer: Write | None
    close_href: str
    json_href: str


@dataclass(frozen=True, slots=True)
class Finding:
    code: str
    severity: str
    message: str
    sequence: int | None
    span_id: str | None
    href: str | None


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


@dataclass(frozen=True, slots=True)
class Selection:
    """What the query string asked for, already validated."""

    step: int | None
    pointer: str | None
    state: str  # "recorded", "replayed", or "" for the default

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
    inspection = await run_in_threadpool(_inspector(request).inspect, run_id)
    if inspection is None:
        return _missing(request, run_id)
    base = request.url_for("execution", run_id=run_id).path
    step = selection.step if selection.step is not None else inspection.history.last_sequence
    found = await run_in_threadpool(
        _provenance_view, inspection, base, step, selection.pointer or ""
    )
    return templates.TemplateResponse(
        request, "_execution_provenance.html", {"provenance": found}
    )


async def span_page(request: Request) -> Response:
    """GET /executions/{run_id}/spans/{span_id}: every attribute and event of one span."""
    run_id, span_id = request.path_params["run_id"], request.path_params["span_id"]
    inspection = await run_in_threadpool(_inspector(request).inspect, run_id)
    if inspection is None:
        return _missing(request, run_id)
    spans = await run_in_threadpool(store_of(request).spans_of_trace, inspection.trace_id)
    span = next((s for s in spans if s.span_id == span_id), None)
    if span is None:
        return _error_page(request, 404, f"no span {span_id!r} in this run's trace", run_id)
    details = span_details(span.raw)
    context = {
        "run_id": run_id,
        "span": span,
        "attributes": sorted(
            (key, attribute_text(value)) for key, value in details["attributes"].items()
        ),
        "events": [
            {
                "name": event["name"],
                "offset_nano": max(event["time_unix_nano"] - span.start, 0),
                "attributes": sorted(
                    (key, attribute_text(value)) for key, value in event["attributes"].items()
                ),
            }
            for event in details["events"]
        ],
        "partial": _wants_partial(request),
    }
    return templates.TemplateResponse(request, "_execution_span.html", context)


# --- building the page ---------------------------------------------------------------


def _build(request: Request, run_id: str, selection: Selection) -> ExecutionView | None:
    inspection = _inspector(request).inspect(run_id)
    if inspection is None:
        return None
    store = store_of(request)
    base = request.url_for("execution", run_id=run_id).path
    history = inspection.history
    owner_span = inspection.execution.span_id if inspection.execution else None
    waterfall = build_waterfall(store.spans_of_trace(inspection.trace_id), owner_span)
    selected = _selected_sequence(history, selection.step)
    graph, graph_note = _graph(store, inspection, waterfall, request)
    return ExecutionView(
        header=_header(store, inspection, waterfall),
        in_flight=inspection.execution is None,
        timeline=_timeline(history, base, selected),
        step=_step_detail(history, selected),
        state=_state_view(inspection, base, selected, selection),
        provenance=(
            _provenance_view(inspection, base, selected, selection.pointer)
            if selection.pointer is not None
            else None
        ),
        findings=tuple(_finding(d, base, waterfall) for d in history.diagnostics),
        waterfall=waterfall,
        graph=graph,
        graph_note=graph_note,
        base_href=base,
        poll_seconds=POLL_SECONDS,
    )


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
    return Selection(step, pointer, state)


def _selected_sequence(history: History, asked: int | None) -> int:
    """The asked step snapped to a received one (or the start); default the last step."""
    sequences = [step.sequence for step in history.steps]
    if asked is None:
        return sequences[-1] if sequences else history.start_sequence
    index = bisect_right(sequences, asked) - 1
    return sequences[index] if index >= 0 else history.start_sequence


def href(base: str, **params: object) -> str:
    """A page URL with these query parameters (None values left out)."""
    query = urlencode({k: str(v) for k, v in params.items() if v is not None})
    return f"{base}?{query}" if query else base


# --- header and verdict ----------------------------------------------------------------


def _header(store: Store, inspection: Inspection, waterfall: Waterfall) -> Header:
    history = inspection.history
    execution, row = inspection.execution, inspection.row
    expected = None
    if history.end_sequence is not None:
        expected = history.end_sequence - history.start_sequence
    verdict_text = tuple(verdict_sentences(history, waterfall))
    if execution is None or row is None:
        flight = inspection.in_flight
        assert flight is not None
        return Header(
            run_id=inspection.run_id, title="Run in flight", kind="workflow",
            service=flight.service, status="in flight", error_type=None, error_message="",
            start_unix_nano=flight.first_unix_nano,
            duration_nano=flight.last_unix_nano - flight.first_unix_nano,
            trace_id=flight.trace_id, span_id=None, store_id=None, verdict="in_flight",
            verdict_text=verdict_text, parent=None, children=(),
            received=len(history.steps), expected=None,
        )
    parent = store.execution_row(execution.parent_run_id) if execution.parent_run_id else None
    return Header(
        run_id=inspection.run_id, title=execution.name, kind=execution.kind,
        service=execution.service, status=execution.status,
        error_type=execution.error_type, error_message=execution.status_message,
        start_unix_nano=execution.start_unix_nano,
        duration_nano=execution.end_unix_nano - execution.start_unix_nano,
        trace_id=execution.trace_id, span_id=execution.span_id, store_id=execution.store_id,
        verdict=history.verdict, verdict_text=verdict_text, parent=parent,
        children=tuple(store.child_executions(inspection.run_id)),
        received=len(history.steps), expected=expected,
    )


def verdict_sentences(history: History, waterfall: Waterfall) -> list[str]:
    """The verdict in plain words: what is missing or inconsistent, what can be trusted."""
    steps = history.steps
    if history.verdict == "in_flight":
        return [
            f"In flight: {len(steps):,} transition(s) have arrived, but the workflow span that "
            "owns them has not (Junjo exports it last, when the run ends). States will be "
            "rebuilt and checked when it arrives; this page refreshes itself until then."
        ]
    if history.verdict == "verified":
        first = steps[0].sequence if steps else history.start_sequence
        last = steps[-1].sequence if steps else history.start_sequence
        return [
            f"Verified: all {len(steps):,} transitions (sequences {first:,}-{last:,}) arrived, "
            "every patch applied, and the replayed end state equals the recorded end state. "
            "Every state shown can be trusted."
        ]
    if history.verdict == "not_applicable":
        reason = next((d.message for d in history.diagnostics), "")
        return ["No state history to check: this run recorded no store state." + (
            f" {reason}" if reason else ""
        )]
    sentences = _missing_sentences(history, waterfall)
    sentences.append(_trust_sentence(history))
    if history.recorded_end is not MISSING:
        mismatch = any(d.code == "end_state_mismatch" for d in history.diagnostics)
        sentences.append(
            "The recorded end state is shown as recorded"
            + (", and it differs from the replayed end." if mismatch else ".")
        )
    if history.verdict == "failed":
        first_error = next((d for d in history.diagnostics if d.severity == "error"), None)
        if first_error is not None:
            sentences.append(first_error.message)
    return sentences


def _missing_sentences(history: History, waterfall: Waterfall) -> list[str]:
    sentences: list[str] = []
    gaps = _gaps(history)
    missing = sum(last - first + 1 for first, last in gaps)
    if gaps:
        shown = ", ".join(_range(first, last) for first, last in gaps[:3])
        more = f" and {len(gaps) - 3} more range(s)" if len(gaps) > 3 else ""
        sentences.append(
            f"{missing:,} of {missing + len(history.steps):,} transitions never arrived "
            f"(steps {shown}{more}), so no state from the first gap on can be verified."
        )
    dropping = [row for row in waterfall.rows if row.dropped_events]
    if dropping:
        dropped = sum(row.dropped_events for row in dropping)
        names = ", ".join(f"'{row.name}'" for row in dropping[:3])
        sentences.append(
            f"{dropped:,} events were dropped by the OpenTelemetry SDK's 128-events-per-span "
            f"limit (on {names}); raise OTEL_SPAN_EVENT_COUNT_LIMIT in the application."
        )
    return sentences


def _trust_sentence(history: History) -> str:
    verified = [step.sequence for step in history.steps if step.verified]
    unverified = next((step.sequence for step in history.steps if not step.verified), None)
    start_ok = history.has_states and history.verified_at(history.start_sequence)
    if verified:
        trusted = f"States up to step {verified[-1]:,} are verified"
    elif start_ok:
        trusted = f"Only the start state (step {history.start_sequence:,}) is verified"
    else:
        trusted = "No state can be verified"
    if unverified is None:
        return trusted + "."
    if not history.has_states:
        return f"{trusted}; later states cannot be rebuilt at all."
    return f"{trusted}; states from step {unverified:,} on are replayed but unverified."


def _gaps(history: History) -> list[tuple[int, int]]:
    gaps: list[tuple[int, int]] = []
    expected = history.start_sequence + 1
    for step in history.steps:
        if step.sequence > expected:
            gaps.append((expected, step.sequence - 1))
        expected = step.sequence + 1
    end = history.end_sequence
    if end is not None and expected <= end and history.execution is not None:
        gaps.append((expected, end))
    return gaps


def _range(first: int, last: int) -> str:
    return f"{first:,}" if first == last else f"{first:,}-{last:,}"


# --- timeline and the selected step ------------------------------------------------------


def _timeline(history: History, base: str, selected: int) -> Timeline:
    steps = history.steps
    sequences = [step.sequence for step in steps]
    index = bisect_right(sequences, selected) - 1  # -1: the start state is selected
    first = min(max(index - TIMELINE_WINDOW // 2, 0), max(len(steps) - TIMELINE_WINDOW, 0))
    window = steps[first : first + TIMELINE_WINDOW]
    origin = history.execution.start_unix_nano if history.execution else _first_time(steps)

    def at(position: int) -> str | None:
        if position < -1 or position >= len(steps) or position == index:
            return None
        sequence = history.start_sequence if position == -1 else sequences[position]
        return href(base, step=sequence)

    return Timeline(
        rows=tuple(_timeline_row(step, base, origin, step.sequence == selected) for step in window),
        total=len(steps),
        first_index=first,
        start_sequence=history.start_sequence,
        last_sequence=sequences[-1] if sequences else history.start_sequence,
        selected=selected,
        start_href=href(base, step=history.start_sequence),
        start_selected=index == -1,
        prev_href=at(index - 1),
        next_href=at(index + 1),
        earlier_href=at(max(index - TIMELINE_WINDOW, -1)) if first > 0 else None,
        later_href=(
            at(min(index + TIMELINE_WINDOW, len(steps) - 1))
            if first + TIMELINE_WINDOW < len(steps)
            else None
        ),
        last_href=at(len(steps) - 1),
    )


def _first_time(steps: Sequence[Step]) -> int:
    return min((step.transition.time_unix_nano for step in steps), default=0)


def _timeline_row(step: Step, base: str, origin: int, selected: bool) -> TimelineRow:
    transition = step.transition
    paths = step.changed_paths
    return TimelineRow(
        sequence=step.sequence,
        href=href(base, step=step.sequence),
        offset_nano=max(transition.time_unix_nano - origin, 0),
        span_name=transition.span_name,
        span_id=transition.span_id,
        action=transition.action,
        paths=paths[:PATHS_PER_ROW],
        more_paths=max(len(paths) - PATHS_PER_ROW, 0),
        verified=step.verified,
        applied=step.applied,
        foreign=step.foreign,
        selected=selected,
    )


def _step_detail(history: History, sequence: int) -> StepDetail | None:
    try:
        step = history.step(sequence)
    except KeyError:
        return None
    changes: tuple[Change, ...] = ()
    if history.has_states:
        changes = tuple(
            Change(c.op, c.path, c.from_path, _json_text(c.before), _json_text(c.after))
            for c in history.changes(sequence)
        )
    transition = step.transition
    return StepDetail(
        sequence=step.sequence,
        action=transition.action,
        span_name=transition.span_name,
        span_id=transition.span_id,
        store_id=transition.store_id,
        revision_before=transition.revision_before,
        revision_after=transition.revision_after,
        time_unix_nano=transition.time_unix_nano,
        verified=step.verified,
        applied=step.applied,
        foreign=step.foreign,
        patch=_pretty_patch(transition.patch_json),
        changes=changes,
    )


def _pretty_patch(text: str) -> str:
    try:
        return _cut(json.dumps(json.loads(text), indent=2, ensure_ascii=False))
    except ValueError:
        return _cut(text)


def _json_text(value: JsonValue | Missing) -> str | None:
    if isinstance(value, Missing):
        return None
    return _cut(json.dumps(value, indent=2, ensure_ascii=False))


def _cut(text: str) -> str:
    if len(text) <= DIFF_VALUE_CHARS:
        return text
    return f"{text[:DIFF_VALUE_CHARS]}\n… ({len(text) - DIFF_VALUE_CHARS:,} more characters)"


# --- state tree --------------------------------------------------------------------------


def _state_view(
    inspection: Inspection, base: str, sequence: int, selection: Selection
) -> StateView:
    history = inspection.history
    api = f"/api/executions/{inspection.run_id}/state"
    json_href = href(api, sequence=sequence)
    recorded_end = history.recorded_end
    has_recorded = not isinstance(recorded_end, Missing)
    if selection.shows_recorded(history) and not isinstance(recorded_end, Missing):
        changed = _changed_at(history, sequence)
        tokens = tree_tokens(
            recorded_end, base, sequence, changed, selection.pointer, state="recorded"
        )
        # The recorded end state is served as `end` of the timeline JSON.
        return StateView(
            True, "", sequence, False, True, tokens,
            f"/api/executions/{inspection.run_id}/timeline",
            None, href(base, step=sequence, state="replayed"),
        )
    recorded_href = href(base, step=sequence, state="recorded") if has_recorded else None
    if not history.has_states:
        reason = (
            "States will be rebuilt when the workflow span arrives."
            if inspection.execution is None
            else "No state can be rebuilt: the start state is missing, withheld or unreadable."
        )
        return StateView(False, reason, sequence, False, False, (), json_href, recorded_href, None)
    try:
        state = history.state_at(sequence)
        verified = history.verified_at(sequence)
    except StateUnavailableError as exc:
        return StateView(False, str(exc), sequence, False, False, (), json_href, None, None)
    changed = _changed_at(history, sequence)
    tokens = tree_tokens(state, base, sequence, changed, selection.pointer)
    return StateView(True, "", sequence, verified, False, tokens, json_href, recorded_href, None)


def _changed_at(history: History, sequence: int) -> frozenset[str]:
    try:
        return frozenset(history.step(sequence).changed_paths)
    except KeyError:
        return frozenset()


def tree_tokens(
    value: JsonValue,
    base: str,
    sequence: int,
    changed: frozenset[str],
    selected: str | None,
    *,
    state: str | None = None,
) -> tuple[Token, ...]:
    """The JSON value flattened into open/leaf/close tokens for nested <details>.

    Containers along a changed or selected path start open (so the change is in
    view); others below the first level start closed. A container shows its
    first TREE_CHILDREN_SHOWN children plus any on a changed or selected path,
    with a "more" token for each run of children left out.
    """
    focus = {*changed, *([selected] if selected else [])}
    tokens: list[Token] = []
    _emit(tokens, "state", (), value, _Context(base, sequence, changed, focus, state))
    return tuple(tokens)


@dataclass(frozen=True, slots=True)
class _Context:
    base: str
    sequence: int
    changed: frozenset[str]
    focus: set[str]
    state: str | None


def _emit(
    tokens: list[Token], key: str, parts: tuple[str, ...], value: JsonValue, ctx: _Context
) -> None:
    pointer = _pointer(parts)
    link = href(ctx.base, step=ctx.sequence, path=pointer, state=ctx.state) + "#provenance"
    changed = pointer in ctx.changed
    if not isinstance(value, dict | list):
        text, full = _leaf_text(value)
        tokens.append(
            Token("leaf", key, pointer, link, "", text, full, _type(value), changed, False)
        )
        return
    children: list[tuple[str, JsonValue]] = (
        list(value.items()) if isinstance(value, dict) else [(str(i), v) for i, v in
                                                             enumerate(value)]
    )
    on_focus = any(f == pointer or f.startswith(pointer + "/") for f in ctx.focus)
    expanded = len(parts) < 1 or on_focus
    summary = f"{{{len(children)} keys}}" if isinstance(value, dict) else f"[{len(children)}]"
    tokens.append(
        Token("open", key, pointer, link, summary, "", None, _type(value), changed, expanded)
    )
    shown = _shown_children(children, pointer, ctx.focus)
    previous = -1
    for position in shown:
        if position > previous + 1:
            tokens.append(_more(position - previous - 1))
        child_key, child = children[position]
        _emit(tokens, child_key, (*parts, child_key), child, ctx)
        previous = position
    if previous < len(children) - 1:
        tokens.append(_more(len(children) - previous - 1))
    tokens.append(Token("close", key, pointer, "", "", "", None, "", False, False))


def _shown_children(
    children: Sequence[tuple[str, JsonValue]], pointer: str, focus: Iterable[str]
) -> list[int]:
    if len(children) <= TREE_CHILDREN_SHOWN:
        return list(range(len(children)))
    wanted = set(range(TREE_CHILDREN_SHOWN))
    positions = {key: position for position, (key, _) in enumerate(children)}
    prefix = pointer + "/"
    for target in focus:
        if target.startswith(prefix):
            head = _unescape(target[len(prefix) :].split("/", 1)[0])
            if head in positions:
                wanted.add(positions[head])
    return sorted(wanted)


def _more(count: int) -> Token:
    return Token("more", "", "", "", f"{count:,} more", "", None, "", False, False)


def _leaf_text(value: JsonValue) -> tuple[str, str | None]:
    text = json.dumps(value, ensure_ascii=False)
    if len(text) <= STRING_PREVIEW_CHARS:
        return text, None
    return text[:STRING_PREVIEW_CHARS] + "…", text


def _type(value: JsonValue) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "object" if isinstance(value, dict) else "array"


def _pointer(parts: Sequence[str]) -> str:
    return "".join("/" + part.replace("~", "~0").replace("/", "~1") for part in parts)


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


# --- provenance --------------------------------------------------------------------------


def _provenance_view(
    inspection: Inspection, base: str, sequence: int, pointer: str
) -> ProvenanceView:
    api = href(f"/api/executions/{inspection.run_id}/provenance", path=pointer)
    close = href(base, step=sequence)
    try:
        found = provenance(inspection.history, pointer)
    except ValueError as exc:
        return ProvenanceView(pointer, str(exc), (), None, close, api)
    last = found.last_writer
    writes = tuple(
        Write(
            sequence=e.sequence,
            href=href(base, step=e.sequence, path=pointer) + "#provenance",
            op=e.op,
            op_path=e.op_path,
            relation=e.relation,
            before=_json_text(e.before),
            after=_json_text(e.after),
            action=e.action,
            span_name=e.span_name,
            verified=e.verified,
            last=e is last,
        )
        for e in found.entries
    )
    last_write = next((w for w in writes if w.last), None)
    return ProvenanceView(pointer, None, writes, last_write, close, api)


# --- integrity, graph ----------------------------------------------------------------------


def _finding(diagnostic: Diagnostic, base: str, waterfall: Waterfall) -> Finding:
    target: str | None = None
    if diagnostic.sequence is not None:
        target = href(base, step=diagnostic.sequence)
    elif diagnostic.span_id is not None and waterfall.row(diagnostic.span_id) is not None:
        target = f"#span-{diagnostic.span_id}"
    return Finding(
        diagnostic.code, diagnostic.severity, diagnostic.message,
        diagnostic.sequence, diagnostic.span_id, target,
    )


def _graph(
    store: Store, inspection: Inspection, waterfall: Waterfall, request: Request
) -> tuple[GraphView | None, str | None]:
    execution = inspection.execution
    if execution is None:
        return None, "The graph arrives with the workflow span."
    if not execution.graph_snapshot:
        return None, "This run recorded no execution graph."
    links: dict[str, str] = {}
    for child in store.child_executions(inspection.run_id):
        found = store.get_execution(child.run_id)
        if found is not None and found.structural_id:
            links.setdefault(
                found.structural_id, request.url_for("execution", run_id=child.run_id).path
            )
    try:
        return layout(execution.graph_snapshot, node_runs(waterfall.rows), links), None
    except GraphError as exc:
        return None, f"The execution graph cannot be drawn: {exc}."


# --- small helpers -------------------------------------------------------------------------


def _inspector(request: Request) -> Inspector:
    inspector: Inspector = request.app.state.services.inspector
    return inspector


def _wants_partial(request: Request) -> bool:
    return "hx-request" in request.headers or "x-partial" in request.headers


def _missing(request: Request, run_id: str) -> Response:
    return _error_page(request, 404, f"No execution with id {run_id!r} has arrived.", run_id)


def _error_page(request: Request, status: int, message: str, run_id: str) -> Response:
    context: dict[str, Any] = {"status": status, "message": message, "run_id": run_id}
    return templates.TemplateResponse(
        request, "_execution_missing.html", context, status_code=status
    )
