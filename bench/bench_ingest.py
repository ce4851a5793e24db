"""Durable OTLP/gRPC ingest throughput of `statetrail serve` against a parse-only baseline.

Both servers run in the same run under the same Junjo-shaped load (~1 MB requests of 512
spans, serialized once and re-stamped per send so nothing is deduplicated), so their ratio
means something on a noisy box. An acknowledgement only means spooled, so after the load
the script waits until everything is stored and replayed and also reports the sustained
rate, peak RSS of the server and its worker at once, and whether the stopped server's
file holds exactly the acknowledged spans. Targets are printed PASS/FAIL, never asserted;
both servers get the same glibc malloc thresholds so neither is favoured. What each
figure means: docs/benchmarks.md, "bench_ingest.py".

Run: `.venv/bin/python bench/bench_ingest.py` (about 2 x 20 s), or `--quick` for a smoke run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, TypeAlias

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

# Run as a script (as documented, and as the baseline server is started) Python puts
# bench/ on sys.path, not the repository root that `bench.servers` is found from.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.servers import (
    LOOPBACK,
    MALLOC_ENV,
    ChildMemory,
    CpuSeconds,
    cpu_seconds,
    free_port,
    server_env,
    wait_for_port,
)

ExportRequestPB2: TypeAlias = trace_service_pb2.ExportTraceServiceRequest
ExportResponsePB2: TypeAlias = trace_service_pb2.ExportTraceServiceResponse
SpanPB2: TypeAlias = trace_pb2.Span
KeyValuePB2: TypeAlias = common_pb2.KeyValue

EXPORT_SERVICE: Final = "opentelemetry.proto.collector.trace.v1.TraceService"
EXPORT_METHOD: Final = f"/{EXPORT_SERVICE}/Export"
MIB: Final = 1024 * 1024
MAX_MESSAGE_BYTES: Final = 64 * MIB
SERVER_WORKERS: Final = 16  # statetrail's default gRPC worker count
RPC_TIMEOUT_SECONDS: Final = 120.0  # the Junjo/OTel exporter's deadline
STOP_TIMEOUT_SECONDS: Final = 300.0
FAILURE_BACKOFF_SECONDS: Final = 0.05

TARGET_RATIO: Final = 0.25
TARGET_RSS_MB: Final = 400.0
# What serve logs when a call ran out of memory at a burst's lowered limit.
RETRIED_AT_CONFIGURED_LIMIT: Final = "ran out of memory at the lowered limit"
# ... and when a step of the field index's rewrite did (collector/jobs/replayer.py).
REWRITE_STEP_RETRIED: Final = "rewrite ran out of memory at the lower limit"
LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

# A placeholder stamped with the request's own token on every send: the first 5 bytes of
# every trace id and span id and the first 5 characters of every Junjo run/store/event id.
# `~` is kept out of all generated JSON, and `RequestTemplate` checks that the serialized
# template holds exactly as many placeholders as were put in, so none is accidental.
MARK: Final = "~REQ~"
TOKEN_ALPHABET: Final = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

SPANS_PER_EXECUTION: Final = 10
NODES_PER_EXECUTION: Final = 8
STATE_ITEMS: Final = 12  # list items in the workflow state; sized for ~2 KB of JSON


# -- request shapes -----------------------------------------------------------------------


def _kv(key: str, value: str | int | bool) -> KeyValuePB2:
    if isinstance(value, bool):
        return KeyValuePB2(key=key, value=common_pb2.AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValuePB2(key=key, value=common_pb2.AnyValue(int_value=value))
    return KeyValuePB2(key=key, value=common_pb2.AnyValue(string_value=value))


def _compact(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _state(execution: int, items: int) -> dict[str, object]:
    return {
        "conversation_id": f"conv-{execution:08d}",
        "items": [
            {
                "index": i,
                "role": "assistant" if i % 2 else "user",
                "text": f"message {i} of execution {execution}: a reasonably sized chat turn "
                "that the workflow appended to its store",
            }
            for i in range(items)
        ],
        "metadata": {"model": "gpt-bench", "temperature": 0.2, "tenant": "acme"},
        "status": "done" if items == STATE_ITEMS else "running",
    }


@dataclass(frozen=True, slots=True)
class _Ids:
    """Ids of one execution inside one request; the marks are stamped on each send."""

    execution: int
    first_span: int

    @property
    def trace_id(self) -> bytes:
        return MARK.encode() + struct.pack(">xxxQ", self.execution + 1)

    def span_id(self, offset: int) -> bytes:
        return MARK.encode() + struct.pack(">I", self.first_span + offset + 1)[1:]

    def text(self, kind: str, number: int = 0) -> str:
        return f"{MARK}{kind}{self.execution:05d}{number:010d}"


def _graph_snapshot(ids: _Ids) -> str:
    nodes = [
        {
            "nodeLabel": f"Node{n}",
            "nodeRuntimeId": ids.text("N", n),
            "nodeStructuralId": f"node_{n:032x}",
            "nodeType": f"Node{n}",
        }
        for n in range(NODES_PER_EXECUTION)
    ]
    edges = [
        {
            "edgeConditionLabel": None if n % 3 else "CountBelow(4)",
            "edgeScope": "explicit",
            "edgeStructuralId": f"edge_{n:032x}",
            "headNodeRuntimeId": ids.text("N", n + 1),
            "headNodeStructuralId": f"node_{n + 1:032x}",
            "parentSubflowRuntimeId": None,
            "tailNodeRuntimeId": ids.text("N", n),
            "tailNodeStructuralId": f"node_{n:032x}",
        }
        for n in range(NODES_PER_EXECUTION - 1)
    ]
    return _compact({"edges": edges, "graphStructuralId": "graph_" + "ab" * 16, "nodes": nodes,
                     "v": 2})


def _execution_spans(ids: _Ids, start_ns: int, node_count: int) -> list[SpanPB2]:
    """One Junjo execution, children before the parent (span-end order, as exported).

    With `node_count` < NODES_PER_EXECUTION the execution is cut off: its workflow span
    would come in a later request (SCHEMA.md section 7.6), so only node spans are built.
    """
    run_id = ids.text("R")
    store_id = ids.text("S")
    workflow_span_id = ids.span_id(0)
    common = [_kv("junjo.telemetry.contract_version", 3)]
    spans: list[SpanPB2] = []
    sequence = 0
    clock = start_ns + 1_000
    for node in range(node_count):
        events = []
        for _ in range(2 + node % 2):  # 2 or 3 set_state calls per node
            sequence += 1
            patch = _compact(
                [
                    {"op": "add", "path": f"/items/{sequence}",
                     "value": {"index": sequence, "role": "assistant",
                               "text": f"reply {sequence}: the model said something useful"}},
                    {"op": "replace", "path": "/status", "value": "running"},
                ]
            )
            events.append(
                trace_pb2.Span.Event(
                    time_unix_nano=clock + sequence,
                    name="set_state",
                    attributes=[
                        _kv("id", ids.text("E", sequence)),
                        _kv("junjo.store.name", "ConversationStore"),
                        _kv("junjo.store.id", store_id),
                        _kv("junjo.store.action", "append_item"),
                        _kv("junjo.store.transition.sequence", sequence),
                        _kv("junjo.store.revision.before", sequence - 1),
                        _kv("junjo.store.revision.after", sequence),
                        _kv("junjo.state_json_patch", patch),
                        _kv("junjo.state_json_patch.mode", "full"),
                        _kv("junjo.state_json_patch.policy", "junjo.full.v1"),
                    ],
                )
            )
        node_runtime_id = ids.text("N", node)
        spans.append(
            SpanPB2(
                trace_id=ids.trace_id,
                span_id=ids.span_id(1 + node),
                parent_span_id=workflow_span_id,
                flags=256,
                name=f"Node{node}",
                kind=trace_pb2.Span.SPAN_KIND_INTERNAL,
                start_time_unix_nano=clock,
                end_time_unix_nano=clock + 900_000,
                attributes=[
                    *common,
                    _kv("junjo.span_type", "node"),
                    _kv("junjo.executable_definition_id", node_runtime_id),
                    _kv("junjo.executable_runtime_id", node_runtime_id),
                    _kv("junjo.parent_executable_definition_id", ids.text("D")),
                    _kv("junjo.parent_executable_runtime_id", run_id),
                    _kv("junjo.parent_executable_structural_id", "graph_" + "ab" * 16),
                    _kv("junjo.executable_structural_id", f"node_{node:032x}"),
                    _kv("junjo.enclosing_graph_structural_id", "graph_" + "ab" * 16),
                ],
                events=events,
            )
        )
        clock += 1_000_000
    if node_count < NODES_PER_EXECUTION:
        return spans
    spans.append(
        SpanPB2(
            trace_id=ids.trace_id,
            span_id=ids.span_id(1 + NODES_PER_EXECUTION),
            parent_span_id=ids.span_id(1),
            flags=256,
            name="llm.chat_completion",
            kind=trace_pb2.Span.SPAN_KIND_CLIENT,
            start_time_unix_nano=start_ns + 2_000,
            end_time_unix_nano=start_ns + 800_000,
            attributes=[
                _kv("gen_ai.system", "openai"),
                _kv("gen_ai.request.model", "gpt-bench"),
                _kv("gen_ai.usage.input_tokens", 812),
                _kv("gen_ai.usage.output_tokens", 96),
            ],
        )
    )
    spans.append(
        SpanPB2(
            trace_id=ids.trace_id,
            span_id=workflow_span_id,
            flags=256,
            name="ConversationWorkflow",
            kind=trace_pb2.Span.SPAN_KIND_INTERNAL,
            start_time_unix_nano=start_ns,
            end_time_unix_nano=clock + 1_000,
            attributes=[
                _kv(
                    "junjo.workflow.state.start",
                    _compact(_state(ids.execution, STATE_ITEMS // 2)),
                ),
                _kv("junjo.workflow.state.start.mode", "full"),
                _kv("junjo.workflow.state.start.policy", "junjo.full.v1"),
                _kv("junjo.store.revision.start", 0),
                _kv("junjo.store.transition.start", 0),
                _kv("junjo.workflow.execution_graph_snapshot", _graph_snapshot(ids)),
                _kv("junjo.workflow.store.id", store_id),
                *common,
                _kv("junjo.span_type", "workflow"),
                _kv("junjo.executable_definition_id", ids.text("D")),
                _kv("junjo.executable_runtime_id", run_id),
                _kv("junjo.executable_structural_id", "graph_" + "ab" * 16),
                _kv("junjo.enclosing_graph_structural_id", "graph_" + "ab" * 16),
                _kv("junjo.store.transition.end", sequence),
                _kv("junjo.workflow.state.end", _compact(_state(ids.execution, STATE_ITEMS))),
                _kv("junjo.workflow.state.end.mode", "full"),
                _kv("junjo.workflow.state.end.policy", "junjo.full.v1"),
                _kv("junjo.store.revision.end", sequence),
                _kv("junjo.store.transition.count", sequence),
                _kv("junjo.store.reconstructable", True),
                _kv("junjo.workflow.node.count", NODES_PER_EXECUTION),
            ],
        )
    )
    return spans


def build_request(spans_per_request: int) -> ExportRequestPB2:
    """One export of `spans_per_request` spans: whole executions, then a cut-off one."""
    junjo_spans: list[SpanPB2] = []
    llm_spans: list[SpanPB2] = []
    start_ns = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z
    for execution in itertools.count():
        left = spans_per_request - len(junjo_spans) - len(llm_spans)
        if left <= 0:
            break
        ids = _Ids(execution, execution * SPANS_PER_EXECUTION)
        nodes = NODES_PER_EXECUTION if left >= SPANS_PER_EXECUTION else left
        for span in _execution_spans(ids, start_ns + execution * 50_000_000, nodes):
            (llm_spans if span.kind == trace_pb2.Span.SPAN_KIND_CLIENT else junjo_spans).append(
                span
            )
    resource = resource_pb2.Resource(
        attributes=[
            _kv("service.name", "bench-workflows"),
            _kv("service.instance.id", "2f0c7a51-3f63-4c1e-9a55-0d3c1f5b8e11"),
            _kv("telemetry.sdk.language", "python"),
            _kv("telemetry.sdk.name", "opentelemetry"),
            _kv("telemetry.sdk.version", "1.45.2"),
        ]
    )
    return ExportRequestPB2(
        resource_spans=[
            trace_pb2.ResourceSpans(
                resource=resource,
                scope_spans=[
                    trace_pb2.ScopeSpans(
                        scope=common_pb2.InstrumentationScope(name="junjo"), spans=junjo_spans
                    ),
                    trace_pb2.ScopeSpans(
                        scope=common_pb2.InstrumentationScope(name="my.app.llm"),
                        spans=llm_spans,
                    ),
                ],
            )
        ]
    )


class RequestTemplate:
    """A serialized request whose ids are made unique to each send by `render`."""

    def __init__(self, request: ExportRequestPB2, *, scatter_ids: bool = False) -> None:
        body = request.SerializeToString()
        self._scatter_ids = scatter_ids
        self.size: Final = len(body)
        self.span_count: Final = sum(
            len(scope.spans) for rs in request.resource_spans for scope in rs.scope_spans
        )
        self._pieces = body.split(MARK.encode())
        expected = _expected_marks(request)
        if len(self._pieces) - 1 != expected:
            raise RuntimeError(
                f"{MARK!r} occurs {len(self._pieces) - 1} times in the request, not {expected}"
            )

    def render(self, number: int) -> bytes:
        """The request with every id stamped with `number` (1 <= number < 62**5).

        With `scatter_ids`, numbers in a row give tokens far apart, as random
        trace and span ids are: each send's ids then land in a different part of
        the store's key indexes, where consecutive tokens keep to one end of them.
        """
        token = scattered(number) if self._scatter_ids else number
        return request_token(token).join(self._pieces)


# Odd and not a multiple of 31, so coprime to 62**5: multiplying by it permutes the tokens.
SCATTER_MULTIPLIER: Final = 0x9E3779B1


def scattered(number: int) -> int:
    """`number` moved to a distinct, far-off token (a bijection of 1 .. 62**5 - 1)."""
    token_count: int = len(TOKEN_ALPHABET) ** len(MARK)
    return number * SCATTER_MULTIPLIER % token_count


def log_levels(log: str) -> str:
    """How many WARNING, ERROR and CRITICAL lines the server logged (serve's log format
    starts each record with its level), how many quote an error that invalidates
    DuckDB's database (FATAL or INTERNAL), how many reads and replay saves ran out
    of memory at a burst's lowered limit and were run again at the configured one
    (logged at INFO: collector/store/memory.py), and how many of the field
    index rewrite's steps did (collector/jobs/replayer.py)."""
    lines = log.splitlines()
    counts = {level: sum(line.startswith(f"{level} ") for line in lines)
              for level in ("WARNING", "ERROR", "CRITICAL")}
    fatal = sum("FATAL Error" in line or "INTERNAL Error" in line for line in lines)
    retried = sum(RETRIED_AT_CONFIGURED_LIMIT in line for line in lines)
    rewrite_steps = sum(REWRITE_STEP_RETRIED in line for line in lines)
    return (", ".join(f"{count} {level}" for level, count in counts.items())
            + f"; {fatal} quoting DuckDB's FATAL or INTERNAL error; {retried} call(s) "
            "out of memory at the burst's limit, run again at the configured one; "
            f"{rewrite_steps} step(s) of the field index's rewrite likewise")


def warnings_and_worse(log: str) -> str:
    """The log without its INFO records (serve runs at INFO here, to count the retries;
    uvicorn's lines start "INFO:"), continuation lines included: a record goes on until
    a line starts with a level's name."""
    kept: list[str] = []
    keeping = True
    for line in log.splitlines():
        if line.startswith(LOG_LEVELS):
            keeping = not line.startswith(("DEBUG", "INFO"))
        if keeping:
            kept.append(line)
    return "\n".join(kept)


def request_token(number: int) -> bytes:
    """`number` as 5 base-62 characters: valid in ids of both kinds, and never all zero."""
    if not 0 < number < len(TOKEN_ALPHABET) ** len(MARK):
        raise ValueError(f"request number {number} is out of range")
    digits = []
    for _ in MARK:
        number, digit = divmod(number, len(TOKEN_ALPHABET))
        digits.append(TOKEN_ALPHABET[digit])
    return "".join(reversed(digits)).encode()


def _expected_marks(request: ExportRequestPB2) -> int:
    mark = MARK.encode()
    count = 0
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                count += span.trace_id.count(mark) + span.span_id.count(mark)
                count += span.parent_span_id.count(mark)
                keyvalues = [*span.attributes]
                for event in span.events:
                    keyvalues.extend(event.attributes)
                count += sum(kv.value.string_value.count(MARK) for kv in keyvalues)
    return count


# -- the parse-only baseline server ---------------------------------------------------------


def serve_baseline() -> int:
    """Run the baseline receiver on a free loopback port until SIGTERM; print the port."""

    def export(body: bytes, context: grpc.ServicerContext) -> bytes:
        request = ExportRequestPB2()
        request.ParseFromString(body)
        del request
        response: bytes = ExportResponsePB2().SerializeToString()
        return response

    server = grpc.server(
        ThreadPoolExecutor(max_workers=SERVER_WORKERS),
        options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES), ("grpc.so_reuseport", 0)],
    )
    handler = grpc.method_handlers_generic_handler(
        EXPORT_SERVICE, {"Export": grpc.unary_unary_rpc_method_handler(export)}
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port(f"{LOOPBACK}:0")
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda _signum, _frame: stopped.set())
    server.start()
    print(f"PORT {port}", flush=True)
    while not stopped.wait(1.0):
        pass
    server.stop(5).wait()
    return 0


# -- servers under test ---------------------------------------------------------------------


@dataclass(slots=True)
class Server:
    name: str
    process: subprocess.Popen[bytes]
    grpc_port: int
    db_path: Path | None = None
    http_port: int | None = None


def start_baseline(env: dict[str, str]) -> Server:
    process = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--serve-baseline"],
        stdout=subprocess.PIPE,
        env=env,
    )
    assert process.stdout is not None
    line = process.stdout.readline().decode().split()
    if len(line) != 2 or line[0] != "PORT":
        process.kill()
        raise RuntimeError(f"baseline server did not report its port: {line!r}")
    port = int(line[1])
    wait_for_port(process, port)
    return Server("baseline", process, port)


def start_statetrail(db_path: Path, env: dict[str, str], log_path: Path) -> Server:
    grpc_port, http_port = free_port(), free_port()
    statetrail = Path(sys.executable).with_name("statetrail")
    command = [str(statetrail)] if statetrail.exists() else [sys.executable, "-m", "collector"]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*command, "serve", "--db", str(db_path), "--host", LOOPBACK,
             "--grpc-port", str(grpc_port), "--http-port", str(http_port),
             "--log-level", "info"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    wait_for_port(process, grpc_port)
    return Server("statetrail", process, grpc_port, db_path, http_port)


def peak_rss_mb(pid: int) -> float:
    """VmHWM (the resident-set high-water mark) of a live process, in MB of 10^6 bytes.

    /proc counts in KiB. The target says MB, so the stricter unit is reported:
    400 MB is 381 MiB.
    """
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / 1_000_000
    raise RuntimeError(f"no VmHWM for pid {pid}")


@dataclass(frozen=True, slots=True)
class Stopped:
    exit_code: int
    seconds: float
    killed: bool
    peak_rss_mb: float


def stop(server: Server, timeout: float) -> Stopped:
    """SIGTERM, then wait, watching VmHWM until the process is gone.

    statetrail drains its queues, commits and checkpoints before it exits; whatever it
    still does after the load stopped (background work, shutdown) counts towards its
    peak RSS too. Past `timeout` it is killed, which the report says.
    """
    started = time.perf_counter()
    peak = 0.0
    server.process.send_signal(signal.SIGTERM)
    while server.process.poll() is None and time.perf_counter() - started < timeout:
        try:
            peak = max(peak, peak_rss_mb(server.process.pid))
        except (OSError, RuntimeError):
            break  # exiting: /proc/<pid>/status is gone or no longer has VmHWM
        time.sleep(0.1)
    killed = False
    try:
        remaining = max(0.0, timeout - (time.perf_counter() - started))
        code = server.process.wait(timeout=remaining)
    except subprocess.TimeoutExpired:
        killed = True
        server.process.kill()
        code = server.process.wait()
    return Stopped(code, time.perf_counter() - started, killed, peak)


# -- load ---------------------------------------------------------------------------------


@dataclass(slots=True)
class ExporterTally:
    latencies: list[float] = field(default_factory=list)
    acked_spans: int = 0
    failures: int = 0
    first_error: str = ""


@dataclass(frozen=True, slots=True)
class LoadResult:
    seconds: float
    requests: int
    acked_spans: int
    warmup_acked_spans: int
    failures: int
    first_error: str
    latencies: Sequence[float]

    @property
    def spans_per_second(self) -> float:
        return self.acked_spans / self.seconds if self.seconds else 0.0

    def latency_ms(self, quantile: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(quantile * len(ordered)))] * 1000


def _export_once(
    call: Callable[..., bytes], body: bytes, span_count: int
) -> tuple[float, int, str]:
    """Send one request; (latency, acknowledged spans, error text or "")."""
    started = time.perf_counter()
    try:
        reply = call(body, timeout=RPC_TIMEOUT_SECONDS, wait_for_ready=True)
    except grpc.RpcError as exc:
        return time.perf_counter() - started, 0, f"{exc.code().name}: {exc.details()}"
    latency = time.perf_counter() - started
    response = ExportResponsePB2()
    response.ParseFromString(reply)
    return latency, span_count - response.partial_success.rejected_spans, ""


def drive(
    port: int,
    template: RequestTemplate,
    *,
    exporters: int,
    seconds: float,
    max_requests: int | None,
    warmup_requests: int,
) -> LoadResult:
    """Run `exporters` threads against one server until the deadline or request budget."""
    numbers: Iterator[int] = itertools.count(1)
    lock = threading.Lock()
    budget = [max_requests if max_requests is not None else sys.maxsize]
    warmup_acked = [0]
    deadline = [0.0]
    started = [0.0]

    def start_clock() -> None:
        started[0] = time.perf_counter()
        deadline[0] = started[0] + seconds

    # The barrier's action runs before any party is released, so every exporter sees
    # the deadline of the measured window, which starts after all warm-ups are done.
    start_gate = threading.Barrier(exporters + 1, action=start_clock)

    def next_number() -> int | None:
        with lock:
            if budget[0] <= 0:
                return None
            budget[0] -= 1
            return next(numbers)

    def exporter() -> ExporterTally:
        tally = ExporterTally()
        with grpc.insecure_channel(
            f"{LOOPBACK}:{port}",
            options=[("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                     ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                     # One connection per exporter, as separate processes would have.
                     ("grpc.use_local_subchannel_pool", 1)],
        ) as channel:
            call = channel.unary_unary(EXPORT_METHOD)
            for _ in range(warmup_requests):
                number = next(numbers)
                _, acked, _ = _export_once(call, template.render(number), template.span_count)
                with lock:
                    warmup_acked[0] += acked
            start_gate.wait()
            while time.perf_counter() < deadline[0]:
                number_or_none = next_number()
                if number_or_none is None:
                    break
                body = template.render(number_or_none)
                latency, acked, error = _export_once(call, body, template.span_count)
                if error:
                    tally.failures += 1
                    tally.first_error = tally.first_error or error
                    time.sleep(FAILURE_BACKOFF_SECONDS)
                    continue
                tally.latencies.append(latency)
                tally.acked_spans += acked
        return tally

    with ThreadPoolExecutor(max_workers=exporters) as pool:
        futures = [pool.submit(exporter) for _ in range(exporters)]
        start_gate.wait()
        tallies = [future.result() for future in futures]
        elapsed = time.perf_counter() - started[0]
    latencies = [latency for tally in tallies for latency in tally.latencies]
    return LoadResult(
        seconds=elapsed,
        requests=len(latencies),
        acked_spans=sum(tally.acked_spans for tally in tallies),
        warmup_acked_spans=warmup_acked[0],
        failures=sum(tally.failures for tally in tallies),
        first_error=next((tally.first_error for tally in tallies if tally.first_error), ""),
        latencies=latencies,
    )


# -- report -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CatchUp:
    """After the load: when everything acknowledged was stored, and then replayed.

    With the CPU the server and its children had used by each of those moments.
    """

    stored_seconds: float
    replayed_seconds: float
    peak_backlog_mib: float
    cpu_stored: CpuSeconds | None = None
    cpu_replayed: CpuSeconds | None = None
    unavailable: int = 0  # polls /healthz answered 503 (store unavailable: retry)


def catch_up(server: Server, timeout: float) -> CatchUp:
    """Poll statetrail's /healthz until the spool backlog and the replays are done."""
    assert server.http_port is not None
    started = time.perf_counter()
    stored: float | None = None
    replayed = float("nan")
    peak_backlog = 0
    cpu_stored = cpu_replayed = None
    unavailable = 0
    while time.perf_counter() - started < timeout:
        try:
            with urllib.request.urlopen(f"http://{LOOPBACK}:{server.http_port}/healthz",
                                        timeout=60) as reply:
                health = json.load(reply)
        except urllib.error.HTTPError as exc:
            # 503 is the server's "retry": counted and reported, not fatal.
            if exc.code != 503:
                raise
            unavailable += 1
            time.sleep(0.2)
            continue
        peak_backlog = max(peak_backlog, health["backlog_bytes"])
        elapsed = time.perf_counter() - started
        if health["backlog_bytes"] == 0 and stored is None:
            stored = elapsed
            cpu_stored = cpu_seconds(server.process.pid)
        if not health["replaying"]:
            replayed = elapsed
            cpu_replayed = cpu_seconds(server.process.pid)
            break
        time.sleep(0.2)
    return CatchUp(float("nan") if stored is None else stored, replayed, peak_backlog / MIB,
                   cpu_stored, cpu_replayed, unavailable)


@dataclass(frozen=True, slots=True)
class Measurement:
    name: str
    load: LoadResult
    peak_rss_mb: float
    request_bytes: int
    stop_seconds: float
    caught_up: CatchUp | None = None
    # The server's child processes (statetrail's extraction worker): peak private
    # memory (peak_rss_mb counts what they held at the server's peak: ChildMemory),
    # and the children's own VmHWM (files included).
    children_private_mb: float = 0.0
    children_hwm_mb: float = 0.0
    # CPU the server and its children had used when the load began, and ended.
    cpu_at_start: CpuSeconds | None = None
    cpu_at_end: CpuSeconds | None = None

    @property
    def stored_spans_per_second(self) -> float:
        """Acknowledged spans over the time until the last of them was in DuckDB."""
        if self.caught_up is None:
            return self.load.spans_per_second
        seconds = self.load.seconds + self.caught_up.stored_seconds
        return self.load.acked_spans / seconds if seconds else 0.0

    @property
    def mib_per_second(self) -> float:
        seconds = self.load.seconds
        return self.load.requests * self.request_bytes / MIB / seconds if seconds else 0.0


def _row(cells: Sequence[str]) -> str:
    widths = (12, 10, 12, 8, 9, 9, 13, 7, 10)
    return "  ".join(cell.rjust(width) for cell, width in zip(cells, widths, strict=True))


def print_report(measurements: Sequence[Measurement]) -> None:
    print()
    print(_row(("target", "requests", "spans/s", "MiB/s", "p50 ms", "p99 ms", "peak RSS MB",
                "failed", "stop s")))
    for m in measurements:
        print(
            _row(
                (
                    m.name,
                    str(m.load.requests),
                    f"{m.load.spans_per_second:,.0f}",
                    f"{m.mib_per_second:.1f}",
                    f"{m.load.latency_ms(0.50):.1f}",
                    f"{m.load.latency_ms(0.99):.1f}",
                    f"{m.peak_rss_mb:.0f}",
                    str(m.load.failures),
                    f"{m.stop_seconds:.1f}",
                )
            )
        )
        if m.load.first_error:
            print(f"    first failure ({m.name}): {m.load.first_error}")


def print_cpu(m: Measurement, spans: int, baseline: Measurement) -> None:
    """Where statetrail's CPU went, per acknowledged span: what bounds the sustained rate.

    Two cores are shared by the exporters, the server and its extraction worker,
    so the sum of the first two figures, against the baseline's cost, is what
    decides how close sustained ingest can come to the target.
    """
    caught_up = m.caught_up
    if caught_up is None or m.cpu_at_start is None or caught_up.cpu_stored is None or not spans:
        return
    storing = caught_up.cpu_stored - m.cpu_at_start
    micro = 1e6 / spans
    print(
        f"CPU a span, from the load's start until all was stored: server "
        f"{storing.server * micro:.0f} us, extraction worker {storing.children * micro:.0f} us"
        + _baseline_cpu(baseline)
    )
    if caught_up.cpu_replayed is not None:
        replaying = caught_up.cpu_replayed - caught_up.cpu_stored
        executions = spans / SPANS_PER_EXECUTION
        print(
            f"CPU replaying what was left after that: server {replaying.server * micro:.0f} us "
            f"a span ({replaying.server * 1e3 / executions:.2f} ms an execution of "
            f"{SPANS_PER_EXECUTION} spans)"
        )


def _baseline_cpu(baseline: Measurement) -> str:
    if baseline.cpu_at_start is None or baseline.cpu_at_end is None:
        return ""
    spans = baseline.load.acked_spans + baseline.load.warmup_acked_spans
    used = (baseline.cpu_at_end - baseline.cpu_at_start).server
    return f" (the baseline's receiver: {used * 1e6 / spans:.0f} us)" if spans else ""


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


# -- main ---------------------------------------------------------------------------------


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--exporters", type=int, default=4, help="concurrent exporter threads")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured time per target")
    parser.add_argument("--requests", type=int, default=None,
                        help="stop each target after this many measured requests")
    parser.add_argument("--spans-per-request", type=int, default=512)
    parser.add_argument("--warmup-requests", type=int, default=2,
                        help="unmeasured requests per exporter before timing starts")
    parser.add_argument("--quick", action="store_true", help="smoke run: about 5 s in all")
    parser.add_argument("--no-malloc-env", action="store_true",
                        help="do not set MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_")
    parser.add_argument("--stop-timeout", type=float, default=STOP_TIMEOUT_SECONDS,
                        help="seconds a server gets to exit after SIGTERM before it is killed")
    parser.add_argument("--idle-after", type=float, default=0.0, metavar="SECONDS",
                        help="keep statetrail running this long once caught up, before "
                        "SIGTERM, so that the peak covers the idle-time work that follows "
                        "a burst (the field index's sort)")
    parser.add_argument("--catch-up-timeout", type=float, default=900.0,
                        help="seconds to wait after the load for statetrail to store and "
                        "replay everything it acknowledged")
    parser.add_argument("--keep-db", action="store_true",
                        help="leave the DuckDB file and the server's log behind")
    parser.add_argument("--scatter-ids", action="store_true",
                        help="stamp each send's ids with a token far from the last one's, as "
                        "random ids are (default: consecutive tokens)")
    parser.add_argument("--serve-baseline", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds = min(args.seconds, 2.0)
        args.warmup_requests = 1
    if args.exporters < 1 or args.seconds <= 0 or args.spans_per_request < SPANS_PER_EXECUTION:
        parser.error("--exporters >= 1, --seconds > 0 and --spans-per-request >= 10 please")
    return args


def _count_stored_spans(db_path: Path) -> int:
    import duckdb

    with duckdb.connect(str(db_path), read_only=True) as connection:
        row = connection.execute("SELECT count(*) FROM spans").fetchone()
    assert row is not None
    count: int = row[0]
    return count


def main(argv: Sequence[str] | None = None) -> int:
    args = _arguments(argv)
    if args.serve_baseline:
        return serve_baseline()

    built = time.perf_counter()
    template = RequestTemplate(build_request(args.spans_per_request), scatter_ids=args.scatter_ids)
    render_seconds = min(_timed(template.render, n) for n in range(1, 6))
    print(
        f"request: {template.span_count} spans, {template.size / MIB:.2f} MiB "
        f"(built in {time.perf_counter() - built:.2f}s; stamping ids costs "
        f"{render_seconds * 1e3:.2f} ms a send)"
    )
    limit = f"{args.requests} requests or " if args.requests else ""
    print(
        f"load: {args.exporters} exporter threads, {limit}{args.seconds:g}s per target, "
        f"{args.warmup_requests} warm-up request(s) per exporter"
    )
    env = server_env(not args.no_malloc_env)
    malloc = " ".join(f"{k}={env[k]}" for k in MALLOC_ENV if k in env) or "glibc defaults"
    print(f"server malloc settings (both): {malloc}")

    measurements: list[Measurement] = []
    with tempfile.TemporaryDirectory(prefix="statetrail-bench-") as tmp:
        run = _run_target(start_baseline(env), template, args)
        measurements.append(run)

        db_path = Path(tmp) / "bench.duckdb"
        log_path = Path(tmp) / "statetrail.log"
        server = start_statetrail(db_path, env, log_path)
        try:
            measured = _run_target(server, template, args)
        except Exception:
            # The log goes with the temporary folder: show why the server failed first.
            print(f"statetrail log (tail):\n{log_path.read_text(errors='replace')[-4000:]}")
            raise
        measurements.append(measured)
        acked = measured.load.acked_spans + measured.load.warmup_acked_spans
        stored = _count_stored_spans(db_path)
        log = log_path.read_text(errors="replace")
        if args.keep_db:
            kept = Path(tempfile.gettempdir()) / f"statetrail-bench-{os.getpid()}.duckdb"
            db_path.rename(kept)
            log_path.rename(kept.with_suffix(".log"))
            print(f"kept the DuckDB file at {kept}, and the server's log beside it")

    print_report(measurements)
    baseline, statetrail = measurements
    ratio = (
        statetrail.load.spans_per_second / baseline.load.spans_per_second
        if baseline.load.spans_per_second
        else 0.0
    )
    print()
    print(f"statetrail/baseline spans/s: {ratio:.2f}")
    print(
        f"target durable ingest >= {TARGET_RATIO:.0%} of baseline spans/s: "
        f"{_verdict(ratio >= TARGET_RATIO)} ({ratio:.0%})"
    )
    print(
        f"target statetrail peak RSS <= {TARGET_RSS_MB:.0f} MB: "
        f"{_verdict(statetrail.peak_rss_mb <= TARGET_RSS_MB)} ({statetrail.peak_rss_mb:.0f} MB)"
    )
    caught_up = statetrail.caught_up
    if caught_up is not None:
        stored_ratio = (
            statetrail.stored_spans_per_second / baseline.load.spans_per_second
            if baseline.load.spans_per_second
            else 0.0
        )
        print(
            f"after the load: backlog peaked at {caught_up.peak_backlog_mib:.0f} MiB; every "
            f"acknowledged span was in DuckDB {caught_up.stored_seconds:.1f}s later and "
            f"replayed {caught_up.replayed_seconds:.1f}s later; /healthz answered 503 "
            f"{caught_up.unavailable} time(s)"
        )
        print(
            f"sustained: acknowledged spans / (load + time to store them) = "
            f"{statetrail.stored_spans_per_second:,.0f} spans/s ({stored_ratio:.0%} of baseline)"
        )
        print_cpu(statetrail, acked, baseline)
    print(
        f"durability: {acked} spans acknowledged, {stored} in the DB after SIGTERM: "
        f"{_verdict(acked == stored)}"
    )
    print(f"statetrail log: {log_levels(log)}")
    worse = warnings_and_worse(log)
    if worse.strip():
        print(f"statetrail log, warnings and worse (tail):\n{worse[-2000:]}")
    return 0


def peak_phase(after_load: float, caught_up: CatchUp | None, idle_seconds: float) -> str:
    """When a peak came, `after_load` seconds from the load's end: which work was going on.

    `idle_seconds` is how long the server ran on once caught up (`--idle-after`)."""
    if after_load <= 0:
        return f"during the load ({-after_load:.0f} s before its end)"
    if caught_up is None:
        return f"{after_load:.0f} s after the load"
    if after_load <= caught_up.stored_seconds:
        phase = "while storing the backlog"
    elif after_load <= caught_up.replayed_seconds:
        phase = "while replaying it"
    elif after_load <= caught_up.replayed_seconds + idle_seconds:
        phase = "once caught up, before SIGTERM (idle-time work: the field index's sort)"
    else:
        phase = "once caught up, at shutdown"
    return (f"{after_load:.0f} s after the load, {phase} (stored at "
            f"{caught_up.stored_seconds:.0f} s, replayed at {caught_up.replayed_seconds:.0f} s)")


def _run_target(server: Server, template: RequestTemplate, args: argparse.Namespace) -> Measurement:
    children = ChildMemory(server.process.pid)
    try:
        print(f"measuring {server.name} (pid {server.process.pid}, port {server.grpc_port}) ...",
              flush=True)
        cpu_at_start = cpu_seconds(server.process.pid)
        load = drive(
            server.grpc_port,
            template,
            exporters=args.exporters,
            seconds=args.seconds,
            max_requests=args.requests,
            warmup_requests=args.warmup_requests,
        )
        cpu_at_end = cpu_seconds(server.process.pid)
        load_ended = time.monotonic()
        rss_during_load = peak_rss_mb(server.process.pid)
        caught_up = (
            catch_up(server, args.catch_up_timeout) if server.http_port is not None else None
        )
        rss = peak_rss_mb(server.process.pid)
        print(f"  {server.name}: peak RSS {rss_during_load:.0f} MB by the end of the load, "
              f"{rss:.0f} MB after catching up", flush=True)
        idle_seconds = args.idle_after if caught_up is not None else 0.0
        if idle_seconds:
            time.sleep(idle_seconds)
            rss = peak_rss_mb(server.process.pid)
            print(f"  {server.name}: peak RSS {rss:.0f} MB after {idle_seconds:.0f} s more "
                  "(idle-time work: the field index's sort)", flush=True)
    finally:
        stopped = stop(server, args.stop_timeout)
        children.stop()
    server_peak = max(rss, stopped.peak_rss_mb)
    together = children.together_with(server_peak)
    if children.peak_hwm_mb:
        print(f"  {server.name}: child processes' peak private memory "
              f"{children.peak_private_mb:.0f} MB (their VmHWM, shared library pages "
              f"included: {children.peak_hwm_mb:.0f} MB); held with the server's at once: "
              f"{together:.0f} MB, the two peaks added: "
              f"{server_peak + children.peak_private_mb:.0f} MB", flush=True)
    if children.server_files_at_peak_mb:
        print(f"  {server.name}: library files mapped at the server's last rise "
              f"(RssFile, which varies with the page cache): "
              f"{children.server_files_at_peak_mb:.0f} MB of its {server_peak:.0f} MB",
              flush=True)
    if children.server_peak_at is not None:
        when = peak_phase(children.server_peak_at - load_ended, caught_up, idle_seconds)
        print(f"  {server.name}: its high-water mark last rose {when}", flush=True)
    if stopped.killed:
        print(f"  {server.name} was still running {stopped.seconds:.0f}s after SIGTERM: killed")
    # uvicorn re-raises the SIGTERM it handled once shutdown is complete.
    elif stopped.exit_code not in (0, -signal.SIGTERM):
        print(f"  {server.name} exited with status {stopped.exit_code}")
    return Measurement(
        server.name,
        load,
        max(together, server_peak),
        template.size,
        stopped.seconds,
        caught_up,
        children.peak_private_mb,
        children.peak_hwm_mb,
        cpu_at_start,
        cpu_at_end,
    )


def _timed(function: Callable[[int], object], argument: int) -> float:
    started = time.perf_counter()
    function(argument)
    return time.perf_counter() - started


if __name__ == "__main__":
    raise SystemExit(main())
