"""Execution page view models for the selected step: timeline, diff, state tree, provenance.

Pure builders from a replayed `History` (via the Inspector's `Inspection`) to
frozen dataclasses the templates render; no request, store or I/O. Every link
they carry is a page URL (`?step=N`, `&path=/a/b`, `&state=recorded`), so each
view works with JavaScript off.

Invariant: the work is bounded whatever the run's size. The timeline is a window
of TIMELINE_WINDOW transitions around the selected one, diff values are cut at
DIFF_VALUE_CHARS, and the state tree draws at most TREE_CHILDREN_SHOWN children
of one container (plus those on a changed or selected path), the provenance
panel PROVENANCE_WINDOW writes around the selected step, so a
10,000-transition run on a large state renders in a bounded time.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias
from urllib.parse import urlencode

from collector.history import History, StateUnavailableError, Step
from collector.jsondoc import JsonValue, Missing, pointer_text, resolve
from collector.provenance import ProvenanceEntry
from studio.inspect import Inspection
from studio.links import Links

TIMELINE_WINDOW: Final = 200
PROVENANCE_WINDOW: Final = 50
TREE_CHILDREN_SHOWN: Final = 100
STRING_PREVIEW_CHARS: Final = 200
DIFF_VALUE_CHARS: Final = 4000
PATHS_PER_ROW: Final = 3

TokenKind: TypeAlias = Literal["open", "close", "leaf", "more"]


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
    # For a foreign step: the run that wrote it when its span is in this trace,
    # else the runs of the trace that wrote it (who shares the store).
    writer_runs_href: str | None
    # Sequences just before this one that never arrived (first, last), if any.
    missing_before: tuple[int, int] | None = None
    writer_run_id: str | None = None


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
    # Sequences the run's interval declares after the last one received.
    missing_after: tuple[int, int] | None = None
    # How many of the declared sequences never arrived, in all.
    missing: int = 0
    # The asked step when it never arrived (the page shows the step before it).
    asked_missing: int | None = None


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
    value_path: str
    before: str | None
    after: str | None
    action: str
    span_name: str
    verified: bool
    last: bool
    # Written after the selected step: not (yet) part of the value shown.
    later: bool = False


@dataclass(frozen=True, slots=True)
class ValueAtStep:
    """The field's value in the state after the selected step.

    `known` is False when that state cannot be rebuilt (`reason` says why);
    `present` is False when the field is absent there.
    """

    known: bool
    present: bool
    text: str
    reason: str = ""
    # Proven by the evidence, rather than best effort after missing or broken evidence.
    verified: bool = True


@dataclass(frozen=True, slots=True)
class ProvenanceView:
    """The provenance panel, told from the selected step.

    It answers for the state the page shows: the field's value there, the write
    that set it (`writer_at`, None when it comes from the start state) and the
    next one after (`next_writer`), then the run's final writer. A field written
    at every step of a long run has thousands of writes; the panel lists
    PROVENANCE_WINDOW of them around the selected step, with links to the
    windows before and after (every write is in the JSON twin).
    """

    pointer: str
    error: str | None
    writes: tuple[Write, ...]
    last_writer: Write | None
    close_href: str
    json_href: str
    total: int = 0
    first_index: int = 0
    earlier_href: str | None = None
    later_href: str | None = None
    sequence: int = 0
    at_start: bool = False
    # False when no state of the run ever held the field: no write reached it
    # and the start state lacks it.
    exists: bool = True
    value_at: ValueAtStep | None = None
    writer_at: Write | None = None
    next_writer: Write | None = None
    # Transitions up to the selected step that never arrived: any could have written it.
    missing_before: int = 0
    # Transitions of the whole run that never arrived.
    missing: int = 0
    # Why there is no provenance at all (no states to read it from), if so.
    unavailable: str | None = None


def selected_sequence(history: History, asked: int | None) -> int:
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


# --- timeline and the selected step ------------------------------------------------------


def build_timeline(
    history: History,
    links: Links,
    base: str,
    selected: int,
    asked: int | None = None,
    span_runs: Mapping[str, str] | None = None,
) -> Timeline:
    """The window of TIMELINE_WINDOW rows around `selected`, with links to step through.

    Sequences that never arrived are marked where they belong (`missing_before`,
    `missing_after`), so a hole in the evidence shows as a hole, not as
    neighbouring steps that look consecutive. `asked` is the step the user asked
    for; when it never arrived the timeline says so. `span_runs` maps the spans of
    this run's trace to the run that owns each (`waterfall.owning_runs`), so a
    foreign step links to the run that wrote it.
    """
    steps = history.steps
    sequences = [step.sequence for step in steps]
    index = bisect_right(sequences, selected) - 1  # -1: the start state is selected
    first = min(max(index - TIMELINE_WINDOW // 2, 0), max(len(steps) - TIMELINE_WINDOW, 0))
    window = steps[first : first + TIMELINE_WINDOW]
    origin = history.execution.start_unix_nano if history.execution else _first_time(steps)
    holes = history.missing_sequences
    trace_id = history.execution.trace_id if history.execution else None
    writers = span_runs or {}

    def writer(step: Step) -> str | None:
        transition = step.transition
        if not step.foreign or transition.trace_id != trace_id:
            return None
        return writers.get(transition.span_id)

    def at(position: int) -> str | None:
        if position < -1 or position >= len(steps) or position == index:
            return None
        sequence = history.start_sequence if position == -1 else sequences[position]
        return href(base, step=sequence)

    return Timeline(
        rows=tuple(
            _timeline_row(
                step, base, origin, step.sequence == selected, holes.get(step.sequence),
                writer(step), links,
            )
            for step in window
        ),
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
        missing_after=holes.get(None),
        missing=sum(last - first + 1 for first, last in holes.values()),
        asked_missing=asked if asked is not None and _in_hole(asked, holes) else None,
    )


def _in_hole(sequence: int, holes: Mapping[int | None, tuple[int, int]]) -> bool:
    return any(first <= sequence <= last for first, last in holes.values())


def _first_time(steps: Sequence[Step]) -> int:
    return min((step.transition.time_unix_nano for step in steps), default=0)


def _timeline_row(
    step: Step,
    base: str,
    origin: int,
    selected: bool,
    missing_before: tuple[int, int] | None,
    writer_run_id: str | None,
    links: Links,
) -> TimelineRow:
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
        writer_runs_href=(
            (links.execution(writer_run_id) if writer_run_id else
             links.executions(trace=transition.trace_id))
            if step.foreign
            else None
        ),
        missing_before=missing_before,
        writer_run_id=writer_run_id,
    )


def step_detail(history: History, sequence: int) -> StepDetail | None:
    """The step at `sequence` with its patch and per-operation diff; None at the start state."""
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


def state_view(
    inspection: Inspection,
    links: Links,
    base: str,
    sequence: int,
    pointer: str | None,
    *,
    recorded: bool,
) -> StateView:
    """The state tree after `sequence`, or the producer's recorded end state when `recorded`.

    `recorded` falls back to the replayed state when no end state was recorded;
    `pointer` is the field whose path should start open.
    """
    history = inspection.history
    json_href = href(links.execution_api(inspection.run_id, "state"), sequence=sequence)
    recorded_end = history.recorded_end
    has_recorded = not isinstance(recorded_end, Missing)
    if recorded and not isinstance(recorded_end, Missing):
        changed = _changed_at(history, sequence)
        tokens = tree_tokens(recorded_end, base, sequence, changed, pointer, state="recorded")
        # The recorded end state is served as `end` of the timeline JSON.
        return StateView(
            True, "", sequence, False, True, tokens,
            links.execution_api(inspection.run_id, "timeline"),
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
    tokens = tree_tokens(state, base, sequence, changed, pointer)
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
    pointer = pointer_text(parts)
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


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


# --- provenance --------------------------------------------------------------------------


def provenance_view(
    inspection: Inspection, links: Links, base: str, sequence: int, pointer: str
) -> ProvenanceView:
    """Every write that reached `pointer`, from step `sequence`'s point of view.

    A malformed pointer becomes the panel's error.
    """
    history = inspection.history
    api = href(links.execution_api(inspection.run_id, "provenance"), path=pointer)
    close = href(base, step=sequence)
    try:
        found = inspection.provenance(pointer)
    except ValueError as exc:
        return ProvenanceView(pointer, str(exc), (), None, close, api, sequence=sequence)
    if not history.has_states:
        reason = (
            "they are rebuilt when the workflow span arrives"
            if inspection.execution is None
            else "its start state is missing, withheld or unreadable"
        )
        return ProvenanceView(
            pointer, None, (), None, close, api, sequence=sequence,
            unavailable=f"Provenance is read from the replayed states, and this run has none: "
            f"{reason}.",
        )
    entries = found.entries
    # The window is centred on the last write at or before the selected step.
    position = bisect_right([e.sequence for e in entries], sequence) - 1
    first = min(
        max(position - PROVENANCE_WINDOW // 2, 0), max(len(entries) - PROVENANCE_WINDOW, 0)
    )
    after = first + PROVENANCE_WINDOW
    changes = [entry for entry in entries if entry.changed]
    writer_at = next((e for e in reversed(changes) if e.sequence <= sequence), None)
    next_writer = next((e for e in changes if e.sequence > sequence), None)

    def write(entry: ProvenanceEntry) -> Write:
        return Write(
            sequence=entry.sequence,
            href=_write_href(base, entry.sequence, pointer),
            op=entry.op,
            op_path=entry.op_path,
            relation=entry.relation,
            value_path=entry.value_path,
            before=_json_text(entry.before),
            after=_json_text(entry.after),
            action=entry.action,
            span_name=entry.span_name,
            verified=entry.verified,
            last=entry is found.last_writer,
            later=entry.sequence > sequence,
        )

    value_at = _value_at(history, sequence, pointer)
    return ProvenanceView(
        pointer,
        None,
        tuple(write(entry) for entry in entries[first:after]),
        write(found.last_writer) if found.last_writer else None,
        close,
        api,
        total=len(entries),
        first_index=first,
        earlier_href=(
            _write_href(base, entries[max(first - PROVENANCE_WINDOW // 2, 0)].sequence, pointer)
            if first > 0
            else None
        ),
        later_href=(
            _write_href(
                base, entries[min(after + PROVENANCE_WINDOW // 2, len(entries) - 1)].sequence,
                pointer,
            )
            if after < len(entries)
            else None
        ),
        sequence=sequence,
        at_start=sequence == history.start_sequence and not _is_step(history, sequence),
        exists=(
            bool(entries)
            or _in_start_state(history, pointer) is not False
            or _in_recorded_end(history, pointer)
        ),
        missing=sum(last - first + 1 for first, last in history.missing_sequences.values()),
        value_at=value_at,
        writer_at=write(writer_at) if writer_at else None,
        next_writer=write(next_writer) if next_writer else None,
        missing_before=sum(
            min(last, sequence) - first + 1
            for first, last in history.missing_sequences.values()
            if first <= sequence
        ),
    )


def _value_at(history: History, sequence: int, pointer: str) -> ValueAtStep:
    if not history.has_states:
        return ValueAtStep(False, False, "", "no state of this run can be rebuilt")
    try:
        state = history.state_at(sequence)
    except StateUnavailableError as exc:
        return ValueAtStep(False, False, "", str(exc))
    value = resolve(state, pointer)
    verified = history.verified_at(sequence)
    if isinstance(value, Missing):
        return ValueAtStep(True, False, "", verified=verified)
    if isinstance(value, dict):
        text = f"{{{len(value)} keys}}"
    elif isinstance(value, list):
        text = f"[{len(value)} items]"
    else:
        text = _leaf_text(value)[0]
    return ValueAtStep(True, True, text, verified=verified)


def _in_start_state(history: History, pointer: str) -> bool | None:
    """Whether the start state holds `pointer`; None when the start state is unknown."""
    if not history.has_states:
        return None
    return not isinstance(resolve(history.state_at(history.start_sequence), pointer), Missing)


def _in_recorded_end(history: History, pointer: str) -> bool:
    """Whether the producer's recorded end state holds `pointer` (written by a lost step, say)."""
    recorded = history.recorded_end
    return not isinstance(recorded, Missing) and not isinstance(resolve(recorded, pointer), Missing)


def _is_step(history: History, sequence: int) -> bool:
    try:
        history.step(sequence)
    except KeyError:
        return False
    return True


def _write_href(base: str, sequence: int, pointer: str) -> str:
    return href(base, step=sequence, path=pointer) + "#provenance"
