"""A small real Junjo application that exports its telemetry to statetrail.

Run as a script (Junjo uses the global TracerProvider, which can be set only
once per process): `python junjo_app.py ENDPOINT API_KEY EXPORTER SCENARIO...`
where EXPORTER is `junjo` (JunjoOtelExporter) or `otlp` (the standard
OTLPSpanExporter with the key as a bearer token). It prints one JSON line per
scenario with the run id and the state the application itself saw, which the
tests compare with what statetrail stored.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from typing import Any

from junjo import (
    BaseState,
    BaseStore,
    Edge,
    Graph,
    Node,
    RunConcurrent,
    Subflow,
    Workflow,
)
from junjo.workflow import WorkflowExecutionError
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from pydantic import BaseModel, Field

SERVICE = "refund-service"


class Refund(BaseModel):
    eligible: bool = False
    amount: float = 0.0
    reason: str | None = None


class RefundState(BaseState):
    order_id: str = ""
    attempts: int = 0
    notes: list[str] = Field(default_factory=list)
    refund: Refund = Field(default_factory=Refund)
    customer: dict[str, Any] = Field(default_factory=dict)


class RefundStore(BaseStore[RefundState]):
    async def load_order(self, order_id: str, customer: dict[str, Any]) -> None:
        await self.set_state({"order_id": order_id, "customer": customer})

    async def attempt(self) -> None:
        await self.set_state({"attempts": self._state.attempts + 1})

    async def note(self, text: str) -> None:
        await self.set_state({"notes": [*self._state.notes, text]})

    async def decide(self, eligible: bool, amount: float, reason: str) -> None:
        await self.set_state(
            {"refund": Refund(eligible=eligible, amount=amount, reason=reason)}
        )


class LoadOrder(Node[RefundStore]):
    async def service(self, store: RefundStore) -> None:
        await store.load_order("A-1001", {"name": "Ada <script>alert(1)</script>", "tier": "gold"})


class CheckPolicy(Node[RefundStore]):
    async def service(self, store: RefundStore) -> None:
        for attempt in range(3):
            await store.attempt()
            await store.note(f"policy check {attempt}")


class Decide(Node[RefundStore]):
    async def service(self, store: RefundStore) -> None:
        await store.decide(True, 42.5, "damaged in transit")


class Explode(Node[RefundStore]):
    async def service(self, store: RefundStore) -> None:
        await store.note("calling the payment provider")
        raise RuntimeError("payment provider returned 502")


def _refund_workflow(name: str, graph: Callable[[], Graph]) -> Workflow[RefundState, RefundStore]:
    """A workflow over a fresh refund store, as every test app here runs one."""
    return Workflow[RefundState, RefundStore](
        name=name, graph_factory=graph,
        store_factory=lambda: RefundStore(initial_state=RefundState()),
    )


def linear_workflow() -> Workflow[RefundState, RefundStore]:
    def graph() -> Graph:
        load, check, decide = LoadOrder(), CheckPolicy(), Decide()
        return Graph(
            source=load, sinks=[decide],
            edges=[Edge(tail=load, head=check), Edge(tail=check, head=decide)],
        )

    return _refund_workflow("Refund Workflow", graph)


def concurrent_workflow() -> Workflow[RefundState, RefundStore]:
    def graph() -> Graph:
        concurrent = RunConcurrent(name="Checks", items=[CheckPolicy(), LoadOrder()])
        decide = Decide()
        return Graph(source=concurrent, sinks=[decide], edges=[Edge(tail=concurrent, head=decide)])

    return _refund_workflow("Concurrent Refund Workflow", graph)


class ReviewState(BaseState):
    order_id: str = ""
    verdict: str | None = None


class ReviewStore(BaseStore[ReviewState]):
    async def set_order(self, order_id: str) -> None:
        await self.set_state({"order_id": order_id})

    async def set_verdict(self, verdict: str) -> None:
        await self.set_state({"verdict": verdict})


class Review(Node[ReviewStore]):
    async def service(self, store: ReviewStore) -> None:
        await store.set_verdict("approved")


class ReviewSubflow(Subflow[ReviewState, ReviewStore, RefundState, RefundStore]):
    async def pre_run_actions(self, parent_store: RefundStore, subflow_store: ReviewStore) -> None:
        await subflow_store.set_order((await parent_store.get_state()).order_id)

    async def post_run_actions(self, parent_store: RefundStore, subflow_store: ReviewStore) -> None:
        await parent_store.note(f"review: {(await subflow_store.get_state()).verdict}")


def subflow_workflow() -> Workflow[RefundState, RefundStore]:
    def review_graph() -> Graph:
        review = Review()
        return Graph(source=review, sinks=[review], edges=[])

    def graph() -> Graph:
        load, decide = LoadOrder(), Decide()
        review = ReviewSubflow(
            name="Manual Review", graph_factory=review_graph,
            store_factory=lambda: ReviewStore(initial_state=ReviewState()),
        )
        return Graph(
            source=load, sinks=[decide],
            edges=[Edge(tail=load, head=review), Edge(tail=review, head=decide)],
        )

    return _refund_workflow("Reviewed Refund Workflow", graph)


def failing_workflow() -> Workflow[RefundState, RefundStore]:
    def graph() -> Graph:
        load, explode, decide = LoadOrder(), Explode(), Decide()
        return Graph(
            source=load, sinks=[decide],
            edges=[Edge(tail=load, head=explode), Edge(tail=explode, head=decide)],
        )

    return _refund_workflow("Failing Refund Workflow", graph)


SCENARIOS: dict[str, Callable[[], Workflow[RefundState, RefundStore]]] = {
    "linear": linear_workflow,
    "concurrent": concurrent_workflow,
    "subflow": subflow_workflow,
    "failing": failing_workflow,
}


async def run(name: str) -> dict[str, Any]:
    workflow = SCENARIOS[name]()
    try:
        result = await workflow.execute()
    except WorkflowExecutionError as exc:
        return {"scenario": name, "run_id": exc.run_id, "error": str(exc.__cause__)}
    return {
        "scenario": name,
        "run_id": result.run_id,
        "final_state": result.state.model_dump(mode="json"),
    }


def processor(endpoint: str, api_key: str, exporter: str) -> BatchSpanProcessor:
    if exporter == "junjo":
        from junjo.telemetry.junjo_otel_exporter import JunjoOtelExporter

        junjo_exporter = JunjoOtelExporter(endpoint=endpoint, api_key=api_key, insecure=True)
        span_processor: BatchSpanProcessor = junjo_exporter.span_processor
        return span_processor
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    return BatchSpanProcessor(
        OTLPSpanExporter(
            endpoint=endpoint, insecure=True, headers={"authorization": f"Bearer {api_key}"}
        )
    )


def main(argv: list[str]) -> None:
    endpoint, api_key, exporter, *names = argv
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
    provider.add_span_processor(processor(endpoint, api_key, exporter))
    trace.set_tracer_provider(provider)
    for name in names:
        print(json.dumps(asyncio.run(run(name))), flush=True)
    provider.force_flush()
    provider.shutdown()


if __name__ == "__main__":
    main(sys.argv[1:])
