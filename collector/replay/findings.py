"""Integrity findings about what selection picked, worded for people.

Each function looks at one aspect of the selected chain (collector/replay/selection.py)
or of the evidence, and returns its `Diagnostic`s in the order replay reports
them; the findings replay makes while it walks the chain are its own
(collector/replay/walk.py; severities: docs/guarantees.md). `code` is
stable; the wording is for people and says what to do about it.

Contract 1 has no sequences, so no gap can be found there: only replay's end
check can catch a loss.

Pure: no I/O, no logging, no clock; inputs are never mutated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from collector.model import EvidenceSpan, Execution, Transition
from collector.producers.junjo import SCOPE_NAME
from collector.replay.history import Diagnostic, holes
from collector.replay.selection import KNOWN_CONTRACT_VERSIONS, Conflict, Interval, Sequenced


def unknown_version_findings(execution: Execution, replayed_by: int) -> list[Diagnostic]:
    """A warning when the run declares a contract version statetrail does not know."""
    declared = execution.contract_version
    if declared is None or declared in KNOWN_CONTRACT_VERSIONS:
        return []
    return [
        Diagnostic(
            "unknown_contract_version",
            "warning",
            f"This run declares telemetry contract version {declared}, which statetrail "
            f"does not know (it knows 1, 2 and 3). It was replayed by the version "
            f"{replayed_by} rules; upgrade statetrail if the results look wrong.",
        )
    ]


def dropped_findings(
    evidence: Iterable[EvidenceSpan], *, interval_whole: bool = False
) -> list[Diagnostic]:
    """One finding per OTLP loss counter that is not zero.

    `interval_whole`: every transition of the run's interval arrived, so the
    events a span dropped were none of this run's (a subflow span carries its
    own store's pre_run writes beside the parent's post_run ones): said as info.
    """
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
            if what == "events" and interval_whole:
                findings.append(_others_events_dropped(span, count, setting))
                continue
            why = (
                " The OpenTelemetry SDK keeps at most 128 events per span by default and "
                "discards the rest, so set_state transitions carried there are missing."
                if what == "events"
                else _lost_identity(span)
                if what == "attributes"
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


def _others_events_dropped(span: EvidenceSpan, count: int, setting: str) -> Diagnostic:
    return Diagnostic(
        "otlp_data_dropped",
        "info",
        f"Span {span.name!r} ({span.span_id}) dropped {count} events before export, but "
        "every transition of this run arrived: they were writes to other stores (the "
        "OpenTelemetry SDK keeps at most 128 events per span by default). Raise "
        f"{setting} in the application to keep them.",
        span_id=span.span_id,
    )


def _lost_identity(span: EvidenceSpan) -> str:
    # The SDK drops a span's oldest attributes first, and Junjo sets the type and
    # the run id early (SCHEMA.md section 2.1): a subflow span cut that far is
    # not an execution, and the nodes naming its run list it as in flight.
    if span.span_type is not None or span.scope_name != SCOPE_NAME:
        return ""
    return (
        " Its junjo.span_type was among them, so statetrail cannot tell what it was: "
        "if it was a subflow, a workflow or an agent, its run id and store were lost "
        "too, so that run is not listed as an execution (the runs its nodes name are "
        "listed as in flight) and its state history cannot be shown."
    )


def duplicate_findings(store_id: str | None, conflicts: Iterable[Conflict]) -> list[Diagnostic]:
    """One finding per sequence received with different content: an error if the patches differ."""
    findings: list[Diagnostic] = []
    for conflict in conflicts:
        variants, patches_differ = conflict.variants, conflict.patches_differ
        spans = ", ".join(sorted({span_label(t) for t in variants}))
        findings.append(
            Diagnostic(
                "duplicate_sequence",
                "error" if patches_differ else "warning",
                f"Sequence {conflict.sequence} of store {store_id} was received "
                f"{len(variants)} times with different content (carried by {spans}). "
                + (
                    "Their patches differ, so the state from here on cannot be verified; "
                    "the earliest received was replayed."
                    if patches_differ
                    else "Their patches agree, so the state is unaffected; check the "
                    "producer or the pipeline for re-emitted events."
                ),
                sequence=conflict.sequence,
                span_id=variants[1].span_id,
            )
        )
    return findings


def reused_findings(store_id: str | None, reused: Iterable[Conflict]) -> list[Diagnostic]:
    """One warning per sequence of this run that other runs of its store recorded too."""
    findings: list[Diagnostic] = []
    for conflict in reused:
        others = conflict.variants[1:]
        runs = ", ".join(sorted({t.run_id or "?" for t in others}))
        findings.append(
            Diagnostic(
                "sequence_reused",
                "warning",
                f"Sequence {conflict.sequence} of store {store_id} was also recorded by "
                f"run {runs}: runs of this store reused its sequence numbers (a LangGraph run "
                "forked from an earlier checkpoint does). This run's own transition was "
                "replayed; the store's history across those runs is not one chain.",
                sequence=conflict.sequence,
                span_id=others[0].span_id,
            )
        )
    return findings


def gap_findings(
    store_id: str | None, sequenced: Sequenced, interval: Interval
) -> list[Diagnostic]:
    """One error per run of sequences that never arrived, the trailing run worded apart."""
    if interval.by_time:
        return []
    findings: list[Diagnostic] = []
    sequences = (sequence for sequence, _ in sequenced)
    for after, (first, last) in holes(sequences, interval.lower, interval.upper).items():
        if after is None:
            findings.append(
                Diagnostic(
                    "missing_trailing_transitions",
                    "error",
                    f"The run ended at sequence {last}, but {_range_text(first, last)} "
                    "never arrived, so the states after "
                    f"sequence {first - 1} cannot be verified. If the run just finished, "
                    "they may still be in flight; otherwise they were lost.",
                    sequence=first,
                )
            )
        else:
            findings.append(
                Diagnostic(
                    "sequence_gap",
                    "error",
                    f"{_range_text(first, last, capital=True)} of store "
                    f"{store_id} never arrived, so the states from "
                    f"sequence {first} on are best effort and unverified. Usual causes: "
                    "the span event limit (see any dropped-data finding), store writes made "
                    "outside a recording span, or lost export batches.",
                    sequence=first,
                )
            )
    return findings


def revision_findings(
    execution: Execution, sequenced: Sequenced, interval: Interval
) -> list[Diagnostic]:
    """Warnings where the store's revision counter skips, jumps or ends elsewhere than recorded."""
    findings: list[Diagnostic] = []
    previous_sequence = interval.lower
    previous_after = execution.revision_start
    for sequence, transition in sequenced:
        before, after = transition.revision_before, transition.revision_after
        contiguous = sequence == previous_sequence + 1
        if contiguous and None not in (before, previous_after) and before != previous_after:
            findings.append(
                Diagnostic(
                    "revision_discontinuity",
                    "warning",
                    f"Transition {sequence} starts at revision {before}, but the state before "
                    f"it was at revision {previous_after}. The evidence is inconsistent: some "
                    "store change was not recorded, or events were altered on the way.",
                    sequence=sequence,
                    span_id=transition.span_id,
                )
            )
        if before is not None and after is not None and after not in (before, before + 1):
            findings.append(
                Diagnostic(
                    "revision_discontinuity",
                    "warning",
                    f"Transition {sequence} moves the revision from {before} to {after}; one "
                    "committed update can only keep it or add one.",
                    sequence=sequence,
                    span_id=transition.span_id,
                )
            )
        previous_sequence, previous_after = sequence, after
    end, revision_end = interval.upper, execution.revision_end
    if (
        sequenced
        and sequenced[-1][0] == end
        and None not in (previous_after, revision_end)
        and previous_after != revision_end
    ):
        findings.append(
            Diagnostic(
                "revision_discontinuity",
                "warning",
                f"The last transition ends at revision {previous_after}, but the run "
                f"recorded revision {revision_end} at its end.",
                sequence=end,
            )
        )
    return findings


def foreign_findings(
    execution: Execution, by_carrier: Mapping[str, Sequenced]
) -> list[Diagnostic]:
    """One info finding per span outside the owner that carried transitions of its store."""
    findings: list[Diagnostic] = []
    for span_id, carried in by_carrier.items():
        first = carried[0][1]
        elsewhere = first.trace_id != execution.trace_id
        where = f"in another trace ({first.trace_id})" if elsewhere else "outside this run's spans"
        findings.append(
            Diagnostic(
                "foreign_writer",
                "info",
                f"{counted(len(carried), 'transition')} from sequence {carried[0][0]} "
                f"{'was' if len(carried) == 1 else 'were'} written by "
                f"span {span_label(first)} {where}: another execution shares this store. "
                "They are part of this run's history and are replayed as such.",
                sequence=carried[0][0],
                span_id=span_id,
                trace_id=first.trace_id if elsewhere else None,
            )
        )
    return findings


def claimed_reconstructable_findings(
    earlier: Sequence[Diagnostic], evidence: Iterable[EvidenceSpan], missing: int
) -> list[Diagnostic]:
    """The warning for a run its producer called reconstructable that the evidence does not verify.

    Junjo's claim covers only its own in-process replay. The causes named are
    the ones the evidence shows (SCHEMA.md section 7.5): events dropped by the
    span event limit only when a loss counter says so, and transitions that no
    span received recorded (a write with no recording span current, or spans
    that never arrived) for what the counters do not account for. `earlier`
    are the findings already made, `evidence` the spans whose losses touch the
    run, `missing` how many of its transitions never arrived.
    """
    dropped = sum(span.dropped_events_count for span in evidence)
    codes = {finding.code for finding in earlier}
    causes: list[str] = []
    if dropped and missing:
        causes.append(
            f"{counted(dropped, 'event')} the span event limit dropped (see the dropped-data "
            "finding)"
        )
    if missing > dropped:
        causes.append(
            "transitions never recorded in any span received (a store write with no "
            "recording span current, such as setup code or a task outside a traced node, "
            "or spans that never arrived)"
        )
    if "invalid_json_payload" in codes:
        causes.append("payloads cut on the way (see the invalid-payload finding)")
    if "state_withheld" in codes:
        causes.append("payloads the producer withheld")
    if not causes:
        causes.append("evidence that contradicts itself or cannot be read (see the findings above)")
    return [
        Diagnostic(
            "claimed_reconstructable_but_failed",
            "warning",
            "The producer marked this run reconstructable, but the evidence received here "
            "does not verify it. Junjo's claim covers only its own in-process replay. "
            f"Likely causes, from the evidence: {'; '.join(causes)}.",
        )
    ]


def span_label(transition: Transition) -> str:
    """`'NodeName' (span id)`, how findings name the span that carried a transition."""
    name = transition.span_name or "unnamed span"
    return f"{name!r} ({transition.span_id})"


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """`1 transition`, `1,200 transitions`: a count with its noun agreeing."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"


def _range_text(first: int, last: int, *, capital: bool = False) -> str:
    """`transition 4`, or `transitions 4-9 (6 transitions)`; `Transition...` at a sentence start."""
    noun = "Transition" if capital else "transition"
    if first == last:
        return f"{noun} {first}"
    return f"{noun}s {first}-{last} ({last - first + 1:,} transitions)"
