"""Provenance stage: which recorded writes reached one field of a replayed state.

Input: a `History` (collector/history.py) and an RFC 6901 pointer. Output: a
`Provenance` listing, oldest first, every patch operation that touched the value
at the pointer, with the value before and after it, and the last write that
changed it.

Invariant: built only from History's public API (the start state from
`state_at`, then `steps`), so it sees exactly the states replay handed out and
cannot disturb them; it replays its own copy forward once. Pure: no I/O, and
every value it returns is a fresh copy the caller owns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

from collector.history import History, Step
from collector.jsondoc import (
    MISSING,
    JsonPatchOp,
    JsonValue,
    Missing,
    clone_or_missing,
    json_equal,
    list_index,
    parse_patch,
    patch_in_place,
    pointer_parts,
    resolve_parts,
)

Relation: TypeAlias = Literal["self", "ancestor", "descendant", "shifted"]

# Closest first: when one operation relates to the pointer in two ways, the first wins.
_RELATION_RANK: Final[tuple[Relation, ...]] = ("self", "ancestor", "descendant", "shifted")


@dataclass(frozen=True, slots=True)
class ProvenanceEntry:
    """One operation that changed the value at the asked pointer.

    `relation` says how the operation's path relates to the pointer: the pointer
    itself, an ancestor (a parent object replaced), a descendant, or a sibling
    list index whose insert or removal shifted the pointer's element.
    """

    sequence: int
    time_unix_nano: int
    op: str
    op_path: str
    from_path: str | None
    relation: Relation
    before: JsonValue | Missing
    after: JsonValue | Missing
    action: str
    store_id: str
    span_id: str
    span_name: str
    verified: bool

    @property
    def changed(self) -> bool:
        return not json_equal(self.before, self.after)


@dataclass(frozen=True, slots=True)
class Provenance:
    """Every recorded write that reached a pointer, oldest first.

    `last_writer` is the latest write that changed the value; None means the
    final value came from the start state (or the pointer never existed).
    """

    pointer: str
    entries: tuple[ProvenanceEntry, ...]
    last_writer: ProvenanceEntry | None


def provenance(history: History, pointer: str) -> Provenance:
    """Every operation that changed the value at `pointer`, and its last writer.

    Operations on the pointer, an ancestor (replacing the parent object), a
    descendant, or a sibling list index that shifted the element all count; a
    move touches both its `from` and its `path`. Values are read from the
    replayed states around each operation, so one forward pass answers the
    question in the cost of a replay, plus copies of the value at the pointer
    for each write that touches it. Raises ValueError for a malformed pointer.
    """
    target = pointer_parts(pointer)
    if not history.has_states:
        return Provenance(pointer=pointer, entries=(), last_writer=None)
    entries: list[ProvenanceEntry] = []
    # state_at hands out a fresh copy, so patching it in place below is safe.
    doc = history.state_at(history.start_sequence)
    for step in history.steps:
        if not step.applied:
            continue
        ops = parse_patch(step.transition.patch_json) or []
        if not any(_op_relation(op, target) for op in ops):
            doc = patch_in_place(doc, ops)
            continue
        for op in ops:
            relation = _op_relation(op, target)
            before = clone_or_missing(resolve_parts(doc, target)) if relation else MISSING
            doc = patch_in_place(doc, [op])
            if relation is None:
                continue
            after = clone_or_missing(resolve_parts(doc, target))
            entry = _provenance_entry(step, op, relation, before, after)
            if relation != "shifted" or entry.changed:
                entries.append(entry)
    writers = [entry for entry in entries if entry.changed]
    return Provenance(
        pointer=pointer, entries=tuple(entries), last_writer=writers[-1] if writers else None
    )


def _op_relation(op: JsonPatchOp, target: tuple[str, ...]) -> Relation | None:
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
        before=before,
        after=after,
        action=transition.action,
        store_id=transition.store_id,
        span_id=transition.span_id,
        span_name=transition.span_name,
        verified=step.verified,
    )
