"""Which run an execution ran inside, found through the spans between them.

Pure (no I/O). A subflow names its parent run directly, but an agent run in a node,
a RunConcurrent child or a workflow inside a node names the node instead (SCHEMA.md
2.1, 2.4), and other spans can sit between: its parent run is the nearest owner span
above it. That owner span is exported last, so the link is made when the replayer
reads the trace's spans, and saved with the replays. The same walk names the run a
carrier span ran in (`carrier_runs`), for a store that several runs share.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, Protocol

from collector.producers.junjo import OWNER_SPAN_TYPES

# Telemetry can claim any parent, even a cycle: a walk stops this far up.
MAX_DEPTH: Final = 64


class SpanInTrace(Protocol):
    """What the walk reads of a span (collector/store/replays.py `SpanLink` has it)."""

    @property
    def trace_id(self) -> str: ...
    @property
    def span_id(self) -> str: ...
    @property
    def parent_span_id(self) -> str: ...
    @property
    def span_type(self) -> str | None: ...
    @property
    def runtime_id(self) -> str | None: ...


def enclosing_runs(spans: Iterable[SpanInTrace]) -> list[tuple[str, str]]:
    """(child run id, enclosing run id) for each owner span under a span that owns no run.

    Owner spans right under another are left out (extraction linked them). A walk
    reaching a root or a span not stored yet finds nothing; a later replay links it.
    """
    by_key = {(span.trace_id, span.span_id): span for span in spans}
    found: set[tuple[str, str]] = set()
    for span in by_key.values():
        if span.span_type not in OWNER_SPAN_TYPES or not span.runtime_id:
            continue
        above = by_key.get((span.trace_id, span.parent_span_id))
        if above is None or _owns_a_run(above):
            continue
        parent = _nearest_owner(above, by_key)
        if parent is not None and parent.runtime_id != span.runtime_id:
            assert parent.runtime_id is not None
            found.add((span.runtime_id, parent.runtime_id))
    return sorted(found)


def carrier_runs(
    carriers: Iterable[tuple[str, str]], spans: Iterable[SpanInTrace]
) -> dict[tuple[str, str], str]:
    """The run each carrier span (trace id, span id) ran in: its nearest owner span's run.

    An owner span is its own run. A carrier that is not among `spans`, or whose
    walk reaches a root or a span not stored yet, has no entry: its run is not
    known (the owner span is exported last and may still be on its way).
    """
    by_key = {(span.trace_id, span.span_id): span for span in spans}
    found: dict[tuple[str, str], str] = {}
    for key in carriers:
        span = by_key.get(key)
        owner = _nearest_owner(span, by_key) if span is not None else None
        if owner is not None and owner.runtime_id:
            found[key] = owner.runtime_id
    return found


def _owns_a_run(span: SpanInTrace) -> bool:
    return span.span_type in OWNER_SPAN_TYPES and bool(span.runtime_id)


def _nearest_owner(
    start: SpanInTrace, by_key: dict[tuple[str, str], SpanInTrace]
) -> SpanInTrace | None:
    span: SpanInTrace | None = start
    for _ in range(MAX_DEPTH):
        if span is None:
            return None
        if _owns_a_run(span):
            return span
        span = by_key.get((span.trace_id, span.parent_span_id)) if span.parent_span_id else None
    return None
