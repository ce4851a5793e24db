"""Who wrote a step of an execution page, and where the span that carried it is shown.

Pure. A store several runs share (SCHEMA.md 7.1, 7.4) puts other runs' writes in this
run's history as foreign steps, and the page shows only its own trace's spans: a
step's span links to its row here, else to the page of the run that wrote it, else to
the list of its trace's runs.

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
        """Where to read the span that carried the step at `sequence`: its row here, else
        the writing run's page at that step, else the runs of its trace."""
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
