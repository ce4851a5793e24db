"""Replay stage: rebuild one execution's state history from its store transitions.

Input: the owner `Execution` (None while it is still in flight), the `Transition`s
recorded for its store, and the `EvidenceSpan`s that carried them. Output: a
`History` (collector/history.py) holding every state the store went through,
which of those states the evidence verifies, and `Diagnostic`s that say in plain
words what is missing or contradictory and what to do about it.

Invariant: nothing is hidden and nothing is overstated. Every transition of the
interval appears as a `Step`, and every state can be looked at, but a state is
marked verified only when the evidence proves it. The stage is pure: no I/O, no
logging, no clock; inputs are never mutated.

The types replay hands out, and reading them, are collector/history.py; the
working document and checkpoints that keep replay cheap are
collector/checkpoints.py; parsing, patching and comparing JSON is
collector/jsondoc.py.

Selection (which transitions belong to the execution; SCHEMA.md section 7)
    contract 2 and 3: the store's transitions with `lower < sequence <= upper`,
        where lower is `transition_start` (0 when absent, as in contract 2) and
        upper is `transition_end`, else `lower + transition_count`, else the last
        sequence received (the producer's terminal read failed).
    contract 1: no sequences. The store's transitions inside the owner span's
        time window, ordered by (time_unix_nano, event_index); their positions
        1..n stand in for sequences.
    A missing contract version is inferred from the data; an unknown one is
    reported and replayed by the newest rules.
    Identical duplicates (an export retried) are collapsed silently. Conflicting
    duplicates are reported; the earliest received is replayed.

Verification
    * The start state is verified when it was recorded in full and parses.
    * A step is verified when the state before it is verified, its sequence
      directly follows the previous one, it is not a conflicting duplicate, and
      its patch applies. After a gap or a failed patch, replay continues best
      effort (a patch that does not apply is skipped) with `verified=False`.
    * If the chain is complete (every sequence of the interval present, every
      patch applied) but its end differs from the recorded end state, the
      evidence contradicts itself somewhere we cannot locate: no step is verified.
    * Revision discontinuities and foreign writers are reported but do not
      change verification: the patches, not the counters, carry the states.
      Contract 1 has no sequences, so gaps are invisible and only the end check
      can catch a loss.

Severity
    error    evidence is missing or contradictory, so some state cannot be verified.
    warning  the history is degraded or at risk, or this explains an error.
    info     context for the reader; nothing is wrong.

Verdict (one per execution)
    in_flight       the owner span has not arrived, so there is no start state yet.
    not_applicable  no store, the producer withheld the start state, or nothing
                    at all was recorded (no transitions, no states).
    verified        every sequence of the interval arrived, every step is verified,
                    and the replayed end equals the recorded end.
    failed          the evidence verifies nothing beyond the start: the start state
                    is missing or unreadable, or the evidence contradicts itself
                    (an end mismatch on a complete chain, a patch that does not
                    apply to a verified state) before any step was verified.
    partial         everything else: evidence is missing (gaps, dropped events,
                    cut or withheld payloads, an end state that cannot be
                    compared), or contradicts itself only after verified steps.

Cost
    One pass over the selected transitions, patching one working document in
    place: O(total patch work + state size). collector/checkpoints.py says how
    its checkpoints keep `History.state_at` to one copy and about one state's
    worth of patching.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Final, TypeAlias

from collector.checkpoints import States, Tape
from collector.history import (
    Diagnostic,
    DiagnosticCode,
    History,
    Severity,
    Step,
    Verdict,
    holes,
    recorded_end_of,
)
from collector.jsondoc import (
    MISSING,
    JsonPatchOp,
    JsonValue,
    Missing,
    changed_paths,
    iter_differences,
    json_equal,
    parse_json,
    parse_patch,
)
from collector.model import EvidenceSpan, Execution, Transition, withheld

KNOWN_CONTRACT_VERSIONS: Final = frozenset({1, 2, 3})
MISMATCH_POINTERS_SHOWN: Final = 5

AppliedObserver: TypeAlias = Callable[[Sequence[JsonPatchOp], JsonValue], None]
"""Called after each patch replay applies: its ops and the live working document.

Both are replay's own: read them at once (op names and pointers only: the
values of add/replace ops may now be part of the document) and change neither.
It sees exactly what `walk` (collector/history.py) would yield for the
applied steps, without a second pass over the patches.
"""


def replay(
    execution: Execution | None,
    transitions: Iterable[Transition],
    *,
    evidence_spans: Iterable[EvidenceSpan] = (),
    owner_span_ids: Collection[str] | None = None,
    on_applied: AppliedObserver | None = None,
) -> History:
    """Replay `execution`'s store from its start state through `transitions`.

    `transitions` may hold more than the execution's: other stores and sequences
    outside the interval are ignored. `evidence_spans` should cover the owner span
    and the spans that carried transitions (or simply every span of the trace),
    so that OTLP loss counters can be reported. `owner_span_ids`, when given, is
    the owner span's subtree; a transition carried by any other span (e.g. a
    concurrent execution sharing the store) is then attributed as foreign.
    `on_applied` watches each applied patch (see AppliedObserver).
    """
    received = tuple(transitions)
    evidence = tuple(evidence_spans)
    if execution is None:
        return _in_flight(received, evidence)
    return _Replay(execution, received, evidence, owner_span_ids, on_applied).run()


# --- the replay itself ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Interval:
    lower: int
    upper: int | None
    by_time: bool


class _Replay:
    """One replay run. Collects diagnostics while it walks the chain once."""

    def __init__(
        self,
        execution: Execution,
        received: tuple[Transition, ...],
        evidence: tuple[EvidenceSpan, ...],
        owner_span_ids: Collection[str] | None,
        on_applied: AppliedObserver | None = None,
    ) -> None:
        self.execution = execution
        self.received = received
        self.evidence = evidence
        self.owner_span_ids = owner_span_ids
        self.on_applied = on_applied
        self.diagnostics: list[Diagnostic] = []

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
        version = self._contract_version()
        self.diagnostics += _dropped_findings(self._own_evidence())
        if execution.store_id is None:
            return self._history((), "not_applicable", _Interval(0, 0, by_time=False))
        interval = _interval(execution, version)
        chosen, ambiguous = self._resolve_duplicates(self._select(interval))
        sequenced = _assign_sequences(chosen, interval)
        self._report_gaps(sequenced, interval)
        self._report_revisions(sequenced, interval)
        foreign = self._foreign(sequenced)
        start = self._start_state(has_transitions=bool(sequenced))
        recorded_end = self._recorded_end()

        if start is MISSING:
            steps = tuple(_unreplayed_step(sequence, t, foreign) for sequence, t in sequenced)
            nothing = not steps and recorded_end is MISSING and execution.state_end is None
            verdict: Verdict = "not_applicable" if nothing or self._start_withheld() else "failed"
            return self._finish(steps, verdict, interval, None, recorded_end)

        tape = Tape(start, len(execution.state_start or ""))
        chain = self._walk(tape, sequenced, interval, ambiguous, foreign)
        states = tape.finish()
        last_received = sequenced[-1][0] if sequenced else interval.lower
        complete = chain.complete and (interval.upper is None or last_received >= interval.upper)
        end_matches = self._check_end(states, len(sequenced) - 1, recorded_end, complete)
        steps = chain.steps
        if complete and end_matches is False:
            steps = tuple(_unverify(step) for step in steps)
        verdict = _verdict(complete, end_matches, chain.failed_at_first_step)
        return self._finish(steps, verdict, interval, states, recorded_end)

    def _finish(
        self,
        steps: tuple[Step, ...],
        verdict: Verdict,
        interval: _Interval,
        states: States | None,
        recorded_end: JsonValue | Missing,
    ) -> History:
        if self.execution.reconstructable and verdict in ("partial", "failed"):
            self.report(
                "claimed_reconstructable_but_failed",
                "warning",
                "The producer marked this run reconstructable, but the evidence received "
                "here does not verify it. Junjo's claim covers only its own in-process "
                "replay, not events lost on the way (span limits, dropped batches).",
            )
        return self._history(steps, verdict, interval, states=states, recorded_end=recorded_end)

    # selection ------------------------------------------------------------------------

    def _own_evidence(self) -> list[EvidenceSpan]:
        """The evidence whose losses can touch this run: its own spans and its store's carriers.

        A span outside the owner's subtree that carried none of the store's
        transitions belongs to another run of the trace (a sibling subflow, the
        parent's node); what it dropped is that run's loss, not this one's.
        Without a known subtree every span counts.
        """
        owners = self.owner_span_ids
        if owners is None:
            return list(self.evidence)
        store_id = self.execution.store_id
        carriers = {(t.trace_id, t.span_id) for t in self.received if t.store_id == store_id}
        return [
            span
            for span in self.evidence
            if span.span_id in owners or (span.trace_id, span.span_id) in carriers
        ]

    def _contract_version(self) -> int:
        declared = self.execution.contract_version
        if declared in KNOWN_CONTRACT_VERSIONS:
            return declared
        inferred = 3 if any(t.sequence is not None for t in self.received) else 1
        if self.execution.transition_start is not None:
            inferred = 3
        if declared is not None:
            self.report(
                "unknown_contract_version",
                "warning",
                f"This run declares telemetry contract version {declared}, which statetrail "
                f"does not know (it knows 1, 2 and 3). It was replayed by the version "
                f"{inferred} rules; upgrade statetrail if the results look wrong.",
            )
        return inferred

    def _select(self, interval: _Interval) -> dict[int, list[Transition]]:
        """Transitions of the interval grouped by sequence (time order for contract 1)."""
        execution = self.execution
        mine = [t for t in self.received if t.store_id == execution.store_id]
        if interval.by_time:
            # Without sequences a retried export would take a position of its own,
            # so identical copies are dropped before positions are handed out.
            window = _distinct(sorted(mine, key=_time_order))
            timed = [t for t in window if _in_time_window(execution, t)]
            return {position: [t] for position, t in enumerate(timed, 1)}
        groups: dict[int, list[Transition]] = defaultdict(list)
        for transition in mine:
            sequence = transition.sequence
            if sequence is None or sequence <= interval.lower:
                continue
            if interval.upper is not None and sequence > interval.upper:
                continue
            groups[sequence].append(transition)
        return {sequence: sorted(groups[sequence], key=_time_order) for sequence in sorted(groups)}

    def _resolve_duplicates(
        self, grouped: dict[int, list[Transition]]
    ) -> tuple[list[Transition], set[int]]:
        """One transition per sequence (the earliest), and the ambiguous sequences.

        Identical copies collapse silently; differing ones are reported, and are
        ambiguous for replay when their patches differ.
        """
        chosen: list[Transition] = []
        ambiguous: set[int] = set()
        for sequence, variants in grouped.items():
            distinct = _distinct(variants)
            chosen.append(distinct[0])
            if len(distinct) < 2:
                continue
            patches_differ = len({t.patch_json for t in distinct}) > 1
            if patches_differ:
                ambiguous.add(sequence)
            spans = ", ".join(sorted({_span_label(t) for t in distinct}))
            self.report(
                "duplicate_sequence",
                "error" if patches_differ else "warning",
                f"Sequence {sequence} of store {self.execution.store_id} was received "
                f"{len(distinct)} times with different content (carried by {spans}). "
                + (
                    "Their patches differ, so the state from here on cannot be verified; "
                    "the earliest received was replayed."
                    if patches_differ
                    else "Their patches agree, so the state is unaffected; check the "
                    "producer or the pipeline for re-emitted events."
                ),
                sequence=sequence,
                span_id=distinct[1].span_id,
            )
        return chosen, ambiguous

    # diagnostics on the selected chain -------------------------------------------------

    def _report_gaps(self, sequenced: list[tuple[int, Transition]], interval: _Interval) -> None:
        if interval.by_time:
            return
        sequences = (sequence for sequence, _ in sequenced)
        for after, (first, last) in holes(sequences, interval.lower, interval.upper).items():
            if after is None:
                self.report(
                    "missing_trailing_transitions",
                    "error",
                    f"The run ended at sequence {last}, but {_range_text(first, last)} "
                    "never arrived, so the states after "
                    f"sequence {first - 1} cannot be verified. If the run just finished, "
                    "they may still be in flight; otherwise they were lost.",
                    sequence=first,
                )
            else:
                self.report(
                    "sequence_gap",
                    "error",
                    f"{_range_text(first, last, capital=True)} of store "
                    f"{self.execution.store_id} never arrived, so the states from "
                    f"sequence {first} on are best effort and unverified. Usual causes: "
                    "the span event limit (see any dropped-data finding), store writes made "
                    "outside a recording span, or lost export batches.",
                    sequence=first,
                )

    def _report_revisions(
        self, sequenced: list[tuple[int, Transition]], interval: _Interval
    ) -> None:
        execution = self.execution
        previous_sequence = interval.lower
        previous_after = execution.revision_start
        for sequence, transition in sequenced:
            before, after = transition.revision_before, transition.revision_after
            contiguous = sequence == previous_sequence + 1
            if contiguous and None not in (before, previous_after) and before != previous_after:
                self.report(
                    "revision_discontinuity",
                    "warning",
                    f"Transition {sequence} starts at revision {before}, but the state before "
                    f"it was at revision {previous_after}. The evidence is inconsistent: some "
                    "store change was not recorded, or events were altered on the way.",
                    sequence=sequence,
                    span_id=transition.span_id,
                )
            if before is not None and after is not None and after not in (before, before + 1):
                self.report(
                    "revision_discontinuity",
                    "warning",
                    f"Transition {sequence} moves the revision from {before} to {after}; one "
                    "committed update can only keep it or add one.",
                    sequence=sequence,
                    span_id=transition.span_id,
                )
            previous_sequence, previous_after = sequence, after
        end, revision_end = interval.upper, execution.revision_end
        if (
            sequenced
            and sequenced[-1][0] == end
            and None not in (previous_after, revision_end)
            and previous_after != revision_end
        ):
            self.report(
                "revision_discontinuity",
                "warning",
                f"The last transition ends at revision {previous_after}, but the run "
                f"recorded revision {revision_end} at its end.",
                sequence=end,
            )

    def _foreign(self, sequenced: list[tuple[int, Transition]]) -> frozenset[int]:
        """Sequences carried outside the owner; one info finding per carrier span."""
        execution, owners = self.execution, self.owner_span_ids
        foreign: dict[str, list[tuple[int, Transition]]] = defaultdict(list)
        for sequence, transition in sequenced:
            outside_trace = transition.trace_id != execution.trace_id
            outside_owner = owners is not None and transition.span_id not in owners
            if outside_trace or outside_owner:
                foreign[transition.span_id].append((sequence, transition))
        for span_id, carried in foreign.items():
            first = carried[0][1]
            elsewhere = first.trace_id != execution.trace_id
            where = (
                f"in another trace ({first.trace_id})" if elsewhere else "outside this run's spans"
            )
            self.report(
                "foreign_writer",
                "info",
                f"{_count(len(carried), 'transition')} from sequence {carried[0][0]} "
                f"{'was' if len(carried) == 1 else 'were'} written by "
                f"span {_span_label(first)} {where}: another execution shares this store. "
                "They are part of this run's history and are replayed as such.",
                sequence=carried[0][0],
                span_id=span_id,
                trace_id=first.trace_id if elsewhere else None,
            )
        return frozenset(sequence for carried in foreign.values() for sequence, _ in carried)

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
        sequenced: list[tuple[int, Transition]],
        interval: _Interval,
        ambiguous: set[int],
        foreign: frozenset[int],
    ) -> _Chain:
        steps: list[Step] = []
        verified = True
        complete = True
        failed_at_first_step = False
        skipped_after_doubt: list[int] = []
        previous = interval.lower
        for sequence, transition in sequenced:
            if not interval.by_time and sequence != previous + 1:
                verified = complete = False
            previous = sequence
            ops = self._usable_patch(sequence, transition)
            paths = changed_paths(ops or ())
            applied = ops is not None and tape.apply(transition.patch_json, ops)
            if applied and ops is not None and self.on_applied is not None:
                self.on_applied(ops, tape.document)
            if ops is None:
                tape.skip()
            elif not applied and verified:
                self._report_patch_failed(sequence, transition, tape.last_error)
                failed_at_first_step = not steps
            elif not applied:
                skipped_after_doubt.append(sequence)
            if not applied or sequence in ambiguous:
                verified = complete = False
            steps.append(
                Step(
                    sequence=sequence,
                    transition=transition,
                    changed_paths=paths,
                    applied=applied,
                    verified=verified,
                    foreign=sequence in foreign,
                )
            )
        if skipped_after_doubt:
            self.report(
                "patch_failed",
                "warning",
                f"{_count(len(skipped_after_doubt), 'patch', 'patches')} from sequence "
                f"{skipped_after_doubt[0]} "
                "did not apply to the best-effort state that follows missing or broken "
                "evidence; they were skipped. This follows from the earlier findings.",
                sequence=skipped_after_doubt[0],
            )
        return _Chain(tuple(steps), complete, failed_at_first_step)

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
                f"The patch of transition {sequence} (span {_span_label(transition)}) is not a "
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
            f"{_span_label(transition)}) does not apply to the replayed state: {error}. "
            "It was skipped, and the states from here on cannot be verified.",
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
        interval: _Interval,
        *,
        states: States | None = None,
        recorded_end: JsonValue | Missing = MISSING,
    ) -> History:
        upper = interval.upper
        if interval.by_time:
            upper = len(steps)
        return History(
            execution=self.execution,
            steps=steps,
            diagnostics=tuple(self.diagnostics),
            verdict=verdict,
            start_sequence=interval.lower,
            end_sequence=upper,
            states=states,
            recorded_end=recorded_end,
        )


@dataclass(frozen=True, slots=True)
class _Chain:
    steps: tuple[Step, ...]
    complete: bool
    failed_at_first_step: bool  # the first patch did not apply to the verified start state


def _verdict(complete: bool, end_matches: bool | None, failed_at_first_step: bool) -> Verdict:
    if complete and end_matches:
        return "verified"
    if (complete and end_matches is False) or failed_at_first_step:
        return "failed"
    return "partial"


def _in_flight(received: tuple[Transition, ...], evidence: tuple[EvidenceSpan, ...]) -> History:
    """A history of what arrived before the owner span: a timeline, no states."""
    waiting = Diagnostic(
        "owner_not_arrived",
        "info",
        "The workflow span that owns this store has not arrived yet (it is exported last, "
        "when the run ends). States will be rebuilt once it does.",
    )
    # One transition without a sequence puts them all in time order, and then
    # positions number every step, as for contract 1: a producer sequence kept
    # among positions would break the ascending order History looks steps up by.
    by_time = any(t.sequence is None for t in received)
    ordered = _distinct(sorted(received, key=_time_order if by_time else _sequence_order))
    sequenced = _assign_sequences(ordered, _Interval(0, None, by_time=by_time))
    steps = tuple(_unreplayed_step(sequence, t, frozenset()) for sequence, t in sequenced)
    return History(
        execution=None,
        steps=steps,
        diagnostics=(waiting, *_dropped_findings(evidence)),
        verdict="in_flight",
        start_sequence=0,
        end_sequence=None,
        states=None,
        recorded_end=MISSING,
    )


def _dropped_findings(evidence: Iterable[EvidenceSpan]) -> list[Diagnostic]:
    """One finding per OTLP loss counter that is not zero."""
    findings: list[Diagnostic] = []
    for span in evidence:
        losses = (
            (span.dropped_events_count, "events", "OTEL_SPAN_EVENT_COUNT_LIMIT"),
            (span.dropped_attributes_count, "attributes", "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT"),
            (span.dropped_links_count, "links", "OTEL_SPAN_LINK_COUNT_LIMIT"),
        )
        for count, what, setting in losses:
            if count <= 0:
                continue
            why = (
                " The OpenTelemetry SDK keeps at most 128 events per span by default and "
                "discards the rest, so set_state transitions carried there are missing."
                if what == "events"
                else ""
            )
            findings.append(
                Diagnostic(
                    "otlp_data_dropped",
                    "warning",
                    f"Span {span.name!r} ({span.span_id}) dropped {count} {what} before "
                    f"export.{why} Raise {setting} in the application to keep them.",
                    span_id=span.span_id,
                )
            )
    return findings


def _interval(execution: Execution, version: int) -> _Interval:
    if version == 1:
        return _Interval(0, None, by_time=True)
    lower = execution.transition_start or 0
    upper = execution.transition_end
    if upper is None and execution.transition_count is not None:
        upper = lower + execution.transition_count
    return _Interval(lower, upper, by_time=False)


def _assign_sequences(
    chosen: list[Transition], interval: _Interval
) -> list[tuple[int, Transition]]:
    if interval.by_time:
        return list(enumerate(chosen, 1))
    return [(t.sequence, t) for t in chosen if t.sequence is not None]


def _in_time_window(execution: Execution, transition: Transition) -> bool:
    if execution.end_unix_nano <= 0:
        return transition.time_unix_nano >= execution.start_unix_nano
    return execution.start_unix_nano <= transition.time_unix_nano <= execution.end_unix_nano


def _time_order(transition: Transition) -> tuple[int, int, str]:
    return transition.time_unix_nano, transition.event_index, transition.event_id


def _sequence_order(transition: Transition) -> tuple[int, int, int, str]:
    return (transition.sequence or 0, *_time_order(transition))


def _content(transition: Transition) -> tuple[object, ...]:
    # What makes two copies of an event "the same": a retried export repeats all
    # of it, while a genuine conflict differs in the event id or the change.
    return (
        transition.event_id,
        transition.patch_json,
        transition.revision_before,
        transition.revision_after,
        transition.action,
    )


def _distinct(transitions: Iterable[Transition]) -> list[Transition]:
    """The first of each group of identical transitions, in the given order."""
    first: dict[tuple[object, ...], Transition] = {}
    for transition in transitions:
        first.setdefault(_content(transition), transition)
    return list(first.values())


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
    return step._replace(verified=False)


def _span_label(transition: Transition) -> str:
    name = transition.span_name or "unnamed span"
    return f"{name!r} ({transition.span_id})"


def _count(count: int, noun: str, plural: str | None = None) -> str:
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"


def _range_text(first: int, last: int, *, capital: bool = False) -> str:
    """`transition 4`, or `transitions 4-9 (6 transitions)`; `Transition...` at a sentence start."""
    noun = "Transition" if capital else "transition"
    if first == last:
        return f"{noun} {first}"
    return f"{noun}s {first}-{last} ({last - first + 1:,} transitions)"
