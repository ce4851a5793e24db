"""The replayed history of one execution's store: the types replay hands out, and reading them.

A `History` holds every state the store went through (rebuilt on demand from
checkpoints), which of them the evidence verifies (`Step`), and `Diagnostic`s that
say in plain words what is missing or contradictory. walk.py builds one by the rules
in docs/guarantees.md, "The rules replay follows"; snapshot.py saves a long one.

Invariant: a History is read-only once built, and every JSON value it hands out
is a fresh copy the caller owns, except the states `walk` and
`spaced_checkpoints` lend, which are read and never changed. Pure: no I/O, no
logging, no clock.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType
from typing import Final, Literal, NamedTuple, TypeAlias

from collector.model import Execution, Transition, withheld
from collector.replay.checkpoints import States, applied_ops

# Part of History's API (state_at raises it), so callers import it from here.
from collector.replay.checkpoints import StateUnavailableError as StateUnavailableError
from collector.replay.jsondoc import (
    MISSING,
    OPS_WITH_FROM,
    JsonValue,
    Missing,
    apply_op_recording,
    clone_or_missing,
    parse_json,
    parse_patch,
    patch_in_place,
)

Severity: TypeAlias = Literal["error", "warning", "info"]
Verdict: TypeAlias = Literal["verified", "partial", "failed", "in_flight", "not_applicable"]
DiagnosticCode: TypeAlias = Literal[
    "sequence_gap",
    "duplicate_sequence",
    "missing_trailing_transitions",
    "revision_discontinuity",
    "patch_failed",
    "end_state_mismatch",
    "claimed_reconstructable_but_failed",
    "otlp_data_dropped",
    "invalid_json_payload",
    "state_withheld",
    "owner_not_arrived",
    "foreign_writer",
    "unknown_contract_version",
    "no_start_state",
    "patch_not_committed",
    "document_limit_exceeded",
    # The state-evidence convention's (collector/producers/convention.py):
    "state_digest_mismatch",
    "sequence_reused",
    "store_changed_between_runs",
    "transaction_rolled_back",
    "update_rejected",
    "unknown_convention_version",
    "digests_not_checked",
]


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One integrity finding. `code` is stable; `message` is for people."""

    code: DiagnosticCode
    severity: Severity
    message: str
    sequence: int | None = None
    span_id: str | None = None
    # The other trace a finding points at (a foreign writer's), if any.
    trace_id: str | None = None


class Step(NamedTuple):
    """One transition as replay saw it: `sequence` (for contract 1, the position in time
    order), whether its patch was `applied`, the state after it `verified`, and whether
    it was carried outside the owner (`foreign`)."""

    sequence: int
    transition: Transition
    changed_paths: tuple[str, ...]
    applied: bool
    verified: bool
    foreign: bool
    # The producer's digest of the state after this step (convention runs): True when
    # the replayed state hashes to it, False when not, None when there was none to check.
    digest_matched: bool | None = None


@dataclass(frozen=True, slots=True)
class OpChange:
    """What one patch operation did at its target, for a diff view: `before` (MISSING for
    an insert), `after` (MISSING for a remove); a move's `from_path` lost `after`."""

    op: str
    path: str
    from_path: str | None
    before: JsonValue | Missing
    after: JsonValue | Missing


class History:
    """The replayed history of one execution's store; read-only once built.

    States are rebuilt on demand from checkpoints (collector/replay/checkpoints.py), so
    holding a History costs about the size of its patches plus a few states.
    """

    def __init__(
        self,
        *,
        execution: Execution | None,
        steps: tuple[Step, ...],
        diagnostics: tuple[Diagnostic, ...],
        verdict: Verdict,
        start_sequence: int,
        end_sequence: int | None,
        states: States | None,
        recorded_end: JsonValue | Missing,
        notes: tuple[Transition, ...] = (),
    ) -> None:
        self.execution: Final = execution
        # A convention run's rollbacks and rejections (`Transition.note_kind`), in time
        # order: they changed nothing, so they are no steps, only entries of the timeline.
        self.notes: Final = notes
        self.steps: Final = steps
        self.diagnostics: Final = diagnostics
        self.verdict: Final = verdict
        self.start_sequence: Final = start_sequence
        self.end_sequence: Final = end_sequence
        self._states = states
        self._recorded_end = recorded_end
        self._sequences = [step.sequence for step in steps]
        # Every lookup by sequence bisects this list, so a step out of order would
        # silently hide its neighbours. Sorting sorted input is one linear pass.
        if sorted(self._sequences) != self._sequences:
            raise ValueError("a History's steps must be in ascending sequence order")

    @property
    def recorded_end(self) -> JsonValue | Missing:
        """The producer's end state, parsed: a copy, or MISSING if absent or unreadable."""
        return clone_or_missing(self._recorded_end)

    @property
    def checkpoint_count(self) -> int:
        """Whole-state copies kept for `state_at` (start and end included); 0 without states."""
        return self._states.checkpoint_count if self._states is not None else 0

    @property
    def peak_state_size(self) -> int:
        """The largest state this history holds, in (compact) JSON characters; 0 without states."""
        return self._states.peak_size if self._states is not None else 0

    @property
    def states_or_none(self) -> States | None:
        """The states this history rebuilds from, for a History made from this one."""
        return self._states

    @property
    def has_states(self) -> bool:
        """Whether `state_at` can answer at all (there is a usable start state)."""
        return self._states is not None

    @classmethod
    def restored(
        cls,
        *,
        execution: Execution,
        steps: tuple[Step, ...],
        diagnostics: tuple[Diagnostic, ...],
        verdict: Verdict,
        start_sequence: int,
        end_sequence: int | None,
        checkpoints: Sequence[tuple[int, str]],
    ) -> History:
        """A History rebuilt from what a replay saved (snapshot.py), patching nothing;
        `checkpoints` are `spaced_checkpoints` as JSON text."""
        states = None
        if checkpoints:
            patches = [step.transition.patch_json if step.applied else None for step in steps]
            states = States.restored(checkpoints, patches)
        return cls(
            execution=execution,
            steps=steps,
            diagnostics=diagnostics,
            verdict=verdict,
            start_sequence=start_sequence,
            end_sequence=end_sequence,
            states=states,
            recorded_end=recorded_end_of(execution),
        )

    def spaced_checkpoints(self, min_work: int) -> list[tuple[int, JsonValue]]:
        """(step index, state) checkpoints at least `min_work` patch work apart, start (-1)
        and end kept: what a snapshot saves. The states are lent: never change them."""
        if self._states is None:
            return []
        return self._states.spaced(min_work)

    @cached_property
    def missing_sequences(self) -> Mapping[int | None, tuple[int, int]]:
        """The holes in the run's sequences: (first, last) missing, keyed by the step after each.

        The key None holds the trailing hole before the declared end. Contract 1 has
        no sequences and a run in flight no bounds, so only holes between received
        sequences are known there.
        """
        if any(step.transition.sequence is None for step in self.steps):
            return MappingProxyType({})
        lower = self.start_sequence if self.execution is not None else None
        return MappingProxyType(holes(self._sequences, lower, self.end_sequence))

    @cached_property
    def missing_count(self) -> int:
        """How many transitions of the run never arrived: the sizes of `missing_sequences`."""
        return sum(last - first + 1 for first, last in self.missing_sequences.values())

    def missing_through(self, sequence: int) -> int:
        """How many of the missing transitions come at or before `sequence`."""
        return sum(
            min(last, sequence) - first + 1
            for first, last in self.missing_sequences.values()
            if first <= sequence
        )

    def index_at(self, sequence: int) -> int:
        """Where in `steps` the last step at or before `sequence` is; -1 before the first.

        The step whose state `state_at(sequence)` shows: inside a hole, the last
        one received before it.
        """
        return bisect_right(self._sequences, sequence) - 1

    @property
    def last_sequence(self) -> int:
        """The highest sequence `state_at` accepts: the interval's end or the last step."""
        candidates = [self.start_sequence, *self._sequences[-1:]]
        if self.end_sequence is not None:
            candidates.append(self.end_sequence)
        return max(candidates)

    def step(self, sequence: int) -> Step:
        """The step recorded at `sequence`; KeyError if none was received."""
        return self.steps[self._index_of(sequence)]

    def find_step(self, sequence: int) -> Step | None:
        """The step recorded at `sequence`; None if none was received (the start state, a hole)."""
        index = self._position(sequence)
        return None if index is None else self.steps[index]

    def state_at(self, sequence: int) -> JsonValue:
        """The state after every received step up to `sequence` (start state at the start bound).

        For a sequence inside a gap this is the best-effort state after the last
        received step; `verified_at` says whether to trust it.
        """
        states = self._require_states(sequence)
        return states.after(self.index_at(sequence))

    def peek_at(self, sequence: int) -> JsonValue:
        """`state_at`, lent rather than copied where a checkpoint holds it: read, never change."""
        return self._require_states(sequence).peek(self.index_at(sequence))

    def verified_at(self, sequence: int) -> bool:
        """Whether the state after `sequence` is proven by the evidence."""
        self._require_states(sequence)
        index = self.index_at(sequence)
        if index < 0:
            return sequence == self.start_sequence
        step = self.steps[index]
        return step.verified and step.sequence == sequence

    @property
    def replayed_end(self) -> JsonValue:
        """The state after the last step, as replayed (best effort if unverified)."""
        return self.state_at(self.last_sequence)

    def changes(self, sequence: int) -> tuple[OpChange, ...]:
        """Before and after values of each operation of the step at `sequence`.

        Empty when the patch was not applied (invalid, withheld or failed).
        """
        index = self._index_of(sequence)
        step = self.steps[index]
        states = self._require_states(sequence)
        if not step.applied:
            return ()
        doc = states.after(index - 1)
        changes: list[OpChange] = []
        for op in parse_patch(step.transition.patch_json) or ():
            before, after, doc = apply_op_recording(doc, op)
            kind = str(op["op"])
            source = op.get("from") if kind in OPS_WITH_FROM else None
            from_path = source if isinstance(source, str) else None
            changes.append(OpChange(kind, str(op["path"]), from_path, before, after))
        return tuple(changes)

    def _index_of(self, sequence: int) -> int:
        index = self._position(sequence)
        if index is None:
            raise KeyError(f"no transition with sequence {sequence} was received")
        return index

    def _position(self, sequence: int) -> int | None:
        """Where in `steps` the step at `sequence` is, or None if it was not received."""
        index = self.index_at(sequence)
        return index if index >= 0 and self._sequences[index] == sequence else None

    def _require_states(self, sequence: int) -> States:
        if self._states is None:
            raise StateUnavailableError(
                "no state can be rebuilt: the start state is missing, withheld or unreadable"
            )
        if not self.start_sequence <= sequence <= self.last_sequence:
            raise StateUnavailableError(
                f"sequence {sequence} is outside this execution's range: the start "
                f"state is at {self.start_sequence}, the last state at {self.last_sequence}"
            )
        return self._states


def walk(history: History) -> Iterator[tuple[Step, JsonValue]]:
    """Each step with the state after it, in one forward pass (for indexing and export).

    The state yielded is the live working document, lent so a full walk costs one
    replay rather than a copy per step: read it before advancing, never mutate it.
    Raises StateUnavailableError when the history has no start state.
    """
    doc = history._require_states(history.start_sequence).after(-1)
    for step in history.steps:
        if step.applied:
            doc = patch_in_place(doc, applied_ops(step.transition.patch_json))
        yield step, doc


def holes(
    sequences: Iterable[int], lower: int | None, upper: int | None
) -> dict[int | None, tuple[int, int]]:
    """The runs missing from ascending `sequences` in (lower, upper]: (first, last) of each,
    keyed by the sequence after it (None: the trailing run). A None bound is unknown,
    so nothing beyond the received sequences counts as missing there."""
    found: dict[int | None, tuple[int, int]] = {}
    expected = None if lower is None else lower + 1
    for sequence in sequences:
        if expected is not None and sequence > expected:
            found[sequence] = (expected, sequence - 1)
        expected = sequence + 1
    if expected is not None and upper is not None and expected <= upper:
        found[None] = (expected, upper)
    return found


def recorded_end_of(execution: Execution) -> JsonValue | Missing:
    """The producer's end state, parsed; MISSING if withheld, absent or unreadable."""
    if withheld(execution.state_end_mode) or execution.state_end is None:
        return MISSING
    return parse_json(execution.state_end)
