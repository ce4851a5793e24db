"""Execution page view models for the selected step: the timeline and the step's diff.

Pure builders from a replayed `History` to frozen dataclasses the templates
render; no request, store or I/O. Every link they carry is a page URL
(`?step=N`), so each view works with JavaScript off. The state tree and the
provenance panel of the same step are built by studio/render/state_tree.py and
studio/render/provenance.py.

Invariant: the work is bounded whatever the run's size. The timeline is a window
of TIMELINE_WINDOW transitions around the selected one and diff values are cut
at DIFF_VALUE_CHARS and MAX_RENDER_DEPTH levels (studio/render/text.py,
studio/render/bounded.py), so a 10,000-transition run on a large or deeply nested
state renders in a bounded time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from collector.replay.history import History, Step
from collector.replay.jsondoc import Missing, parse_json
from studio.links import Links
from studio.render.bounded import cut_line
from studio.render.convention import NoteRow, Superstep, notes_by_step, superstep
from studio.render.text import LINK_POINTER_CHARS, cut_text, href, json_text
from studio.render.waterfall import NAME_CHARS
from studio.render.window import centred_window
from studio.render.writers import Writers

TIMELINE_WINDOW: Final = 200
PATHS_PER_ROW: Final = 3


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
    # For a foreign step: the run that wrote it when known, else the runs of
    # the trace that wrote it (who shares the store).
    writer_runs_href: str | None
    # Sequences just before this one that never arrived (first, last), if any.
    missing_before: tuple[int, int] | None = None
    writer_run_id: str | None = None
    # Convention runs: the digest check of this step's state, and the rollbacks and
    # rejections that came after it (studio/render/convention.py).
    digest_matched: bool | None = None
    notes: tuple[NoteRow, ...] = ()


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
    # Rollbacks and rejections before the run's first transition.
    start_notes: tuple[NoteRow, ...] = ()


@dataclass(frozen=True, slots=True)
class Change:
    op: str
    path: str
    from_path: str | None
    before: str | None
    after: str | None
    # The field's provenance panel; None for a pointer too long to put in a URL.
    href: str | None = None


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
    # The carrying span's row on this page, or where it is shown when it is not
    # here (studio/render/writers.py); `writer_run_id` wrote a foreign step, if known.
    span_href: str
    writer_run_id: str | None
    # The finding that the store did not commit the patch Junjo recorded (it
    # quotes that patch; `patch` is then the empty one replayed), if so.
    not_committed: str | None = None
    # A convention run's superstep: writers, their updates, the reducers, the digest.
    superstep: Superstep | None = None


def selected_sequence(history: History, asked: int | None) -> int:
    """The asked step snapped to a received one (or the start); default the last step."""
    steps = history.steps
    if asked is None:
        return steps[-1].sequence if steps else history.start_sequence
    index = history.index_at(asked)
    return steps[index].sequence if index >= 0 else history.start_sequence


def build_timeline(
    history: History,
    links: Links,
    base: str,
    selected: int,
    asked: int | None = None,
    writers: Writers | None = None,
    pointer: str | None = None,
) -> Timeline:
    """The window of TIMELINE_WINDOW rows around `selected`, with links to step through.

    Sequences that never arrived are marked where they belong (`missing_before`,
    `missing_after`), so a hole in the evidence shows as a hole, not as
    neighbouring steps that look consecutive. `asked` is the step the user asked
    for; when it never arrived the timeline says so. `writers` knows the run
    each carrier span ran in, so a foreign step links to the run that wrote it.
    `pointer` is the field whose provenance is open: every step link keeps it open,
    so stepping back through the run tells the field's story from each step.
    """
    steps = history.steps
    index = history.index_at(selected)  # -1: the start state is selected
    first = centred_window(index, len(steps), TIMELINE_WINDOW)
    window = steps[first : first + TIMELINE_WINDOW]
    origin = history.execution.start_unix_nano if history.execution else _first_time(steps)
    holes = history.missing_sequences
    known = writers or Writers(frozenset(), {})
    notes = notes_by_step(history.notes)

    def step_href(sequence: int) -> str:
        return href(base, step=sequence, path=pointer)

    def at(position: int) -> str | None:
        if position < -1 or position >= len(steps) or position == index:
            return None
        sequence = history.start_sequence if position == -1 else steps[position].sequence
        return step_href(sequence)

    return Timeline(
        rows=tuple(
            _timeline_row(
                step, step_href(step.sequence), origin, step.sequence == selected,
                holes.get(step.sequence), known, links, notes.get(step.sequence, ()),
            )
            for step in window
        ),
        total=len(steps),
        first_index=first,
        start_sequence=history.start_sequence,
        last_sequence=steps[-1].sequence if steps else history.start_sequence,
        selected=selected,
        start_href=step_href(history.start_sequence),
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
        missing=history.missing_count,
        asked_missing=asked if asked is not None and _in_hole(asked, holes) else None,
        start_notes=(
            notes.get(history.start_sequence, ()) + notes.get(None, ()) if first == 0 else ()
        ),
    )


def _in_hole(sequence: int, holes: Mapping[int | None, tuple[int, int]]) -> bool:
    return any(first <= sequence <= last for first, last in holes.values())


def _first_time(steps: Sequence[Step]) -> int:
    return min((step.transition.time_unix_nano for step in steps), default=0)


def _timeline_row(
    step: Step,
    step_href: str,
    origin: int,
    selected: bool,
    missing_before: tuple[int, int] | None,
    writers: Writers,
    links: Links,
    notes: tuple[NoteRow, ...] = (),
) -> TimelineRow:
    transition = step.transition
    paths = step.changed_paths
    foreign = step.foreign
    return TimelineRow(
        sequence=step.sequence,
        href=step_href,
        offset_nano=max(transition.time_unix_nano - origin, 0),
        span_name=cut_line(transition.span_name, NAME_CHARS),
        span_id=transition.span_id,
        action=transition.action,
        paths=paths[:PATHS_PER_ROW],
        more_paths=max(len(paths) - PATHS_PER_ROW, 0),
        verified=step.verified,
        applied=step.applied,
        foreign=foreign,
        selected=selected,
        writer_runs_href=(
            writers.runs_href(links, transition.trace_id, transition.span_id) if foreign else None
        ),
        missing_before=missing_before,
        writer_run_id=(
            writers.run_of(transition.trace_id, transition.span_id) if foreign else None
        ),
        digest_matched=step.digest_matched,
        notes=notes,
    )


def step_detail(
    history: History, sequence: int, links: Links, writers: Writers, run_id: str = ""
) -> StepDetail | None:
    """The step at `sequence` with its patch and per-operation diff; None at the start state.

    Its span is linked where it can be read (`Writers.span_href`): a foreign
    step's span may sit in another run's trace, not on this page. Each change
    links to its field's provenance on `run_id`'s page.
    """
    step = history.find_step(sequence)
    if step is None:
        return None
    changes: tuple[Change, ...] = ()
    if history.has_states:
        changes = tuple(
            Change(
                c.op, c.path, c.from_path, json_text(c.before), json_text(c.after),
                links.provenance(run_id, c.path, step=sequence)
                if len(c.path) <= LINK_POINTER_CHARS else None,
            )
            for c in history.changes(sequence)
        )
    transition = step.transition
    return StepDetail(
        sequence=step.sequence,
        action=transition.action,
        span_name=cut_line(transition.span_name, NAME_CHARS),
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
        span_href=writers.span_href(links, transition, step.sequence),
        writer_run_id=(
            writers.run_of(transition.trace_id, transition.span_id) if step.foreign else None
        ),
        not_committed=next(
            (
                d.message for d in history.diagnostics
                if d.code == "patch_not_committed" and d.sequence == step.sequence
            ),
            None,
        ),
        superstep=superstep(step),
    )


def _pretty_patch(text: str) -> str:
    """The patch indented, or as it came when it is no JSON replay accepts (too deep, say)."""
    parsed = parse_json(text)
    if isinstance(parsed, Missing):
        return cut_text(text)
    return json_text(parsed) or ""
