"""Fuzzing the ingest pipeline: random OTLP messages and mutated captured requests.

In process, every input goes decode -> Junjo extraction -> DuckDB write (an
in-memory store) -> replay, field index and the JSON the API would render; the
only exception allowed anywhere is DecodeError for bytes that are not a
request. A smaller set goes through a real server, which may answer only OK
(possibly with partial success) or INVALID_ARGUMENT, and must stay healthy with
everything stored before still there.

Volume per run: FUZZ_MESSAGES + FUZZ_BYTES examples in process, FUZZ_SERVER
through the server (`pytest tests/test_fuzz.py -s` prints the counts).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from support.otlp_strategies import ExportRequest, fixture_bodies, mutated_bytes, requests
from support.servers import FIXTURE_API_KEY, Server, export_raw

from collector.decode.otlp import DecodeError, parse_request
from collector.encode.exports import batch_from_export
from collector.evidence import load_history
from collector.index.indexing import field_index
from collector.replay.history import StateUnavailableError
from collector.store import Store
from studio.views.api import json_value, timeline

FUZZ_MESSAGES = 200
FUZZ_BYTES = 400
FUZZ_SERVER = 40
KEY = (("x-junjo-api-key", FIXTURE_API_KEY),)
COUNTS: Counter[str] = Counter()

# -- the in-process pipeline -----------------------------------------------------------


@pytest.fixture(scope="module")
def memory_store() -> Iterator[Store]:
    store = Store(":memory:")
    yield store
    store.close()


def _pipeline(store: Store, body: bytes) -> None:
    """Every stage an export goes through, plus what the studio renders from it."""
    try:
        parse_request(body)  # what the receivers check before acknowledging
    except DecodeError:
        COUNTS["decode_error"] += 1
        return
    # Storing reads the same bytes through collector/decode/wire.py's schema: it must
    # accept whatever the receivers accepted (a DecodeError here fails the test).
    batch = batch_from_export(body)
    COUNTS["spans"] += len(batch.spans)
    if not batch.spans:
        return
    evidence = batch.evidence
    result = store.write([batch])
    for execution in store.executions_for_stores(result.store_ids) + [
        e for e in evidence.executions if not e.store_id
    ]:
        COUNTS["replays"] += 1
        history, _ = load_history(store, execution)
        index = field_index(history, execution.run_id)
        rendered = {
            "diagnostics": [asdict(d) for d in history.diagnostics],
            "timeline": [entry._asdict() for entry in timeline(history)],
            "rows": len(index.rows),
        }
        if history.has_states:
            try:
                state = history.state_at(history.last_sequence)
            except StateUnavailableError:
                state = None
            rendered["state"] = state
            rendered["end"] = json_value(history.recorded_end)
        # What the JSON API would send: strict JSON (Starlette refuses NaN/inf).
        json.dumps(rendered, allow_nan=False, default=str)


@pytest.mark.slow
@settings(max_examples=FUZZ_MESSAGES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(request=requests())
def test_fuzz_random_otlp_messages_never_crash_the_pipeline(
    memory_store: Store, request: ExportRequest
) -> None:
    COUNTS["messages"] += 1
    _pipeline(memory_store, request.SerializeToString())


@settings(max_examples=FUZZ_BYTES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=mutated_bytes())
def test_fuzz_mutated_fixture_bytes_never_crash_the_pipeline(
    memory_store: Store, body: bytes
) -> None:
    COUNTS["byte_mutations"] += 1
    _pipeline(memory_store, body)


# -- through a real server ----------------------------------------------------------


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = Server.on_free_ports(tmp_path_factory.mktemp("fuzz") / "fuzz.duckdb").start()
    for body in fixture_bodies():
        export_raw(server.grpc_target, body, KEY)
    server.wait_replayed()
    yield server
    server.stop()


@pytest.mark.slow
@settings(max_examples=FUZZ_SERVER, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(body=st.one_of(requests().map(lambda r: r.SerializeToString()), mutated_bytes()))
def test_fuzz_server_answers_only_documented_codes(fuzz_server: Server, body: bytes) -> None:
    COUNTS["server"] += 1
    before: dict[str, Any] = fuzz_server.get_json("/healthz")
    try:
        reply = export_raw(fuzz_server.grpc_target, body, KEY, timeout=60)
    except grpc.RpcError as error:
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    else:
        trace_service_pb2.ExportTraceServiceResponse.FromString(reply)
    after: dict[str, Any] = fuzz_server.get_json("/healthz")
    assert after["status"] == "ok"
    for table in ("spans", "executions", "transitions"):
        assert after[table] >= before[table]


def test_fuzz_volume_report(fuzz_server: Server) -> None:
    """Runs last in this module: prints how much was fuzzed, and the server is still whole."""
    print(f"\nfuzz volume: {dict(COUNTS)}")
    assert fuzz_server.wait_replayed()["status"] == "ok"
    assert fuzz_server.get_json("/api/executions?limit=5")["executions"]
