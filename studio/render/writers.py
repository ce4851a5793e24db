"""Who wrote a step of an execution page, and where the span that carried it is shown.

Pure stage. A store that several runs share (a RunConcurrent sibling, a workflow
run inside a node, one live store lent to concurrent `execute(store=...)` calls,
each in its own trace: SCHEMA.md 7.1, 7.4) puts the other runs' writes in this
run's history as foreign steps. The page shows the spans of its own trace only,
so a step's span is linked to its row on this page only when it is one of them;
a span of another trace is linked on the page of the run that wrote it, and
when that run is not known (its owner span has not arrived, or the span ran
outside any run) to the list of that trace's runs.

Invariant: every `#span-…` address handed out names a span of this page's
waterfall, so no link on the page points at an anchor that is not there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from collector.model import Transition
from collector.replay.history import History
from studio.links import Links
from studio.render.text import href
from studio.render.waterfall import Waterfall, owning_runs

# A span, as telemetry identifies it: span ids are unique within a trace only.
SpanKey = tuple[str, str]  # (trace id, span id)


@dataclass(frozen=True, slots=True)
class Writers:
    """The spans this page shows, and the run each known carrier span ran in."""

    shown: frozenset[SpanKey]
    runs: Mapping[SpanKey, str]

    @classmethod
    def of(
        cls,
        trace_id: str,
        waterfall: Waterfall,
        elsewhere: Mapping[SpanKey, str] | None = None,
    ) -> Writers:
        """This trace's spans from the waterfall, plus runs found for spans of other traces."""
        runs: dict[SpanKey, str] = {
            (trace_id, span_id): run_id for span_id, run_id in owning_runs(waterfall).items()
        }
        runs.update(elsewhere or {})
        shown = frozenset((trace_id, row.span_id) for row in waterfall.rows)
        return cls(shown, runs)

    def run_of(self, trace_id: str, span_id: str) -> str | None:
        """The run the span ran in, if known."""
        return self.runs.get((trace_id, span_id))

    def runs_href(self, links: Links, trace_id: str, span_id: str) -> str:
        """The run that wrote through this span, else every run of its trace."""
        run_id = self.run_of(trace_id, span_id)
        return links.execution(run_id) if run_id else links.executions(trace=trace_id)

    def span_href(self, links: Links, transition: Transition, sequence: int) -> str:
        """Where to read the span that carried the step at `sequence`.

        Its row on this page when it is here; else the same step on the page of
        the run that wrote it, scrolled to the span there (that run's page shows
        its own trace); else the runs of the span's trace.
        """
        if (transition.trace_id, transition.span_id) in self.shown:
            return f"#span-{transition.span_id}"
        run_id = self.run_of(transition.trace_id, transition.span_id)
        if run_id is None:
            return links.executions(trace=transition.trace_id)
        return f"{href(links.execution(run_id), step=sequence)}#span-{transition.span_id}"


def foreign_carriers(history: History, trace_id: str) -> set[SpanKey]:
    """The spans outside `trace_id` that carried steps of this history."""
    return {
        (step.transition.trace_id, step.transition.span_id)
        for step in history.steps
        if step.foreign and step.transition.trace_id != trace_id
    }


def other_traces(carriers: Iterable[SpanKey]) -> list[str]:
    """The traces these carriers sit in, sorted (the store reads their spans)."""
    return sorted({trace_id for trace_id, _ in carriers})
