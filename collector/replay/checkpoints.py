"""Replay's state storage: a working document patched in place, and checkpoints.

Replay patches one working document (a `Tape`) in place and copies it into a
checkpoint whenever the patch work since the last one reaches the state's size, so
copying is paid for by patching: a replay costs O(total patch work + state size), and
`States` rebuilds any step's state with one copy and about one state's worth of
patching. Checkpoints restored from a snapshot stay JSON text until first needed.

Invariant: checkpoint states are never mutated once kept; states are handed out as
fresh copies, except where a method says it lends its own (read those, never change
them). Pure: no I/O; only patch texts, nothing of executions.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from collector.replay.jsondoc import (
    MISSING,
    PATCH_ERRORS,
    DocumentLimitError,
    DocumentMeter,
    JsonPatchOp,
    JsonValue,
    clone,
    parse_json,
    patch_in_place,
)

# One jsonpatch application costs about as much as copying 1 KB of state with
# `clone`; counting each patch as this much work keeps checkpoints from being taken
# so often that copying dominates a replay of many tiny patches.
_PATCH_WORK_BYTES: Final = 1024
# ...and never closer than this: rebuilding from this much patch work is quick, while
# a checkpoint every step or two made copying a real part of replaying short runs.
_MIN_CHECKPOINT_WORK: Final = 64 * 1024


class StateUnavailableError(LookupError):
    """Asked for a state that this history cannot produce."""


class States:
    """Checkpoints plus the patches between them; rebuilds any state on demand.

    Step index -1 is the start state. `patches[i]` is the text that step i applied,
    or None if step i changed nothing.
    """

    def __init__(self, start: JsonValue) -> None:
        self._indexes = [-1]
        self._checkpoints: list[JsonValue | Unparsed] = [start]
        self._patches: list[str | None] = []
        # The largest state (as DocumentMeter counts) among those kept or rebuilt:
        # what holding one of them costs, whatever the start and end texts say.
        self.peak_size = 0

    @classmethod
    def restored(cls, checkpoints: Sequence[tuple[int, str]], patches: list[str | None]) -> States:
        states = cls(None)
        states._indexes = [index for index, _ in checkpoints]
        states._checkpoints = [Unparsed(text) for _, text in checkpoints]
        states._patches = patches
        states.peak_size = max((len(text) for _, text in checkpoints), default=0)
        return states

    @property
    def last_index(self) -> int:
        return len(self._patches) - 1

    @property
    def checkpoint_count(self) -> int:
        return len(self._indexes)

    @property
    def last_checkpoint(self) -> int:
        return self._indexes[-1]

    def record(self, text: str | None) -> None:
        self._patches.append(text)

    def checkpoint(self, state: JsonValue) -> None:
        """Keep `state` as the state after the last recorded step; it must not change later."""
        self._indexes.append(self.last_index)
        self._checkpoints.append(state)

    def peek(self, index: int) -> JsonValue:
        """The state after step `index`, to read and never change (no copy if checkpointed)."""
        position = bisect_right(self._indexes, index) - 1
        if self._indexes[position] == index:
            return self._checkpoint(position)
        return self.after(index)

    def after(self, index: int) -> JsonValue:
        """A fresh copy of the state after step `index`."""
        position = bisect_right(self._indexes, index) - 1
        doc = clone(self._checkpoint(position))
        for text in self._patches[self._indexes[position] + 1 : index + 1]:
            if text is not None:
                doc = patch_in_place(doc, applied_ops(text))
        return doc

    def spaced(self, min_work: int) -> list[tuple[int, JsonValue]]:
        """Checkpoints at least `min_work` patch work apart: the start, those, and the last.

        Work counts as in `Tape`: patch text plus `_PATCH_WORK_BYTES` a patch.
        """
        kept = [0]
        work = 0
        for position in range(1, len(self._indexes)):
            first, last = self._indexes[position - 1] + 1, self._indexes[position] + 1
            work += sum(
                len(text) + _PATCH_WORK_BYTES
                for text in self._patches[first:last]
                if text is not None
            )
            if work >= min_work or position == len(self._indexes) - 1:
                kept.append(position)
                work = 0
        return [(self._indexes[p], self._checkpoint(p)) for p in dict.fromkeys(kept)]

    def _checkpoint(self, position: int) -> JsonValue:
        found = self._checkpoints[position]
        if isinstance(found, Unparsed):
            # Two threads may parse the same text at once; both get equal states,
            # and either may be kept: checkpoints are never mutated.
            parsed = parse_json(found.text)
            if parsed is MISSING:
                raise StateUnavailableError("a saved checkpoint is not valid JSON")
            self._checkpoints[position] = parsed
            return parsed
        return found


def applied_ops(text: str) -> list[JsonPatchOp]:
    """The operations of a patch that replay applied, parsed again for a rebuild.

    Plain `json.loads`: the text passed `parse_patch`'s checks when it was applied.
    A stored text that no longer parses makes the state unavailable, never raises.
    """
    try:
        ops: list[JsonPatchOp] = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise StateUnavailableError("a replayed patch no longer parses as JSON") from exc
    return ops


@dataclass(frozen=True, slots=True)
class Unparsed:
    """A checkpoint as saved JSON text, parsed when a state is first rebuilt from it."""

    text: str


class Tape:
    """One working document, patched in place step by step, with checkpoints.

    Its meter (built from the start state) bounds every state the tape makes:
    a patch whose operation would cross a limit is not applied at all.
    """

    def __init__(self, start: JsonValue, start_size: int, meter: DocumentMeter) -> None:
        self._states = States(start)
        self._doc = clone(start)
        self._meter = meter
        self._size = max(start_size, meter.size)
        self._states.peak_size = meter.size
        self._work = 0
        self.last_error = ""
        # Set when the last patch not applied was refused for crossing a limit.
        self.last_limit: DocumentLimitError | None = None

    @property
    def size(self) -> int:
        """The working document's size as its meter counts it (its compact JSON text)."""
        return self._meter.size

    def apply(self, text: str, ops: list[JsonPatchOp]) -> bool:
        """Apply the next step's patch, parsed from `text` into `ops` (which it consumes).

        Returns False, with the reason in `last_error` (and `last_limit` if an
        operation would have crossed a limit), when the patch does not apply.
        """
        totals = self._meter.totals
        try:
            self._doc = patch_in_place(self._doc, ops, self._meter)
        except (*PATCH_ERRORS, DocumentLimitError) as exc:
            # A patch can fail after some of its operations changed the working
            # document, so rebuild it instead of trusting what is left.
            self._meter.restore(totals)
            self._states.record(None)
            self._doc = self._states.after(self._states.last_index)
            self.last_error = str(exc) or type(exc).__name__
            self.last_limit = exc if isinstance(exc, DocumentLimitError) else None
            return False
        self._states.record(text)
        # What a patch built (a copy) can outweigh its text: checkpoints are
        # spaced by the state's real size then, not by the patch texts.
        self._size = max(self._size + len(text), self._meter.size)
        self._states.peak_size = max(self._states.peak_size, self._meter.size)
        self._work += len(text) + _PATCH_WORK_BYTES
        if self._work >= max(self._size, _MIN_CHECKPOINT_WORK):
            self._states.checkpoint(clone(self._doc))
            self._work = 0
        return True

    @property
    def document(self) -> JsonValue:
        """The working document after the last step (live: read, never keep or change)."""
        return self._doc

    def skip(self) -> None:
        self._states.record(None)

    def finish(self) -> States:
        """Hand over the states; the working document becomes the last checkpoint."""
        if self._states.last_checkpoint != self._states.last_index:
            self._states.checkpoint(self._doc)
        return self._states
