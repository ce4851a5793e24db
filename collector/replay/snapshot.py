"""Replay snapshots: a long replayed history, saved so a first view need not replay it.

Replaying a long run is nearly all patch application, which a restarted studio would
otherwise pay on the first view of every long run. For histories of at least
`MIN_SNAPSHOT_STEPS` steps the replayer saves each step (its transition's position,
sequence, changed paths and flags), the diagnostics and verdict, and checkpoint
states as JSON text; restoring parses nothing until a state is asked for. A snapshot
is used only while its evidence version is current and every step still lines up
with the transitions read; otherwise the caller replays afresh. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Final, cast, get_args

from collector.model import Execution, Transition, committed
from collector.replay.history import Diagnostic, History, Step, Verdict

MIN_SNAPSHOT_STEPS: Final = 1_000
# Restoring a state applies at most about this many states' worth of patch work after
# parsing one checkpoint: fewer checkpoints saved than replay keeps, each still quick.
SAVED_WORK_PER_STATE: Final = 4
# For small states, whose parse costs nothing, space checkpoints as if the state
# held this much: ~256 small patches (a few ms) between two saved checkpoints.
MIN_STATE_BYTES: Final = 64 * 1024

_APPLIED: Final = 1
_VERIFIED: Final = 2
_FOREIGN: Final = 4
# A step's flags character -> (applied, verified, foreign).
_FLAG_BITS: Final = {
    str(bits): (bool(bits & _APPLIED), bool(bits & _VERIFIED), bool(bits & _FOREIGN))
    for bits in range(8)
}


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a replay of one execution found, in the form the store saves."""

    run_id: str
    transitions_seen: int
    latest_span_unix_nano: int
    verdict: str
    start_sequence: int
    end_sequence: int | None
    diagnostics_json: str
    steps_json: str
    checkpoint_steps: list[int]
    checkpoint_states: list[str]

    @property
    def version(self) -> tuple[int, int]:
        """The evidence version (collector/evidence.py) the replay read."""
        return (self.transitions_seen, self.latest_span_unix_nano)


def worth_taking(history: History) -> bool:
    """Whether a history is long enough that restoring it beats replaying it.

    Never a convention run's: a snapshot keeps no digest marks and no rollbacks or
    rejections, which its page shows, so such a run is replayed whole.
    """
    execution = history.execution
    return (
        execution is not None
        and execution.convention_version is None
        and len(history.steps) >= MIN_SNAPSHOT_STEPS
    )


def take(
    history: History, transitions: Sequence[Transition], version: tuple[int, int]
) -> Snapshot | None:
    """A snapshot of `history`, replayed from `transitions` at evidence `version`.

    None for an in-flight history, or when `transitions` are not keyed as the
    store keys them. Whether a history is worth a snapshot is `worth_taking`.
    """
    execution = history.execution
    if execution is None:
        return None
    positions = {_key(t): index for index, t in enumerate(transitions)}
    if len(positions) != len(transitions):
        return None  # not as the store keeps them: a step could not be told apart
    steps = {
        "positions": [positions[_key(step.transition)] for step in history.steps],
        "sequences": [step.sequence for step in history.steps],
        "flags": "".join(str(_flags(step)) for step in history.steps),
        "paths": [step.changed_paths for step in history.steps],
    }
    state_bytes = max(len(execution.state_start or ""), MIN_STATE_BYTES)
    checkpoints = history.spaced_checkpoints(SAVED_WORK_PER_STATE * state_bytes)
    return Snapshot(
        run_id=execution.run_id,
        transitions_seen=version[0],
        latest_span_unix_nano=version[1],
        verdict=history.verdict,
        start_sequence=history.start_sequence,
        end_sequence=history.end_sequence,
        diagnostics_json=json.dumps([asdict(d) for d in history.diagnostics]),
        steps_json=json.dumps(steps, separators=(",", ":")),
        checkpoint_steps=[index for index, _ in checkpoints],
        checkpoint_states=[_compact(state) for _, state in checkpoints],
    )


def restore(
    snapshot: Snapshot, execution: Execution, transitions: Sequence[Transition]
) -> History | None:
    """The history the snapshot was taken of, or None if `transitions` no longer match it."""
    steps_data = json.loads(snapshot.steps_json)
    positions: list[int] = steps_data["positions"]
    sequences: list[int] = steps_data["sequences"]
    flags: str = steps_data["flags"]
    paths: list[list[str]] = steps_data["paths"]
    if (
        snapshot.verdict not in get_args(Verdict)
        or not len(positions) == len(sequences) == len(flags) == len(paths)
        or not set(flags) <= _FLAG_BITS.keys()
    ):
        return None
    steps: list[Step] = []
    for position, sequence, flag, changed in zip(positions, sequences, flags, paths, strict=True):
        if not 0 <= position < len(transitions):
            return None
        # As replay stepped through it (collector/model.py `committed`).
        transition = committed(transitions[position])
        if transition.sequence is not None and transition.sequence != sequence:
            return None
        applied, verified, foreign = _FLAG_BITS[flag]
        steps.append(Step(sequence, transition, tuple(changed), applied, verified, foreign))
    return History.restored(
        execution=execution,
        steps=tuple(steps),
        diagnostics=tuple(Diagnostic(**d) for d in json.loads(snapshot.diagnostics_json)),
        verdict=cast(Verdict, snapshot.verdict),
        start_sequence=snapshot.start_sequence,
        end_sequence=snapshot.end_sequence,
        checkpoints=list(zip(snapshot.checkpoint_steps, snapshot.checkpoint_states, strict=True)),
    )


def _key(transition: Transition) -> tuple[str, str, int]:
    # The store keeps one transition per (trace, span, event index).
    return (transition.trace_id, transition.span_id, transition.event_index)


def _flags(step: Step) -> int:
    return (
        (_APPLIED if step.applied else 0)
        | (_VERIFIED if step.verified else 0)
        | (_FOREIGN if step.foreign else 0)
    )


def _compact(state: object) -> str:
    """The state as JSON text the store can hold (UTF-8), as short as it can be."""
    text = json.dumps(state, separators=(",", ":"), ensure_ascii=False)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            # A lone surrogate (JSON allows "\ud800"; UTF-8 has no such character):
            # escaped, it reads back as the same state.
            return json.dumps(state, separators=(",", ":"))
    return text
