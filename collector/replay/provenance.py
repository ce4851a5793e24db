"""Provenance stage: which recorded writes reached one field of a replayed state.

Given a `History` and an RFC 6901 pointer, lists oldest first every patch operation
that touched the value there, with the value before and after, and the last write
that changed it. A received write whose patch did not apply is listed too, marked,
since saying no write named the field would be false; a write inside the value is
shown at the path it wrote, so a list appended to at every step costs no copy of the
whole list per step.

Invariant: built only from History's public API, replaying its own copy forward once,
so it sees exactly the states replay handed out. Pure: no I/O; every value returned
is a fresh copy the caller owns.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final, Literal, TypeAlias

from collector.model import withheld
from collector.replay.history import History, Step
from collector.replay.jsondoc import (
    MISSING,
    OPS_WITH_FROM,
    JsonPatchOp,
    JsonValue,
    Missing,
    apply_op_recording,
    clone_or_missing,
    json_equal,
    list_index,
    parse_patch,
    patch_in_place,
    pointer_parts,
    pointer_text,
    resolve_parts,
)

Relation: TypeAlias = Literal["self", "ancestor", "descendant", "shifted"]

# Why a received write did not apply: transitions before it never arrived; an earlier
# patch was cut, withheld or failed; or its own patch does not fit a proven state.
NotApplied: TypeAlias = Literal[
    "after_missing_transitions", "after_broken_evidence", "patch_failed"
]

# Closest first: when one operation relates to the pointer in two ways, the first wins.
_RELATION_RANK: Final[tuple[Relation, ...]] = ("self", "ancestor", "descendant", "shifted")


@dataclass(frozen=True, slots=True)
class ProvenanceEntry:
    """One operation that changed the value at the asked pointer.

    `relation`: the pointer itself, an ancestor, a descendant, or a sibling list index
    whose insert or removal shifted the element. `before`/`after` are at `value_path`
    (the path written, for a descendant). Not `applied`: both are the unchanged value
    and `attempted` what the write carried. `undone`: later operations of the same
    step put the value back (JSON Patch's list diffs do), so the step is not its writer.
    """

    sequence: int
    time_unix_nano: int
    op: str
    op_path: str
    from_path: str | None
    relation: Relation
    value_path: str
    before: JsonValue | Missing
    after: JsonValue | Missing
    action: str
    store_id: str
    span_id: str
    span_name: str
    verified: bool
    applied: bool = True
    not_applied: NotApplied | None = None
    attempted: JsonValue | Missing = MISSING
    undone: bool = False

    @property
    def changed(self) -> bool:
        """Whether this write changed the value, and its step left it changed."""
        return self.applied and not self.undone and not json_equal(self.before, self.after)


@dataclass(frozen=True, slots=True)
class Provenance:
    """Every recorded write that reached a pointer, oldest first.

    `last_writer` is the latest applied write that changed the value; None
    means the final value came from the start state (or the pointer never
    existed in a replayed state).
    """

    pointer: str
    entries: tuple[ProvenanceEntry, ...]
    last_writer: ProvenanceEntry | None


def provenance(history: History, pointer: str) -> Provenance:
    """Every operation that changed the value at `pointer`, and its last writer.

    A move touches both its `from` and its `path`; an unapplied write's would-be
    shift is not listed (it names neither the field nor a parent or member). One
    forward pass, plus copies of the values each write touched. Raises ValueError for
    a malformed pointer.
    """
    target = pointer_parts(pointer)
    if not history.has_states:
        return Provenance(pointer=pointer, entries=(), last_writer=None)
    entries: list[ProvenanceEntry] = []
    # state_at hands out a fresh copy, so patching it in place below is safe.
    doc = _Working(history, target)
    needle = _region_needle(target)
    verified = history.verified_at(history.start_sequence)
    for step in history.steps:
        verified_before, verified = verified, step.verified
        if not step.applied:
            if _may_name_region(step.transition.patch_json, needle):
                reason = _why_not_applied(history, step, verified_before)
                entries.extend(_unapplied_entries(doc.value, step, pointer, reason))
            continue
        if needle is not None and doc.skips(step.transition.patch_json, needle):
            doc.finish_step(step)
            continue
        ops = parse_patch(step.transition.patch_json) or []
        first_of_step = len(entries)
        for index, op in enumerate(ops):
            relation = op_relation(op, target)
            if relation is None:
                doc.apply_unrelated(op, step, index)
                continue
            doc.prepare_for(op, step, index)
            if relation == "descendant" and not _moves_within(op, target):
                value_path, before, after, doc.value = _write_inside(doc.value, op, target)
            else:
                value_path = pointer
                before = clone_or_missing(resolve_parts(doc.value, target))
                doc.value = patch_in_place(doc.value, [op])
                after = clone_or_missing(resolve_parts(doc.value, target))
            entry = _provenance_entry(step, op, relation, value_path, before, after)
            if relation != "shifted" or entry.changed:
                entries.append(entry)
        entries[first_of_step:] = _unless_undone(
            history, step, target, doc.value, entries[first_of_step:]
        )
        doc.finish_step(step)
    writers = [entry for entry in entries if entry.changed]
    return Provenance(
        pointer=pointer, entries=tuple(entries), last_writer=writers[-1] if writers else None
    )


def _unless_undone(
    history: History,
    step: Step,
    target: tuple[str, ...],
    doc_after: JsonValue,
    step_entries: list[ProvenanceEntry],
) -> list[ProvenanceEntry]:
    """The step's entries, marked undone if the step as a whole left the value as it was
    (only a step with several changing operations needs the value before it read)."""
    if sum(entry.changed for entry in step_entries) < 2:
        return step_entries
    before = resolve_parts(history.peek_at(step.sequence - 1), target)
    if not json_equal(before, resolve_parts(doc_after, target)):
        return step_entries
    return [replace(entry, undone=True) for entry in step_entries]


class _Working:
    """The working document of a provenance pass, exact inside the pointer's region.

    Only operations inside the pointer's top-level member (its region) can change
    the value, so the others, most of a long run's, are skipped. Outside the region
    the document is then stale, and is rebuilt from the history before an operation
    that crosses the region's edge.
    """

    def __init__(self, history: History, target: tuple[str, ...]) -> None:
        self._history = history
        self.value = history.state_at(history.start_sequence)
        self._region = target[:1]
        self._stale = False
        self._before_step = history.start_sequence

    def skips(self, patch_text: str, needle: str) -> bool:
        """Skip a whole step, unparsed, if its text proves it writes outside the region.

        See `_may_name_region`. That holds for an object root only, as in
        `apply_unrelated`.
        """
        if not isinstance(self.value, dict) or _may_name_region(patch_text, needle):
            return False
        self._stale = True
        return True

    def apply_unrelated(self, op: JsonPatchOp, step: Step, index: int) -> None:
        # Members of a top-level array shift into each other, so skipping is for
        # an object root only (checked per operation: a write to "" can change it).
        if self._region and isinstance(self.value, dict) and not self._in_region(op):
            self._stale = True
            return
        self.prepare_for(op, step, index)
        self.value = patch_in_place(self.value, [op])

    def prepare_for(self, op: JsonPatchOp, step: Step, index: int) -> None:
        """Rebuild the stale document if `op` touches anything outside the region."""
        if not self._stale or self._wholly_in_region(op):
            return
        doc = self._history.state_at(self._before_step)
        earlier = (parse_patch(step.transition.patch_json) or [])[:index]
        self.value = patch_in_place(doc, earlier)
        self._stale = False

    def finish_step(self, step: Step) -> None:
        self._before_step = step.sequence

    def _in_region(self, op: JsonPatchOp) -> bool:
        """Whether `op` reads or writes anything inside the region."""
        return any(self._within(pointer) for pointer in _touched(op))

    def _wholly_in_region(self, op: JsonPatchOp) -> bool:
        """Whether everything `op` reads or writes is inside the region."""
        return all(self._within(pointer) for pointer in _touched(op))

    def _within(self, pointer: str) -> bool:
        return pointer_parts(pointer)[: len(self._region)] == self._region


def _why_not_applied(history: History, step: Step, before_verified: bool) -> NotApplied:
    if history.missing_through(step.sequence):
        return "after_missing_transitions"
    return "patch_failed" if before_verified else "after_broken_evidence"


def _unapplied_entries(
    doc: JsonValue, step: Step, pointer: str, reason: NotApplied
) -> list[ProvenanceEntry]:
    """The operations of an unapplied step that name the target, a parent or a member
    (none for a withheld or unparseable patch: its step's findings say so)."""
    if withheld(step.transition.patch_mode):
        return []
    target = pointer_parts(pointer)
    entries: list[ProvenanceEntry] = []
    for op in parse_patch(step.transition.patch_json) or []:
        relation = op_relation(op, target)
        if relation is None or relation == "shifted":
            continue
        value_path = pointer if relation != "descendant" else _inside(op, target)
        value = resolve_parts(doc, pointer_parts(value_path))
        entry = _provenance_entry(
            step, op, relation, value_path, clone_or_missing(value), clone_or_missing(value)
        )
        carries = op.get("op") in {"add", "replace", "test"}
        carried = op.get("value", MISSING) if carries else MISSING
        entries.append(
            replace(entry, applied=False, not_applied=reason, attempted=clone_or_missing(carried))
        )
    return entries


def _inside(op: JsonPatchOp, target: tuple[str, ...]) -> str:
    """The pointer of a descendant operation that lies inside the target: its path, or `from`."""
    path = str(op["path"])
    return path if pointer_parts(path)[: len(target)] == target else str(op["from"])


def _may_name_region(patch_text: str, needle: str | None) -> bool:
    """False when a patch's text proves no operation of it names a pointer in the region.

    Every pointer into the region, as JSON text, starts with `needle` (`"/` and
    the region's key), and the root pointer is `""`; an escape could spell a
    pointer differently. With no needle (the root itself), anything may.
    """
    return needle is None or "\\" in patch_text or needle in patch_text or '""' in patch_text


def _region_needle(target: tuple[str, ...]) -> str | None:
    """How every pointer into the target's top-level member starts in JSON text."""
    return '"' + pointer_text(target[:1]) if target else None


def _touched(op: JsonPatchOp) -> list[str]:
    """The pointers an operation reads or writes: its path, and `from` for move/copy."""
    source = op.get("from")
    pointers = [str(op["path"])]
    if op.get("op") in OPS_WITH_FROM and isinstance(source, str):
        pointers.append(source)
    return pointers


def _write_inside(
    doc: JsonValue, op: JsonPatchOp, target: tuple[str, ...]
) -> tuple[str, JsonValue | Missing, JsonValue | Missing, JsonValue]:
    """Apply an operation that writes inside the target: (path shown, before, after, doc)."""
    path = str(op["path"])
    parts = pointer_parts(path)
    if parts[: len(target)] == target:
        if parts[-1] == "-":
            # "-" is the slot after the last element: name the index it becomes.
            parent = resolve_parts(doc, parts[:-1])
            index = len(parent) if isinstance(parent, list) else 0
            path = pointer_text((*parts[:-1], str(index)))
        return (path, *apply_op_recording(doc, op))
    # A move out of the target: what left is the value at `from`.
    source = str(op["from"])
    before = clone_or_missing(resolve_parts(doc, pointer_parts(source)))
    return source, before, MISSING, patch_in_place(doc, [op])


def _moves_within(op: JsonPatchOp, target: tuple[str, ...]) -> bool:
    """A move from one place inside the target to another changes it in two places."""
    if op.get("op") != "move":
        return False
    ends = (pointer_parts(str(op["path"])), pointer_parts(str(op["from"])))
    return all(end[: len(target)] == target for end in ends)


def op_relation(op: JsonPatchOp, target: tuple[str, ...]) -> Relation | None:
    """How an operation's path (or a move's source) relates to the target's tokens, if at all."""
    kind = op.get("op")
    touched = [op.get("path")] if kind != "test" else []
    if kind == "move":
        touched.append(op.get("from"))
    found: list[Relation] = []
    for pointer in touched:
        if isinstance(pointer, str):
            relation = _relation(pointer_parts(pointer), target, str(kind))
            if relation is not None:
                found.append(relation)
    # A move can touch the pointer twice; report the closest relation.
    return min(found, key=_RELATION_RANK.index) if found else None


def _relation(written: tuple[str, ...], target: tuple[str, ...], kind: str) -> Relation | None:
    if written == target:
        return "self"
    if target[: len(written)] == written:
        return "ancestor"
    if written[: len(target)] == target:
        return "descendant"
    # Inserting into or removing from a list moves every later element, so the
    # value at /items/3 changes when /items/0 is removed.
    depth = len(written) - 1
    shifting = kind in {"add", "remove", "move", "copy"}
    if (
        shifting
        and depth < len(target)
        and written[:depth] == target[:depth]
        and (written[depth] == "-" or list_index(written[depth]) is not None)
        and list_index(target[depth]) is not None
    ):
        return "shifted"
    return None


def _provenance_entry(
    step: Step,
    op: JsonPatchOp,
    relation: Relation,
    value_path: str,
    before: JsonValue | Missing,
    after: JsonValue | Missing,
) -> ProvenanceEntry:
    transition = step.transition
    source = op.get("from")
    return ProvenanceEntry(
        sequence=step.sequence,
        time_unix_nano=transition.time_unix_nano,
        op=str(op["op"]),
        op_path=str(op["path"]),
        from_path=source if isinstance(source, str) else None,
        relation=relation,
        value_path=value_path,
        before=before,
        after=after,
        action=transition.action,
        store_id=transition.store_id,
        span_id=transition.span_id,
        span_name=transition.span_name,
        verified=step.verified,
    )
