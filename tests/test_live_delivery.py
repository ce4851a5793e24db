"""Live junjo telemetry delivered out of order and twice gets the same answers.

Exporters retry (a request can arrive twice), several processes' batches race,
and a Collector in between reorders them; and the workflow span comes last,
after events that may sit in other requests and other traces (SCHEMA.md).
Here a real junjo application exports with the standard OTLPSpanExporter in
small batches (so one run spans many requests) to a capturing gRPC receiver;
its exact requests are then delivered to two fresh servers, once in order and
once shuffled with duplicates, and everything the API says about every
execution must agree.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import grpc
import pytest
from support.seeds import seed_id, seeds
from support.servers import EXPORT_METHOD, MakeServer, Server, export_raw

pytestmark = [pytest.mark.junjo, pytest.mark.slow]
APP = os.path.join(os.path.dirname(__file__), "apps", "junjo_app.py")
KEY = "delivery-key"
Captured = list[tuple[bytes, list[tuple[str, str]]]]
# Seeds of the random runs and of the shuffle; try others with DELIVERY_SEEDS="1 2 3".
DELIVERY_SEEDS = seeds("DELIVERY_SEEDS", 5)


@contextmanager
def capturing_receiver() -> Iterator[tuple[str, Captured]]:
    """A gRPC Export endpoint that keeps each request's bytes and auth metadata, and acks."""
    captured: Captured = []

    def export(request: bytes, context: grpc.ServicerContext) -> bytes:
        auth = [(k, str(v)) for k, v in context.invocation_metadata() if k == "authorization"]
        captured.append((request, auth))
        return b""  # an empty ExportTraceServiceResponse: all accepted

    service, method = EXPORT_METHOD.strip("/").split("/")
    handler = grpc.method_handlers_generic_handler(
        service, {method: grpc.unary_unary_rpc_method_handler(export)}
    )
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", captured
    finally:
        server.stop(None)


def _capture(*scenarios: str, seed: int) -> Captured:
    with capturing_receiver() as (target, captured):
        subprocess.run(
            [sys.executable, APP, target, KEY, "otlp", *scenarios],
            capture_output=True, text=True, timeout=120, check=True,
            env={
                **os.environ, "RANDOM_RUNS_SEED": str(seed),
                # Small batches: a run's spans and events spread over many requests.
                "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "3", "OTEL_BSP_SCHEDULE_DELAY": "5",
            },
        )
    return list(captured)


def _answers(server: Server) -> dict[str, Any]:
    """What the API says about every execution: the list, each page's facts, every state."""
    answers: dict[str, Any] = {"spans": server.get_json("/healthz")["spans"]}
    for listed in server.get_json("/api/executions?limit=500")["executions"]:
        api = f"/api/executions/{urllib.parse.quote(listed['id'], safe='')}"
        detail = server.get_json(api)
        timeline = server.get_json(f"{api}/timeline")
        answers[listed["id"]] = {
            "listed": {k: listed[k] for k in (
                "kind", "workflow", "status", "verdict", "transition_count",
                "received_transitions", "store_id", "parent_id",
            )},
            "diagnostics": sorted(d["code"] for d in detail["diagnostics"]),
            "children": sorted(child["id"] for child in detail["children"]),
            "timeline": [
                (t["sequence"], t["node"], t["patch"], t["changed_paths"], t["verified"])
                for t in timeline["transitions"]
            ],
            "end": timeline["end"],
            "states": [
                server.get_json(f"{api}/state?sequence={t['sequence']}")["state"]
                for t in timeline["transitions"]
            ],
        }
    return answers


@pytest.mark.parametrize("seed", DELIVERY_SEEDS, ids=seed_id)
def test_live_runs_delivered_shuffled_and_twice_get_the_answers_of_in_order_delivery(
    make_server: MakeServer, seed: int
) -> None:
    scenarios = ("random", "borrowed_store", "concurrent_subflow", "agent_in_node")
    requests = _capture(*scenarios, seed=seed)
    assert len(requests) > 20, len(requests)
    rng = random.Random(seed)
    shuffled = [*requests, *rng.sample(requests, len(requests) // 3)]
    rng.shuffle(shuffled)

    answers = []
    for delivery in (requests, shuffled):
        server = make_server("--api-key", KEY)
        for body, metadata in delivery:
            export_raw(server.grpc_target, body, metadata)
        server.wait_replayed()
        answers.append(_answers(server))

    in_order, reordered = answers
    # Delivered in order, every run is whole, but the one whose store a task outside
    # any span wrote (borrowed_store "two"): its interval has a hole.
    unverified = {
        a["listed"]["workflow"]: a["listed"]["verdict"]
        for key, a in in_order.items() if key != "spans" and a["listed"]["verdict"] != "verified"
    }
    assert unverified == {"Handoff Workflow": "partial"}
    assert len(in_order) > 15  # "spans", and over 14 executions
    assert reordered.keys() == in_order.keys()
    for key in in_order:
        assert reordered[key] == in_order[key], key
