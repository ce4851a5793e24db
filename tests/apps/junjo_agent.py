"""A Junjo workflow whose node runs a Junjo Agent (SCHEMA.md 2.4, `j_agent_in_node`).

Imported by junjo_app.py, which runs it as the `agent_in_node` scenario. The
model is junjo's own ScriptedModelDriver (no network): request 1 asks for one
`record_note` call, the tool writes the *workflow's* store (the agent's
application store), so that write's set_state event sits on the tool span
among the agent's private AgentStore events; request 2 returns the decision,
which the node then writes to the workflow store. The `failing_agent` scenario
runs the same agent with a tool that writes the store and then raises.
`agent_own_store` runs the agent with stores no workflow owns: at the top level
with `store=` (a store set up before, untraced), and in a node with its own
`store_factory`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from junjo import BaseState, BaseStore, Edge, Graph, Node, Workflow
from junjo.agent import (
    Agent,
    AgentRunContext,
    ModelDriverBinding,
    ModelDriverDescriptor,
    Tool,
    ToolService,
)
from junjo.agent.testing import ScriptedModelDriver
from pydantic import BaseModel, Field


class Decision(BaseModel):
    approved: bool
    amount: float
    reason: str


class ClaimState(BaseState):
    order_id: str = ""
    notes: list[str] = Field(default_factory=list)
    decision: Decision | None = None


class ClaimStore(BaseStore[ClaimState]):
    async def load_claim(self, order_id: str) -> None:
        await self.set_state({"order_id": order_id})

    async def note(self, text: str) -> None:
        await self.set_state({"notes": [*self._state.notes, text]})

    async def decide(self, decision: Decision) -> None:
        await self.set_state({"decision": decision})


class TriageInput(BaseModel):
    order_id: str


class NoteInput(BaseModel):
    text: str


class NoteResult(BaseModel):
    note_count: int


async def record_note(input: NoteInput, context: AgentRunContext[None, ClaimStore]) -> NoteResult:
    """Tool service: writes the workflow's store (the Agent's application store)."""
    await context.store.note(input.text)
    return NoteResult(note_count=len((await context.store.get_state()).notes))


# Response candidates in the shape junjo.agent.messages.normalize_model_response reads.
SCRIPT: tuple[dict[str, Any], ...] = (
    {
        "v": 1,
        "type": "tool_calls",
        "calls": [
            {
                "id": "call_1",
                "name": "record_note",
                "arguments": {"text": "carrier confirmed damage"},
            }
        ],
        "usage": {"v": 1, "inputTokens": 120, "outputTokens": 18},
    },
    {
        "v": 1,
        "type": "final_output",
        "output": {"approved": True, "amount": 42.5, "reason": "damaged in transit"},
        "usage": {"v": 1, "inputTokens": 160, "outputTokens": 24},
    },
)

async def unreachable_carrier(
    input: NoteInput, context: AgentRunContext[None, ClaimStore]
) -> NoteResult:
    """Tool service that fails after writing the workflow's store, as a flaky API does."""
    await context.store.note(f"asking the carrier: {input.text}")
    raise ConnectionError("carrier API unreachable")


def _triage_agent(
    tool_service: ToolService[NoteInput, NoteResult, None, ClaimStore],
    name: str = "Refund Triage Agent",
    store_factory: Callable[[], ClaimStore] | None = None,
) -> Agent[TriageInput, Decision, None, ClaimState, ClaimStore]:
    return Agent[TriageInput, Decision, None, ClaimState, ClaimStore](
        key="refund-triage",
        name=name,
        store_factory=store_factory,
        instructions="Record what you verified with record_note, then decide the refund.",
        input_type=TriageInput,
        output_type=Decision,
        model=ModelDriverBinding.per_run(
            descriptor=ModelDriverDescriptor(
                driver_key="junjo.scripted", provider="junjo", model="scripted", fixture=True
            ),
            factory=lambda: ScriptedModelDriver(SCRIPT),
        ),
        tools=[
            Tool[NoteInput, NoteResult, None, ClaimStore](
                name="record_note",
                description="Append a verified finding to the refund claim.",
                input_type=NoteInput,
                output_type=NoteResult,
                shared_service=tool_service,
            )
        ],
    )


class LoadClaim(Node[ClaimStore]):
    async def service(self, store: ClaimStore) -> None:
        await store.load_claim("A-1001")


class Triage(Node[ClaimStore]):
    def __init__(self, agent: Agent[TriageInput, Decision, None, ClaimState, ClaimStore]) -> None:
        super().__init__()
        self.agent = agent

    async def service(self, store: ClaimStore) -> None:
        state = await store.get_state()
        result = await self.agent.execute(
            TriageInput(order_id=state.order_id), dependencies=None, store=store
        )
        await store.decide(result.output)


def agent_workflow() -> Workflow[ClaimState, ClaimStore]:
    return _agent_workflow("Agent Refund Workflow", record_note)


def failing_agent_workflow() -> Workflow[ClaimState, ClaimStore]:
    """The agent's tool raises: the agent fails, and with it the node and the workflow."""
    return _agent_workflow("Failing Agent Refund Workflow", unreachable_carrier)


def _agent_workflow(
    name: str,
    tool_service: ToolService[NoteInput, NoteResult, None, ClaimStore],
) -> Workflow[ClaimState, ClaimStore]:
    def graph() -> Graph:
        load, triage = LoadClaim(), Triage(_triage_agent(tool_service))
        return Graph(source=load, sinks=[triage], edges=[Edge(tail=load, head=triage)])

    return Workflow[ClaimState, ClaimStore](
        name=name,
        graph_factory=graph,
        store_factory=lambda: ClaimStore(initial_state=ClaimState()),
    )


class OwnStoreTriage(Node[ClaimStore]):
    """Runs the agent on a claim store of its own (the agent's `store_factory`)."""

    def __init__(self, agent: Agent[TriageInput, Decision, None, ClaimState, ClaimStore]) -> None:
        super().__init__()
        self.agent = agent

    async def service(self, store: ClaimStore) -> None:
        result = await self.agent.execute(TriageInput(order_id="A-1001"), dependencies=None)
        await store.decide(result.output)


def own_store_agent_workflow() -> Workflow[ClaimState, ClaimStore]:
    def agent_store() -> ClaimStore:
        return ClaimStore(initial_state=ClaimState(order_id="A-1001"))

    def graph() -> Graph:
        triage = OwnStoreTriage(_triage_agent(record_note, "Own Store Agent", agent_store))
        return Graph(source=triage, sinks=[triage], edges=[])

    return Workflow[ClaimState, ClaimStore](
        name="Own Store Agent Workflow",
        graph_factory=graph,
        store_factory=lambda: ClaimStore(initial_state=ClaimState()),
    )


async def top_level_agent_run() -> dict[str, Any]:
    """An agent executed by the application itself, on a store it set up first."""
    store = ClaimStore(initial_state=ClaimState())
    await store.load_claim("B-2002")  # no span is current: this write has no event
    result = await _triage_agent(record_note, "Top Level Agent").execute(
        TriageInput(order_id="B-2002"), dependencies=None, store=store
    )
    assert result.application_state is not None
    return {
        "scenario": "top_level_agent",
        "run_id": result.run_id,
        "final_state": result.application_state.model_dump(mode="json"),
    }
