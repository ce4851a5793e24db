"""Replay stage: rebuild one execution's state history from its store transitions.

Input: the owner `Execution` (None while it is still in flight), the `Transition`s
recorded for its store, and the `EvidenceSpan`s that carried them. Output: a
`History` (collector/replay/history.py) holding every state the store went through,
which of those states the evidence verifies, and `Diagnostic`s that say in plain
words what is missing or contradictory and what to do about it.

Invariant: nothing is hidden and nothing is overstated. Every transition of the
interval appears as a `Step`, and every state can be looked at, but a state is
marked verified only when the evidence proves it. Pure: no I/O, no logging, no
clock; inputs are never mutated.

This module walks the chain selection.py picked, checks its end and gives the
verdict. The rules of verification, severity and verdicts are specified in
docs/guarantees.md, "The rules replay follows".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Final, TypeAlias

from collector.model import (
    NOTE_REJECTION,
    EvidenceSpan,
    Execution,
    Transition,
    committed,
    withheld,
)
from collector.producers.convention import KNOWN_VERSIONS as KNOWN_CONVENTION_VERSIONS
from collector.replay.canonical import state_digest
from collector.replay.checkpoints import States, Tape
from collector.replay.findings import (
    claimed_reconstructable_findings,
    counted,
    dropped_findings,
    duplicate_findings,
    foreign_findings,
    gap_findings,
    reused_findings,
    revision_findings,
    span_label,
    unknown_version_findings,
)
from collector.replay.history import (
    Diagnostic,
    DiagnosticCode,
    History,
    Severity,
    Step,
    Verdict,
    holes,
    recorded_end_of,
)
from collector.replay.jsondoc import (
    DEFAULT_LIMITS,
    MISSING,
    OPS_WITH_FROM,
    DocumentLimitError,
    DocumentLimits,
    DocumentMeter,
    JsonPatchOp,
    JsonValue,
    Missing,
    changed_paths,
    iter_differences,
    json_equal,
    parse_json,
    parse_patch,
)
from collector.replay.selection import (
    Interval,
    Sequenced,
    assign_sequences,
    contract_version,
    foreign_by_carrier,
    in_flight_order,
    interval_of,
    own_evidence,
    own_run_first,
    resolve_duplicates,
    select,
)

MISMATCH_POINTERS_SHOWN: Final = 5
MIB: Final = 1024 * 1024
# Canonical JSON one replay may hash to check a convention run's step digests: at
# most a few hundred ms; past it, steps are checked no more, except the last.
DIGEST_BUDGET_CHARS: Final = 256 * MIB
# A patch quoted in a finding is cut here: the finding is a sentence, not a payload.
PATCH_SHOWN_CHARS: Final = 200

AppliedObserver: TypeAlias = Callable[[Sequence[JsonPatchOp], tuple[str, ...], JsonValue], None]
"""Called after each patch replay applies: its ops, their `changed_paths`, the live document.

All are replay's own: read them at once (op names and pointers only: the
values of add/replace ops may now be part of the document) and change none.
It sees exactly what `walk` (collector/replay/history.py) would yield for the
applied steps, without a second pass over the patches.
"""


def replay(
    execution: Execution | None,
    transitions: Iterable[Transition],
    *,
    evidence_spans: Iterable[EvidenceSpan] = (),
    owner_span_ids: Collection[str] | None = None,
    on_applied: AppliedObserver | None = None,
    limits: DocumentLimits = DEFAULT_LIMITS,
) -> History:
    """Replay `execution`'s store from its start state through `transitions`.

    `transitions` may hold other stores' and sequences outside the interval (ignored).
    `evidence_spans` should cover the owner and the carriers, for OTLP loss counters;
    with `owner_span_ids` (the owner's subtree), a transition carried elsewhere is
    foreign. No state replay makes crosses `limits`.
    """
    received = tuple(transitions)
    notes = tuple(t for t in received if t.note_kind is not None)
    if notes:
        received = tuple(t for t in received if t.note_kind is None)
    evidence = tuple(evidence_spans)
    if execution is None:
        return _in_flight(received, evidence)
    return _Replay(
        execution, received, evidence, owner_span_ids, on_applied, limits, notes
    ).run()


def replay_in_flight(
    provisional: Execution,
    transitions: Iterable[Transition],
    *,
    evidence_spans: Iterable[EvidenceSpan] = (),
    limits: DocumentLimits = DEFAULT_LIMITS,
) -> History:
    """Replay a convention run whose owner span has not arrived, from its start event.

    `provisional` is the run as its start event describes it (no end, no upper
    bound): its start state and every transition received so far are replayed and
    checked against their digests, so a run in flight shows verified states step by
    step. The verdict stays `in_flight` until the owner span brings the end.
    """
    history = replay(provisional, transitions, evidence_spans=evidence_spans, limits=limits)
    waiting = Diagnostic(
        "owner_not_arrived",
        "info",
        "The run's execution span has not arrived yet (it is exported when the run "
        "ends); the states below are rebuilt from its start event and the steps "
        "received so far.",
    )
    return History(
        execution=history.execution,
        steps=history.steps,
        diagnostics=(waiting, *history.diagnostics),
        verdict="in_flight",
        start_sequence=history.start_sequence,
        end_sequence=None,
        states=history.states_or_none,
        recorded_end=MISSING,
        notes=history.notes,
    )


# --- the replay itself ---------------------------------------------------------------


class _Replay:
    """One replay run. Collects diagnostics while it walks the chain once."""

    def __init__(
        self,
        execution: Execution,
        received: tuple[Transition, ...],
        evidence: tuple[EvidenceSpan, ...],
        owner_span_ids: Collection[str] | None,
        on_applied: AppliedObserver | None = None,
        limits: DocumentLimits = DEFAULT_LIMITS,
        notes: tuple[Transition, ...] = (),
    ) -> None:
        self.execution = execution
        self.notes = notes
        # Convention runs carry a digest of every state (collector/replay/canonical.py).
        self.check_digests = execution.convention_version is not None
        self.received = received
        self.evidence = evidence
        self.owner_span_ids = owner_span_ids
        self.on_applied = on_applied
        self.limits = limits
        self.diagnostics: list[Diagnostic] = []
        # The spans whose losses touch this run (selection.own_evidence), set by `run`.
        self.own_evidence: list[EvidenceSpan] = []

    def report(
        self,
        code: DiagnosticCode,
        severity: Severity,
        message: str,
        *,
        sequence: int | None = None,
        span_id: str | None = None,
        trace_id: str | None = None,
    ) -> None:
        self.diagnostics.append(Diagnostic(code, severity, message, sequence, span_id, trace_id))

    def run(self) -> History:
        execution = self.execution
        version = contract_version(execution, self.received)
        self.diagnostics += unknown_version_findings(execution, version)
        declared = execution.convention_version
        if declared is not None and declared not in KNOWN_CONVENTION_VERSIONS:
            self.report(
                "unknown_convention_version",
                "warning",
                f"The run declares state-evidence convention version {declared}, which this "
                f"statetrail does not implement (it knows "
                f"{', '.join(map(str, sorted(KNOWN_CONVENTION_VERSIONS)))}), so its spans are "
                "kept but no state is rebuilt from them. Upgrade statetrail.",
            )
        self.own_evidence = own_evidence(
            execution, self.received, self.evidence, self.owner_span_ids
        )
        drops = len(self.diagnostics)
        self.diagnostics += dropped_findings(self.own_evidence)
        if execution.store_id is None:
            return self._history((), "not_applicable", Interval(0, 0, by_time=False))
        interval = interval_of(execution, version)
        sequenced, ambiguous, foreign = self._select(interval)
        start = self._start_state(has_transitions=bool(sequenced))
        recorded_end = self._recorded_end()
        meter = self._meter(start)

        if start is MISSING or meter is None:
            steps = tuple(_unreplayed_step(sequence, t, foreign) for sequence, t in sequenced)
            nothing = not steps and recorded_end is MISSING and execution.state_end is None
            verdict: Verdict = "not_applicable" if nothing or self._start_withheld() else "failed"
            return self._finish(steps, verdict, interval, None, recorded_end)

        start_matches = self._check_start_digest(start, interval)
        self._check_chain(start, interval)
        tape = Tape(start, len(execution.state_start or ""), meter)
        chain = self._walk(tape, sequenced, interval, ambiguous, foreign, start_matches)
        states = tape.finish()
        last_received = sequenced[-1][0] if sequenced else interval.lower
        complete = chain.complete and (interval.upper is None or last_received >= interval.upper)
        if not interval.by_time and interval.upper is not None and not holes(
            (sequence for sequence, _ in sequenced), interval.lower, interval.upper
        ):
            # Nothing of this run is missing: what its spans dropped was other stores'.
            found = dropped_findings(self.own_evidence, interval_whole=True)
            self.diagnostics[drops : drops + len(found)] = found
        end_matches = self._check_end(states, len(sequenced) - 1, recorded_end, complete)
        steps = chain.steps
        if complete and end_matches is False:
            steps = tuple(_unverify(step) for step in steps)
        verdict = _verdict(complete, end_matches, chain.failed_at_first_step)
        verdict = _digest_verdict(verdict, start_matches, chain, self._end_digest_matches())
        return self._finish(steps, verdict, interval, states, recorded_end)

    def _select(self, interval: Interval) -> tuple[Sequenced, frozenset[int], frozenset[int]]:
        """The chain to walk, its ambiguous and its foreign sequences, reporting on each."""
        execution = self.execution
        grouped = select(execution, self.received, interval)
        if self.check_digests:
            grouped, reused = own_run_first(grouped, execution.run_id)
            self.diagnostics += reused_findings(execution.store_id, reused)
        chosen, conflicts = resolve_duplicates(grouped)
        sequenced = assign_sequences(chosen, interval)
        carriers = foreign_by_carrier(execution, sequenced, self.owner_span_ids)
        self.diagnostics += duplicate_findings(execution.store_id, conflicts)
        self.diagnostics += gap_findings(execution.store_id, sequenced, interval)
        self.diagnostics += revision_findings(execution, sequenced, interval)
        self.diagnostics += foreign_findings(execution, carriers)
        ambiguous = frozenset(c.sequence for c in conflicts if c.patches_differ)
        foreign = frozenset(sequence for carried in carriers.values() for sequence, _ in carried)
        return sequenced, ambiguous, foreign

    def _finish(
        self,
        steps: tuple[Step, ...],
        verdict: Verdict,
        interval: Interval,
        states: States | None,
        recorded_end: JsonValue | Missing,
    ) -> History:
        if self.execution.reconstructable and verdict in ("partial", "failed"):
            missing = 0
            if not interval.by_time:
                found = holes((step.sequence for step in steps), interval.lower, interval.upper)
                missing = sum(last - first + 1 for first, last in found.values())
            self.diagnostics += claimed_reconstructable_findings(
                self.diagnostics, self.own_evidence, missing
            )
        return self._history(steps, verdict, interval, states=states, recorded_end=recorded_end)

    # states -----------------------------------------------------------------------------

    def _start_withheld(self) -> bool:
        return withheld(self.execution.state_start_mode)

    def _start_state(self, *, has_transitions: bool) -> JsonValue | Missing:
        """The parsed start state, or MISSING (with a finding) when replay cannot begin."""
        execution = self.execution
        text = execution.state_start
        if self._start_withheld():
            self.report(
                "state_withheld",
                "info",
                f"The producer withheld the start state (mode {execution.state_start_mode!r}, "
                f"policy {execution.state_start_policy!r}), so no state can be replayed.",
            )
            return MISSING
        if text is None:
            if has_transitions or execution.state_end is not None:
                self.report(
                    "no_start_state",
                    "error",
                    "The run recorded no start state, so none of its states can be rebuilt. "
                    "Check that the producer exports the workflow span's state attributes.",
                )
            return MISSING
        parsed = parse_json(text)
        if parsed is MISSING:
            self.report(
                "invalid_json_payload",
                "error",
                f"The start state is not valid JSON ({len(text)} characters), so no state can "
                "be rebuilt. It was probably cut by OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT; unset "
                "or raise that limit in the application.",
            )
        return parsed

    def _meter(self, start: JsonValue | Missing) -> DocumentMeter | None:
        """The start state's meter, or None (with a finding) if it is over a limit already."""
        if start is MISSING:
            return None
        try:
            return DocumentMeter(start, self.limits)
        except DocumentLimitError as exc:
            self.report(
                "document_limit_exceeded",
                "error",
                f"The start state is over a limit on replayed states: {exc} "
                f"({limit_setting(exc)}). No state is rebuilt, so none can be shown.",
            )
            return None

    def _recorded_end(self) -> JsonValue | Missing:
        """`recorded_end_of`, reporting why the end state cannot be compared with."""
        execution = self.execution
        parsed = recorded_end_of(execution)
        mode = execution.state_end_mode
        if withheld(mode):
            self.report(
                "state_withheld",
                "info",
                f"The producer withheld the end state (mode {mode!r}, policy "
                f"{execution.state_end_policy!r}), so the replay cannot be checked against it.",
            )
        elif parsed is MISSING and execution.state_end is not None:
            self.report(
                "invalid_json_payload",
                "error",
                f"The end state is not valid JSON ({len(execution.state_end)} characters), so "
                "the replay cannot be checked against it. It was probably cut by "
                "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT; unset or raise that limit.",
            )
        return parsed

    def _walk(
        self,
        tape: Tape,
        sequenced: Sequenced,
        interval: Interval,
        ambiguous: frozenset[int],
        foreign: frozenset[int],
        start_matches: bool = True,
    ) -> _Chain:
        steps: list[Step] = []
        verified = start_matches
        complete = True
        failed_at_first_step = False
        digest_mismatches: list[int] = []
        mismatch_at_first_step = False
        # Digests are checked while their text stays within DIGEST_BUDGET_CHARS; the
        # last step's always is.
        digest_work = 0
        unchecked: list[int] = []
        last_sequence = sequenced[-1][0] if sequenced else None
        skipped_after_doubt: list[int] = []
        over_limit: list[int] = []
        previous = interval.lower
        for sequence, recorded in sequenced:
            if not interval.by_time and sequence != previous + 1:
                verified = complete = False
            previous = sequence
            transition = self._committed(sequence, recorded)
            ops = self._usable_patch(sequence, transition)
            paths = changed_paths(ops or ())
            applied = ops is not None and tape.apply(transition.patch_json, ops)
            if applied and ops is not None and self.on_applied is not None:
                self.on_applied(ops, paths, tape.document)
            if ops is None:
                tape.skip()
            elif not applied and tape.last_limit is not None:
                if not over_limit:
                    self._report_over_limit(sequence, transition, ops, tape.last_limit)
                over_limit.append(sequence)
            elif not applied and verified:
                self._report_patch_failed(sequence, transition, tape.last_error)
                failed_at_first_step = not steps
            elif not applied:
                skipped_after_doubt.append(sequence)
            if not applied or sequence in ambiguous:
                verified = complete = False
            matched = None
            if applied and self.check_digests and transition.state_digest is not None:
                if sequence != last_sequence and digest_work + tape.size > DIGEST_BUDGET_CHARS:
                    unchecked.append(sequence)
                else:
                    digest_work += tape.size
                    matched = state_digest(tape.document) == transition.state_digest
            if matched is False:
                if not digest_mismatches:
                    self._report_digest_mismatch(sequence, transition, after_doubt=not verified)
                    mismatch_at_first_step = not steps
                digest_mismatches.append(sequence)
                verified = False
            steps.append(
                Step(
                    sequence=sequence,
                    transition=transition,
                    changed_paths=paths,
                    applied=applied,
                    verified=verified,
                    foreign=sequence in foreign,
                    digest_matched=matched,
                )
            )
        if skipped_after_doubt:
            self.report(
                "patch_failed",
                "warning",
                f"{counted(len(skipped_after_doubt), 'patch', 'patches')} from sequence "
                f"{skipped_after_doubt[0]} "
                "did not apply to the best-effort state that follows missing or broken "
                "evidence; they were skipped. This follows from the earlier findings.",
                sequence=skipped_after_doubt[0],
            )
        if len(over_limit) > 1:
            self.report(
                "document_limit_exceeded",
                "warning",
                f"{counted(len(over_limit) - 1, 'later patch', 'later patches')} from sequence "
                f"{over_limit[1]} would also have taken the replayed state past a limit; "
                "they were not applied either.",
                sequence=over_limit[1],
            )
        if unchecked:
            self.report(
                "digests_not_checked",
                "info",
                f"The digests of {counted(len(unchecked), 'step', 'steps')} from sequence "
                f"{unchecked[0]} were not checked: hashing every state of this long history "
                f"would take more than {DIGEST_BUDGET_CHARS // MIB} MiB of canonical JSON. "
                "Their states are still verified by the chain of patches and the end check.",
                sequence=unchecked[0],
            )
        if len(digest_mismatches) > 1:
            self.report(
                "state_digest_mismatch",
                "warning",
                f"{counted(len(digest_mismatches) - 1, 'later step', 'later steps')} from "
                f"sequence {digest_mismatches[1]} also replayed to states whose digests differ "
                "from the producer's; this follows from the first mismatch.",
                sequence=digest_mismatches[1],
            )
        return _Chain(
            tuple(steps), complete, failed_at_first_step, not digest_mismatches,
            mismatch_at_first_step,
        )

    # digests (convention runs) ----------------------------------------------------------

    def _check_start_digest(self, start: JsonValue, interval: Interval) -> bool:
        """Whether the start state hashes to the producer's start digest (reported if not)."""
        recorded = self.execution.state_start_digest
        if not self.check_digests or recorded is None:
            return True
        if state_digest(start) == recorded:
            return True
        self.report(
            "state_digest_mismatch",
            "error",
            f"The start state does not hash to the digest the producer recorded for it "
            f"({recorded[:12]}…): the start state received is not the one the run started "
            "from, so none of its states can be verified.",
            sequence=interval.lower,
        )
        return False

    def _report_digest_mismatch(
        self, sequence: int, transition: Transition, *, after_doubt: bool
    ) -> None:
        """The first step whose state differs from its digest: an error, or a warning when
        earlier missing or refused evidence already explains it."""
        why = (
            "this follows from the earlier findings (the state replay had was already "
            "best effort)."
            if after_doubt
            else "this step's evidence is wrong or incomplete, so the states from here on "
            "cannot be verified."
        )
        self.report(
            "state_digest_mismatch",
            "warning" if after_doubt else "error",
            f"After transition {sequence} (action {transition.action!r}, span "
            f"{span_label(transition)}) the replayed state does not hash to the digest "
            f"the producer recorded ({(transition.state_digest or '')[:12]}…): {why}",
            sequence=sequence,
            span_id=transition.span_id,
        )

    def _end_digest_matches(self) -> bool:
        """Whether the recorded end state hashes to its recorded digest (reported if not)."""
        execution = self.execution
        recorded = execution.state_end_digest
        end = recorded_end_of(execution)
        if not self.check_digests or recorded is None or end is MISSING:
            return True
        if state_digest(end) == recorded:
            return True
        self.report(
            "state_digest_mismatch",
            "error",
            f"The recorded end state does not hash to the end digest the producer "
            f"recorded ({recorded[:12]}…), so the end cannot be trusted.",
            sequence=execution.transition_end,
        )
        return False

    def _check_chain(self, start: JsonValue, interval: Interval) -> None:
        """Compare the start with the state after the store's previous recorded transition.

        Runs of one store follow each other (a LangGraph thread's interrupted run and its
        resume); a start that differs from where the store's last recorded transition
        left it means the state changed in between outside any recorded transition.
        """
        if not self.check_digests:
            return
        store_id = self.execution.store_id
        earlier = [
            t for t in self.received
            if t.store_id == store_id and t.sequence is not None
            and t.sequence <= interval.lower and t.state_digest is not None
        ]
        if not earlier:
            return
        previous = max(earlier, key=lambda t: (t.sequence or 0, t.time_unix_nano))
        if previous.state_digest == state_digest(start):
            return
        self.report(
            "store_changed_between_runs",
            "info",
            f"This run's start state differs from the state store {store_id} was left in "
            f"by transition {previous.sequence} (run {previous.run_id}): it changed in "
            "between without a recorded transition (an update made outside a run, such as "
            "LangGraph's update_state, or a fork from an earlier checkpoint).",
            sequence=interval.lower,
        )

    def _note_findings(self, interval: Interval) -> tuple[Transition, ...]:
        """This run's rollbacks and rejections, each reported as an info finding."""
        run_id = self.execution.run_id
        mine = tuple(sorted(
            (t for t in self.notes
             if t.store_id == self.execution.store_id and t.run_id == run_id),
            key=lambda t: (t.time_unix_nano, t.event_index),
        ))
        for note in mine:
            after = note.note_after_sequence
            where = f" after sequence {after}" if after is not None else ""
            who = f" by {note.action!r}" if note.action else ""
            if note.note_kind == NOTE_REJECTION:
                field = note.note_field or "(field not known)"
                self.report(
                    "update_rejected",
                    "info",
                    f"An update{who} was rejected{where} at {field}: "
                    f"{note.note_message or 'no message'}. It changed nothing.",
                    sequence=after,
                    span_id=note.span_id,
                )
            else:
                reason = f" ({note.note_message})" if note.note_message else ""
                self.report(
                    "transaction_rolled_back",
                    "info",
                    f"Transaction {note.transaction_id or ''} run{who} was rolled back{where}"
                    f"{reason}; its writes were discarded and changed nothing.",
                    sequence=after,
                    span_id=note.span_id,
                )
        return mine

    def _committed(self, sequence: int, transition: Transition) -> Transition:
        """`committed(transition)`, saying so when the store did not commit its patch."""
        effective = committed(transition)
        if effective is not transition:
            patch = transition.patch_json
            shown = patch if len(patch) <= PATCH_SHOWN_CHARS else patch[:PATCH_SHOWN_CHARS] + "…"
            self.report(
                "patch_not_committed",
                "info",
                f"Transition {sequence} (action {transition.action!r}, span "
                f"{span_label(transition)}) recorded the patch {shown}, but the store's "
                f"revision stayed {transition.revision_before}: its live state did not change "
                "(the values are equal in Python but serialize differently, like Decimal "
                "0.10 and 0.1), so the patch changed nothing and is not replayed.",
                sequence=sequence,
                span_id=transition.span_id,
            )
            return effective
        return transition

    def _usable_patch(self, sequence: int, transition: Transition) -> list[JsonPatchOp] | None:
        """The parsed patch, or None (reported here) when it cannot be applied at all."""
        if withheld(transition.patch_mode):
            self.report(
                "state_withheld",
                "warning",
                f"The patch of transition {sequence} was withheld by the producer (mode "
                f"{transition.patch_mode!r}), so the states from here on cannot be verified.",
                sequence=sequence,
                span_id=transition.span_id,
            )
            return None
        ops = parse_patch(transition.patch_json)
        if ops is None:
            self.report(
                "invalid_json_payload",
                "error",
                f"The patch of transition {sequence} (span {span_label(transition)}) is not a "
                f"valid JSON Patch ({len(transition.patch_json)} characters), so the states "
                "from here on cannot be verified. A cut payload usually means "
                "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT is set in the application.",
                sequence=sequence,
                span_id=transition.span_id,
            )
        return ops

    def _report_patch_failed(self, sequence: int, transition: Transition, error: str) -> None:
        self.report(
            "patch_failed",
            "error",
            f"The patch of transition {sequence} (action {transition.action!r}, span "
            f"{span_label(transition)}) does not apply to the replayed state: {error}. "
            "It was skipped, and the states from here on cannot be verified.",
            sequence=sequence,
            span_id=transition.span_id,
        )

    def _report_over_limit(
        self,
        sequence: int,
        transition: Transition,
        ops: list[JsonPatchOp],
        exc: DocumentLimitError,
    ) -> None:
        index = exc.op_index or 0
        op = _op_label(ops[index]) if index < len(ops) else "an operation"
        self.report(
            "document_limit_exceeded",
            "error",
            f"The patch of transition {sequence} (action {transition.action!r}, span "
            f"{span_label(transition)}) was not applied: its operation {index + 1} of "
            f"{len(ops)} ({op}) would take the replayed state past a limit: {exc} "
            f"({limit_setting(exc)}). The history stops there: the states from sequence "
            f"{sequence} on are best effort and cannot be verified.",
            sequence=sequence,
            span_id=transition.span_id,
        )

    def _check_end(
        self, states: States, last_index: int, recorded: JsonValue | Missing, complete: bool
    ) -> bool | None:
        """Compare the replayed end with the recorded one; None when there is nothing to compare."""
        if recorded is MISSING:
            return None
        replayed = states.peek(last_index)
        if json_equal(replayed, recorded):
            return True
        mismatched = [
            pointer or "/ (the whole state)"
            for pointer, _, _ in islice(
                iter_differences(replayed, recorded), MISMATCH_POINTERS_SHOWN + 1
            )
        ]
        shown = ", ".join(mismatched[:MISMATCH_POINTERS_SHOWN])
        more = " and more" if len(mismatched) > MISMATCH_POINTERS_SHOWN else ""
        if complete:
            advice = (
                "Every transition arrived and applied, so the evidence contradicts itself; "
                "none of the replayed states can be trusted."
            )
        else:
            advice = "This is expected after the missing or broken evidence reported above."
        self.report(
            "end_state_mismatch",
            "error" if complete else "warning",
            f"The replayed end state differs from the recorded end state at {shown}{more}. "
            + advice,
            sequence=self.execution.transition_end,
        )
        return False

    def _history(
        self,
        steps: tuple[Step, ...],
        verdict: Verdict,
        interval: Interval,
        *,
        states: States | None = None,
        recorded_end: JsonValue | Missing = MISSING,
    ) -> History:
        upper = interval.upper
        if interval.by_time:
            upper = len(steps)
        notes = self._note_findings(interval) if self.notes else ()
        return History(
            execution=self.execution,
            steps=steps,
            diagnostics=tuple(self.diagnostics),
            verdict=verdict,
            start_sequence=interval.lower,
            end_sequence=upper,
            states=states,
            recorded_end=recorded_end,
            notes=notes,
        )


@dataclass(frozen=True, slots=True)
class _Chain:
    steps: tuple[Step, ...]
    complete: bool
    failed_at_first_step: bool  # the first patch did not apply to the verified start state
    digests_matched: bool = True  # no step's state differed from the producer's digest
    digest_mismatch_at_first_step: bool = False


def _verdict(complete: bool, end_matches: bool | None, failed_at_first_step: bool) -> Verdict:
    if complete and end_matches:
        return "verified"
    if (complete and end_matches is False) or failed_at_first_step:
        return "failed"
    return "partial"


def _digest_verdict(
    verdict: Verdict, start_matches: bool, chain: _Chain, end_digest_matches: bool
) -> Verdict:
    """The verdict once the producer's digests are counted (they only ever lower it).

    A start state that does not hash to its digest, or a first step that does not,
    verifies nothing: failed. A later mismatch leaves the steps before it verified.
    """
    if verdict in ("failed", "not_applicable"):
        return verdict
    if not start_matches or chain.digest_mismatch_at_first_step:
        return "failed"
    if verdict == "verified" and not (chain.digests_matched and end_digest_matches):
        return "partial"
    return verdict


def _in_flight(received: tuple[Transition, ...], evidence: tuple[EvidenceSpan, ...]) -> History:
    """A history of what arrived before the owner span: a timeline, no states."""
    waiting = Diagnostic(
        "owner_not_arrived",
        "info",
        "The workflow span that owns this store has not arrived yet (it is exported last, "
        "when the run ends). States will be rebuilt once it does.",
    )
    steps = tuple(
        _unreplayed_step(sequence, t, frozenset()) for sequence, t in in_flight_order(received)
    )
    return History(
        execution=None,
        steps=steps,
        diagnostics=(waiting, *dropped_findings(evidence)),
        verdict="in_flight",
        start_sequence=0,
        end_sequence=None,
        states=None,
        recorded_end=MISSING,
    )


# The `statetrail serve` flag that sets each limit, named in the findings.
_LIMIT_SETTINGS: Final = {
    "bytes": "--max-state-mib",
    "nodes": "--max-state-nodes",
    "depth": "--max-state-depth",
}


def limit_setting(exc: DocumentLimitError) -> str:
    """Where the limit an error names is set, in words for a finding."""
    return f"set by {_LIMIT_SETTINGS[exc.limit]}"


def _op_label(op: JsonPatchOp) -> str:
    """An operation named by its kind and pointers (never its value), cut for a sentence."""
    source = op.get("from") if op.get("op") in OPS_WITH_FROM else None
    text = f"{op.get('op')} " + (f"from {_quoted(source)} to " if isinstance(source, str) else "")
    text += _quoted(op.get("path"))
    return text if len(text) <= PATCH_SHOWN_CHARS else text[:PATCH_SHOWN_CHARS] + "…"


def _quoted(pointer: JsonValue) -> str:
    return json.dumps(pointer, ensure_ascii=False)


def _unreplayed_step(sequence: int, transition: Transition, foreign: frozenset[int]) -> Step:
    ops = parse_patch(transition.patch_json)
    return Step(
        sequence=sequence,
        transition=transition,
        changed_paths=changed_paths(ops or ()),
        applied=False,
        verified=False,
        foreign=sequence in foreign,
    )


def _unverify(step: Step) -> Step:
    # Built directly: NamedTuple._replace costs several times as much, once per step.
    return Step(
        step.sequence, step.transition, step.changed_paths, step.applied, False, step.foreign
    )
