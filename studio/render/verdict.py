"""The verdict in plain words, for the execution page's header.

Pure: from a replayed `History` and the trace's `Waterfall` (for OTLP loss
counters) to a few sentences a person can act on.

Invariant: the sentences say no more than the verdict does. They name what is
missing or inconsistent (gaps, dropped events, an end-state mismatch) and which
states can be trusted, and never call a state verified that `History` does not.
"""

from __future__ import annotations

from collector.replay.history import History
from collector.replay.jsondoc import MISSING
from studio.render.waterfall import Waterfall


def verdict_sentences(
    history: History, waterfall: Waterfall, *, quiet: bool = False
) -> list[str]:
    """The verdict in plain words: what is missing or inconsistent, what can be trusted.

    `quiet`: an in-flight run whose evidence stopped arriving long ago.
    """
    steps = history.steps
    if history.verdict == "in_flight":
        arrived = (
            f"In flight: {len(steps):,} {_plural(len(steps), 'transition')} "
            f"{'has' if len(steps) == 1 else 'have'} arrived, but the workflow span that "
            "owns them has not (Junjo exports it last, when the run ends). "
        )
        if quiet:
            return [
                arrived + "Nothing has arrived in its trace for a long while: its process "
                "may have died, or, if the run ended, its workflow span was lost (an exporter "
                "queue that overflowed, or a process that exited before flushing). That is "
                "not a failure: anything that arrives later puts it back in flight. This page "
                "has stopped refreshing itself; reload it to look again."
            ]
        return [
            arrived + "States will be rebuilt and checked when it arrives; this page "
            "refreshes itself until then."
        ]
    if history.verdict == "verified":
        if not steps:
            return [
                "Verified: the run made no transitions, and its recorded end state equals its "
                "start state. Every state shown can be trusted."
            ]
        first, last = steps[0].sequence, steps[-1].sequence
        counted = f"all {len(steps):,} transitions" if len(steps) != 1 else "its 1 transition"
        return [
            f"Verified: {counted} ({_plural(last - first + 1, 'step')} {_range(first, last)}) "
            "arrived, every patch applied, and the replayed end state equals the recorded end "
            "state. Every state shown can be trusted."
        ]
    if history.verdict == "not_applicable":
        reason = next((d.message for d in history.diagnostics), "")
        return ["No state history to check: this run recorded no store state." + (
            f" {reason}" if reason else ""
        )]
    sentences = _missing_sentences(history, waterfall)
    over_limit = next(
        (d for d in history.diagnostics if d.code == "document_limit_exceeded"), None
    )
    if over_limit is not None and history.verdict != "failed":
        # Said before the trust sentence: it is why the verified states end there.
        sentences.append(over_limit.message)
    sentences.append(_trust_sentence(history))
    if history.recorded_end is not MISSING:
        mismatch = any(d.code == "end_state_mismatch" for d in history.diagnostics)
        sentences.append(
            "The recorded end state is shown as recorded"
            + (", and it differs from the replayed end." if mismatch else ".")
        )
    if history.verdict == "failed":
        first_error = next((d for d in history.diagnostics if d.severity == "error"), None)
        if first_error is not None:
            sentences.append(first_error.message)
    return sentences


def _missing_sentences(history: History, waterfall: Waterfall) -> list[str]:
    sentences: list[str] = []
    gaps = sorted(history.missing_sequences.values())
    missing = history.missing_count
    if gaps:
        shown = ", ".join(_range(first, last) for first, last in gaps[:3])
        more = ""
        if len(gaps) > 3:
            more = f" and {len(gaps) - 3:,} more {_plural(len(gaps) - 3, 'range')}"
        label = "step" if missing == 1 else "steps"
        sentences.append(
            f"{missing:,} of {missing + len(history.steps):,} transitions never arrived "
            f"({label} {shown}{more}), so no state from the first gap on can be verified."
        )
    # The spans whose losses replay counted against this run (not a sibling run's).
    own = {d.span_id for d in history.diagnostics if d.code == "otlp_data_dropped"}
    dropping = [row for row in waterfall.rows if row.dropped_events and row.span_id in own]
    if dropping:
        dropped = sum(row.dropped_events for row in dropping)
        names = ", ".join(f"'{row.name}'" for row in dropping[:3])
        sentences.append(
            f"{dropped:,} events were dropped by the OpenTelemetry SDK's 128-events-per-span "
            f"limit (on {names}); raise OTEL_SPAN_EVENT_COUNT_LIMIT in the application."
        )
    return sentences


def _trust_sentence(history: History) -> str:
    verified = [step.sequence for step in history.steps if step.verified]
    unverified = next((step.sequence for step in history.steps if not step.verified), None)
    start_ok = history.has_states and history.verified_at(history.start_sequence)
    if verified:
        trusted = f"States up to step {verified[-1]} are verified"
    elif start_ok:
        trusted = f"Only the start state (step {history.start_sequence}) is verified"
    else:
        trusted = "No state can be verified"
    if unverified is None:
        return trusted + "."
    if not history.has_states:
        return f"{trusted}; later states cannot be rebuilt at all."
    return f"{trusted}; states from step {unverified} on are replayed but unverified."


def _range(first: int, last: int) -> str:
    # Step numbers are the store's sequence numbers: identifiers, so no thousands separators.
    return f"{first}" if first == last else f"{first}-{last}"


def _plural(count: int, noun: str) -> str:
    return noun if count == 1 else noun + "s"
