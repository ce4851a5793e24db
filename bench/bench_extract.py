"""Extraction speed of the state-evidence convention against Junjo's, in one run.

What is measured: the collector's write-side work on one export request, short of DuckDB:
decode, extract (collector/producers/), and encode the rows of the write
(collector/encode/rows.py `prepare_write`): what the extraction worker does per export.
Two requests carry the same runs (the executions, ~2 KB states and patches of
bench_ingest.py's Junjo load): one as Junjo 0.69 sends them, one as the convention
(docs/convention.md) does, with what it adds per transition: a span of its own, the
state digest, each writer's update and the reducers (a LangGraph-shaped superstep). The
figures are spans, bytes and transitions extracted per second, convention / Junjo
(target >= 1.0 each); the best of `--repeat` timings of each is used. The convention
sends each transition on a span of its own (docs/convention.md 2.3), about twice
Junjo's spans for the same transitions, so per transition it pays for twice the
decoding of span envelopes.

Run: `.venv/bin/python bench/bench_extract.py` (a few seconds).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.bench_ingest import (
    STATE_ITEMS,
    ExportRequestPB2,
    KeyValuePB2,
    SpanPB2,
    _compact,
    _kv,
    _state,
    build_request,
)
from collector.encode.exports import batch_from_export
from collector.encode.rows import prepare_write

SPANS_PER_REQUEST: Final = 512
TARGET_RATIO: Final = 1.0


def _event_attributes(event: trace_pb2.Span.Event) -> dict[str, common_pb2.AnyValue]:
    return {kv.key: kv.value for kv in event.attributes}


def convention_request(junjo: ExportRequestPB2) -> ExportRequestPB2:
    """The same runs and transitions as `junjo`, sent as the convention sends them."""
    spans: list[SpanPB2] = []
    others: list[SpanPB2] = []
    for scope_spans in junjo.resource_spans[0].scope_spans:
        for span in scope_spans.spans:
            attributes = {kv.key: kv.value for kv in span.attributes}
            span_type = attributes.get("junjo.span_type")
            if span_type is None:
                others.append(span)
            elif span_type.string_value == "node":
                spans.extend(_step_spans(span))
            elif span_type.string_value == "workflow":
                spans.extend(_owner_spans(span, attributes))
    request = ExportRequestPB2()
    request.CopyFrom(junjo)
    resource_spans = request.resource_spans[0]
    del resource_spans.scope_spans[:]
    convention = resource_spans.scope_spans.add()
    convention.scope.name = "statetrail_producer"
    convention.spans.extend(spans)
    other = resource_spans.scope_spans.add()
    other.scope.name = "my.app.llm"
    other.spans.extend(others)
    return request


def _derived_id(span_id: bytes, index: int) -> bytes:
    """A span id of its own for the index-th span made from the span `span_id`."""
    return hashlib.blake2b(span_id + bytes([index]), digest_size=8).digest()


def _common(span_type: str) -> list[KeyValuePB2]:
    return [_kv("statetrail.convention.version", 1), _kv("statetrail.span_type", span_type)]


def _step_spans(node: SpanPB2) -> list[SpanPB2]:
    """One span per set_state event, as the convention puts each transition on its own."""
    steps = []
    for index, event in enumerate(node.events):
        found = _event_attributes(event)
        sequence = found["junjo.store.transition.sequence"].int_value
        patch = json.loads(found["junjo.state_json_patch"].string_value)
        update = {"items": [patch[0]["value"]], "status": patch[1]["value"]}
        step = SpanPB2()
        step.CopyFrom(node)
        step.span_id = _derived_id(node.span_id, index)
        del step.attributes[:]
        step.attributes.extend(_common("step"))
        del step.events[:]
        step.events.add(
            time_unix_nano=event.time_unix_nano,
            name="statetrail.transition",
            attributes=[
                _kv("statetrail.run.id", node.name + found["junjo.store.id"].string_value),
                _kv("statetrail.store.id", found["junjo.store.id"].string_value),
                _kv("statetrail.store.sequence", sequence),
                _kv("statetrail.store.revision.before", sequence - 1),
                _kv("statetrail.store.revision.after", sequence),
                _kv("statetrail.transition.patch", found["junjo.state_json_patch"].string_value),
                _kv("statetrail.transition.patch.mode", "full"),
                _kv("statetrail.state.digest", hashlib.sha256(patch[0]["path"].encode())
                    .hexdigest()),
                _kv("statetrail.transition.action", node.name),
                _kv("statetrail.transition.step", sequence),
                _kv("statetrail.transition.writes", _compact(
                    [{"writer": node.name, "task_id": f"task-{sequence:08d}", "update": update}]
                )),
                _kv("statetrail.transition.writes.mode", "full"),
                _kv("statetrail.transition.reducers",
                    _compact({"items": "operator.add", "status": "last_value"})),
            ],
        )
        steps.append(step)
    return steps


def _owner_spans(workflow: SpanPB2, attributes: dict[str, common_pb2.AnyValue]) -> list[SpanPB2]:
    """The start span (start state and graph) and the execution span (end state)."""
    run_id = attributes["junjo.executable_runtime_id"].string_value
    store_id = attributes["junjo.workflow.store.id"].string_value
    end = attributes["junjo.store.transition.end"].int_value
    start = SpanPB2()
    start.CopyFrom(workflow)
    start.span_id = _derived_id(workflow.span_id, 255)
    start.parent_span_id = workflow.span_id
    del start.attributes[:]
    start.attributes.extend(_common("execution.start"))
    start.events.add(
        time_unix_nano=workflow.start_time_unix_nano,
        name="statetrail.run.start",
        attributes=[
            _kv("statetrail.run.id", run_id), _kv("statetrail.run.name", workflow.name),
            _kv("statetrail.run.kind", "graph"), _kv("statetrail.framework.name", "langgraph"),
            _kv("statetrail.store.id", store_id), _kv("statetrail.store.sequence.start", 0),
            _kv("statetrail.store.revision.start", 0),
            _kv("statetrail.state.start", _compact(_state(0, STATE_ITEMS // 2))),
            _kv("statetrail.state.start.mode", "full"),
            _kv("statetrail.state.start.digest", "0" * 64),
            _kv("statetrail.graph",
                attributes["junjo.workflow.execution_graph_snapshot"].string_value),
        ],
    )
    owner = SpanPB2()
    owner.CopyFrom(workflow)
    del owner.attributes[:]
    owner.attributes.extend([
        *_common("execution"),
        _kv("statetrail.run.id", run_id), _kv("statetrail.run.name", workflow.name),
        _kv("statetrail.run.kind", "graph"), _kv("statetrail.framework.name", "langgraph"),
        _kv("statetrail.framework.version", "1.2.24"), _kv("statetrail.store.id", store_id),
        _kv("statetrail.store.sequence.start", 0), _kv("statetrail.store.sequence.end", end),
        _kv("statetrail.store.revision.start", 0), _kv("statetrail.store.revision.end", end),
        _kv("statetrail.state.start.digest", "0" * 64),
        _kv("statetrail.state.end", attributes["junjo.workflow.state.end"].string_value),
        _kv("statetrail.state.end.mode", "full"),
        _kv("statetrail.state.end.digest", "1" * 64),
        _kv("statetrail.run.status", "completed"),
        _kv("statetrail.run.transition.count", end),
    ])
    return [start, owner]


def measure(bodies: Sequence[bytes], repeat: int) -> list[float]:
    """Best seconds to decode, extract and encode each body, timed in turns so that both
    see the same moments of a busy machine."""
    best = [float("inf")] * len(bodies)
    for _ in range(repeat):
        for index, body in enumerate(bodies):
            began = time.perf_counter()
            prepare_write([batch_from_export(body)])
            best[index] = min(best[index], time.perf_counter() - began)
    return best


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args(argv)
    junjo = build_request(SPANS_PER_REQUEST)
    # bench_ingest stamps a token over its id placeholders on each send; once is enough here.
    junjo_body = junjo.SerializeToString().replace(b"~REQ~", b"00001")
    convention = convention_request(junjo)
    convention_body = convention.SerializeToString().replace(b"~REQ~", b"00001")
    bodies = (junjo_body, convention_body)
    rows = []
    for name, body, seconds in zip(("junjo", "convention"), bodies,
                                   measure(bodies, args.repeat), strict=True):
        batch = batch_from_export(body)
        spans, transitions = len(batch.spans), len(batch.evidence.transitions)
        rows.append((name, seconds, spans, transitions, len(body)))
        print(f"{name:>10}: {transitions:5d} transitions in {spans:4d} spans, "
              f"{len(body) / 1e6:5.2f} MB: {seconds * 1e3:7.2f} ms, "
              f"{transitions / seconds:9,.0f} transitions/s, {spans / seconds:9,.0f} spans/s, "
              f"{len(body) / seconds / 1e6:6.1f} MB/s")
    (_, junjo_s, junjo_n, junjo_t, junjo_b), (_, conv_s, conv_n, conv_t, conv_b) = rows
    for unit, junjo_count, conv_count in (
        ("spans", junjo_n, conv_n), ("MB", junjo_b, conv_b), ("transitions", junjo_t, conv_t)
    ):
        ratio = (conv_count / conv_s) / (junjo_count / junjo_s)
        verdict = "PASS" if ratio >= TARGET_RATIO else "FAIL"
        print(f"convention / junjo, {unit} per second: {ratio:.2f} "
              f"(target >= {TARGET_RATIO:.1f}: {verdict})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
