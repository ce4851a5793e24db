"""The execution page's provenance panel: every write that reached one field, told from a step.

Pure: a `History` and its provenance in, frozen dataclasses out. Writes that did not
apply are listed, marked, never named as the writer; each links to its step with the
field open, so the panel works with JavaScript off. Bounded whatever the run's length:
PROVENANCE_WINDOW writes around the step, values cut at DIFF_VALUE_CHARS (the JSON
twin has every write).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from collector.index.query_ast import Compare, Path, Scope, format_query
from collector.replay.history import History, StateUnavailableError
from collector.replay.jsondoc import JsonValue, Missing, pointer_parts, resolve
from collector.replay.provenance import NotApplied, ProvenanceEntry
from studio.inspect import Inspection
from studio.links import Links
from studio.render.start_writer import StartWriter
from studio.render.text import href, items_text, json_text, keys_text, leaf_text
from studio.render.window import centred_window
from studio.render.writers import Writers

PROVENANCE_WINDOW: Final = 50
# A filter longer than this (a long string value) is not offered as a link.
SIMILAR_FILTER_CHARS: Final = 200

# Why a received write did not apply, as the panel says it.
NOT_APPLIED_TEXT: Final[dict[NotApplied, str]] = {
    "after_missing_transitions": "it came after transitions that never arrived, so the state "
    "it was written against could not be rebuilt",
    "after_broken_evidence": "it came after a patch that was cut, withheld or did not apply, "
    "so the state it was written against could not be rebuilt",
    "patch_failed": "its patch does not apply to the replayed state",
}


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
    # False for a received write whose patch did not apply: `not_applied` says why, and
    # `attempted` is the value it carried (None when it carried none: remove, move, copy).
    applied: bool = True
    not_applied: str = ""
    attempted: str | None = None
    # The step's later operations put the value back, so the step did not change it.
    undone: bool = False
    # The span that carried it: its row in the waterfall, or where another run shows it
    # (studio/render/writers.py); None when the step is not in the history (never here).
    span_href: str | None = None


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
    # Received writes to it up to the selected step, after `writer_at` (if any), that did
    # not apply: the value shown lacks them.
    unapplied_before: int = 0
    # Transitions of the whole run that never arrived.
    missing: int = 0
    # Why there is no provenance at all (no states to read it from), if so.
    unavailable: str | None = None
    # The executions list filtered on this field's value here (`similar_filter`), for a
    # scalar value: from one run to every run that ended (or passed) the same way.
    similar_filter: str | None = None
    similar_href: str | None = None
    # Every run of this run's store, when earlier runs used it (its start state is theirs).
    store_href: str | None = None
    # The earlier run's write that set the value this run started with, when it comes
    # from the start state (studio/render/start_writer.py; the page reads the store for it).
    start_writer: StartWriter | None = None

    @property
    def from_start(self) -> bool:
        """Whether the value shown is the start state's: no write of this run set it.

        Not when transitions that never arrived, or writes that did not apply,
        may have set it instead.
        """
        return (
            self.error is None
            and self.unavailable is None
            and self.exists
            and self.writer_at is None
            and not self.missing_before
            and not self.unapplied_before
        )

    @property
    def listed_steps(self) -> tuple[int, ...]:
        """The steps of the writes the panel lists that changed something, oldest first.

        The timeline marks these rows, so the field's trail shows where it happened;
        only the listed window, so the page and the in-place panel mark the same rows
        and the work stays bounded.
        """
        return tuple(sorted({w.sequence for w in self.writes if w.applied}))


def provenance_view(
    inspection: Inspection,
    links: Links,
    base: str,
    sequence: int,
    pointer: str,
    writers: Writers | None = None,
) -> ProvenanceView:
    """Every write that reached `pointer`, from step `sequence`'s point of view.

    `writers` says where each write's span is shown (none: the spans are not linked).
    A malformed pointer becomes the panel's error.
    """
    history = inspection.history
    api = href(links.execution_api(inspection.run_id, "provenance"), path=pointer)
    close = href(base, step=sequence)

    def write_href(step: int) -> str:
        return links.provenance(inspection.run_id, pointer, step=step)

    try:
        found = inspection.provenance(pointer)
    except ValueError as exc:
        return _empty(pointer, close, api, sequence, error=str(exc))
    if not history.has_states:
        reason = (
            "they are rebuilt when the workflow span arrives"
            if inspection.execution is None
            else "its start state is missing, withheld or unreadable"
        )
        return _empty(
            pointer, close, api, sequence,
            unavailable=f"Provenance is read from the replayed states, and this run has none: "
            f"{reason}.",
        )
    entries = found.entries
    # The window is centred on the last write at or before the selected step.
    position = bisect_right([e.sequence for e in entries], sequence) - 1
    first = centred_window(position, len(entries), PROVENANCE_WINDOW)
    after = first + PROVENANCE_WINDOW
    changes = [entry for entry in entries if entry.changed]
    writer_at = next((e for e in reversed(changes) if e.sequence <= sequence), None)
    next_writer = next((e for e in changes if e.sequence > sequence), None)

    def span_href(entry: ProvenanceEntry) -> str | None:
        step = history.find_step(entry.sequence)
        if writers is None or step is None:
            return None
        return writers.span_href(links, step.transition, entry.sequence)

    def write(entry: ProvenanceEntry) -> Write:
        return Write(
            span_href=span_href(entry),
            sequence=entry.sequence,
            href=write_href(entry.sequence),
            op=entry.op,
            op_path=entry.op_path,
            relation=entry.relation,
            value_path=entry.value_path,
            before=json_text(entry.before),
            after=json_text(entry.after),
            action=entry.action,
            span_name=entry.span_name,
            verified=entry.verified,
            last=entry is found.last_writer,
            later=entry.sequence > sequence,
            applied=entry.applied,
            not_applied=NOT_APPLIED_TEXT[entry.not_applied] if entry.not_applied else "",
            attempted=json_text(entry.attempted),
            undone=entry.undone,
        )

    value_at = _value_at(history, sequence, pointer)
    similar = _similar_filter(history, sequence, pointer)
    store_id = inspection.execution.store_id if inspection.execution else None
    return ProvenanceView(
        store_href=(
            links.executions(store=store_id)
            if store_id is not None and history.start_sequence > 0
            else None
        ),
        similar_filter=similar,
        similar_href=links.executions(where=similar) if similar else None,
        pointer=pointer,
        error=None,
        writes=tuple(write(entry) for entry in entries[first:after]),
        last_writer=write(found.last_writer) if found.last_writer else None,
        close_href=close,
        json_href=api,
        total=len(entries),
        first_index=first,
        earlier_href=(
            write_href(entries[max(first - PROVENANCE_WINDOW // 2, 0)].sequence)
            if first > 0
            else None
        ),
        later_href=(
            write_href(entries[min(after + PROVENANCE_WINDOW // 2, len(entries) - 1)].sequence)
            if after < len(entries)
            else None
        ),
        sequence=sequence,
        at_start=sequence == history.start_sequence and history.find_step(sequence) is None,
        exists=(
            bool(entries)
            or _in_start_state(history, pointer) is not False
            or _in_recorded_end(history, pointer)
        ),
        missing=history.missing_count,
        value_at=value_at,
        writer_at=write(writer_at) if writer_at else None,
        next_writer=write(next_writer) if next_writer else None,
        missing_before=history.missing_through(sequence),
        unapplied_before=_unapplied_between(
            entries, writer_at.sequence if writer_at else history.start_sequence, sequence
        ),
    )


def _unapplied_between(entries: Sequence[ProvenanceEntry], after: int, through: int) -> int:
    """How many received writes in (after, through] did not apply."""
    return sum(1 for e in entries if not e.applied and after < e.sequence <= through)


def _empty(
    pointer: str,
    close_href: str,
    json_href: str,
    sequence: int,
    *,
    error: str | None = None,
    unavailable: str | None = None,
) -> ProvenanceView:
    """A panel with no writes to list: the pointer is malformed, or the run has no states."""
    return ProvenanceView(
        pointer=pointer, error=error, writes=(), last_writer=None, close_href=close_href,
        json_href=json_href, sequence=sequence, unavailable=unavailable,
    )


def _similar_filter(history: History, sequence: int, pointer: str) -> str | None:
    """`path = value` for the field's scalar value at `sequence`, as the list's filter.

    At the run's last step the filter tests the end state (`final`, the default);
    at an earlier step, any state (`ever`). None for the whole state, a container,
    a value that cannot be rebuilt, or a filter too long to offer.
    """
    if not pointer or not history.has_states:
        return None
    try:
        value: JsonValue | Missing = resolve(history.state_at(sequence), pointer)
    except StateUnavailableError:
        return None
    if isinstance(value, Missing | dict | list):
        return None
    last = history.steps[-1].sequence if history.steps else history.start_sequence
    scope: Scope = "final" if sequence == last else "ever"
    text = format_query(Compare(scope, Path(tuple(pointer_parts(pointer))), "=", value))
    return text if len(text) <= SIMILAR_FILTER_CHARS else None


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
        text = keys_text(len(value))
    elif isinstance(value, list):
        text = items_text(len(value))
    else:
        text = leaf_text(value)[0]
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
