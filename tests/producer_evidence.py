"""Reading the state-evidence convention back from real SDK spans, for the producer tests.

`Capture` is a real OpenTelemetry SDK TracerProvider exporting into memory; `Evidence` indexes
what it exported (runs, start events, transitions, rollbacks, rejections) and replays a run
with the `jsonpatch` package, checking each digest against an independent canonical JSON.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from typing import Any

import jsonpatch
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from statetrail_producer.canonical import canonical_json


class Capture:
    """A TracerProvider whose spans land in memory as each one ends."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def evidence(self) -> Evidence:
        return Evidence(list(self.exporter.get_finished_spans()))


@dataclasses.dataclass
class Step:
    sequence: int
    state: dict[str, Any]
    digest: str
    attributes: dict[str, Any]


def expected_digest(state: Any) -> str:
    """SHA-256 of the canonical JSON, computed without the library where it can be:
    `json.dumps` with sorted keys is RFC 8785 for float-free, BMP-keyed values."""
    if _has_float(state):
        # Number formatting is the one part json.dumps gets wrong; test_producer_canonical
        # checks the library's against RFC 8785's own examples.
        text = canonical_json(state)
    else:
        text = json.dumps(state, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _has_float(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(_has_float(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_float(v) for v in value)
    return False


def attrs(span: ReadableSpan) -> dict[str, Any]:
    """A span's attributes as a plain dict."""
    return dict(span.attributes or {})


class Evidence:
    def __init__(self, spans: Sequence[ReadableSpan]) -> None:
        self.spans = list(spans)

    def events(self, name: str) -> list[dict[str, Any]]:
        return [dict(e.attributes or {}) for s in self.spans for e in s.events if e.name == name]

    def owners(self, **match: Any) -> list[ReadableSpan]:
        """Execution spans whose attributes include `match` (keys without the prefix dots
        replaced: run_kind='graph' -> statetrail.run.kind)."""
        wanted = {"statetrail." + k.replace("_", "."): v for k, v in match.items()}
        return [s for s in self.spans
                if (s.attributes or {}).get("statetrail.span_type") == "execution"
                and all((s.attributes or {}).get(k) == v for k, v in wanted.items())]

    def owner(self, run_id: str) -> ReadableSpan:
        (span,) = [s for s in self.owners() if (s.attributes or {})["statetrail.run.id"] == run_id]
        return span

    def start(self, run_id: str) -> dict[str, Any]:
        (event,) = [e for e in self.events("statetrail.run.start")
                    if e["statetrail.run.id"] == run_id]
        return event

    def transitions(self, run_id: str) -> list[dict[str, Any]]:
        found = [e for e in self.events("statetrail.transition")
                 if e["statetrail.run.id"] == run_id]
        return sorted(found, key=lambda e: e["statetrail.store.sequence"])

    def replay(self, run_id: str) -> list[Step]:
        """The run's states: the start, then after each transition, every digest checked."""
        start = self.start(run_id)
        state = json.loads(start["statetrail.state.start"])
        assert start["statetrail.state.start.digest"] == expected_digest(state)
        sequence = start["statetrail.store.sequence.start"]
        steps = [Step(sequence, state, start["statetrail.state.start.digest"], start)]
        revision = start["statetrail.store.revision.start"]
        for event in self.transitions(run_id):
            assert event["statetrail.store.sequence"] == sequence + 1, "sequences are gap-free"
            sequence += 1
            patch = json.loads(event["statetrail.transition.patch"])
            state = jsonpatch.apply_patch(state, patch)
            assert event["statetrail.state.digest"] == expected_digest(state), event
            assert event["statetrail.store.revision.before"] == revision
            revision = event["statetrail.store.revision.after"]
            assert revision == event["statetrail.store.revision.before"] + (1 if patch else 0)
            steps.append(Step(sequence, state, event["statetrail.state.digest"], event))
        owner = self.owner(run_id)
        attributes = attrs(owner)
        end = json.loads(attributes["statetrail.state.end"])
        assert attributes["statetrail.state.end.digest"] == expected_digest(end)
        assert attributes["statetrail.store.sequence.end"] == sequence
        assert attributes["statetrail.run.transition.count"] == len(steps) - 1
        assert attributes["statetrail.state.start.digest"] == steps[0].digest
        return steps

    def verified_end(self, run_id: str) -> dict[str, Any]:
        """Replay the run and check it reaches the owner span's end state; return that state."""
        steps = self.replay(run_id)
        attributes = attrs(self.owner(run_id))
        assert steps[-1].digest == attributes["statetrail.state.end.digest"]
        end: dict[str, Any] = json.loads(attributes["statetrail.state.end"])
        assert end == steps[-1].state
        return end


def writes(event: dict[str, Any]) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = json.loads(event["statetrail.transition.writes"])
    return result


def reducers(event: dict[str, Any]) -> dict[str, str]:
    result: dict[str, str] = json.loads(event["statetrail.transition.reducers"])
    return result
