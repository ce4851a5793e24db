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
import copy
import itertools
import json
import os
import random
import sys
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from junjo import (
    BaseState,
    BaseStore,
    Condition,
    Edge,
    Graph,
    Node,
    RunConcurrent,
    Subflow,
    Workflow,
    WorkflowCancelledError,
    WorkflowExecutionError,
)
from junjo_agent import (
    agent_workflow,
    failing_agent_workflow,
    own_store_agent_workflow,
    top_level_agent_run,
)
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


def _review_graph() -> Graph:
    review = Review()
    return Graph(source=review, sinks=[review], edges=[])


def _review_subflow() -> ReviewSubflow:
    return ReviewSubflow(
        name="Manual Review", graph_factory=_review_graph,
        store_factory=lambda: ReviewStore(initial_state=ReviewState()),
    )


def subflow_workflow() -> Workflow[RefundState, RefundStore]:
    def graph() -> Graph:
        load, review, decide = LoadOrder(), _review_subflow(), Decide()
        return Graph(
            source=load, sinks=[decide],
            edges=[Edge(tail=load, head=review), Edge(tail=review, head=decide)],
        )

    return _refund_workflow("Reviewed Refund Workflow", graph)


def concurrent_subflow_workflow() -> Workflow[RefundState, RefundStore]:
    """A subflow as a RunConcurrent child: it names the RunConcurrent as its parent."""

    def graph() -> Graph:
        load = LoadOrder()
        checks = RunConcurrent(name="Review And Check", items=[_review_subflow(), CheckPolicy()])
        decide = Decide()
        return Graph(
            source=load, sinks=[decide],
            edges=[Edge(tail=load, head=checks), Edge(tail=checks, head=decide)],
        )

    return _refund_workflow("Concurrently Reviewed Refund Workflow", graph)


def twin_subflows_workflow() -> Workflow[RefundState, RefundStore]:
    """Two instances of one subflow: one graph shape, so one structural id for both."""

    def graph() -> Graph:
        load, first, second, decide = LoadOrder(), _review_subflow(), _review_subflow(), Decide()
        return Graph(
            source=load, sinks=[decide],
            edges=[
                Edge(tail=load, head=first), Edge(tail=first, head=second),
                Edge(tail=second, head=decide),
            ],
        )

    return _refund_workflow("Twice Reviewed Refund Workflow", graph)


def failing_workflow() -> Workflow[RefundState, RefundStore]:
    def graph() -> Graph:
        load, explode, decide = LoadOrder(), Explode(), Decide()
        return Graph(
            source=load, sinks=[decide],
            edges=[Edge(tail=load, head=explode), Edge(tail=explode, head=decide)],
        )

    return _refund_workflow("Failing Refund Workflow", graph)


class CustomerIsGold(Condition[RefundState]):
    """An edge condition that raises: the customer record has no tier."""

    def evaluate(self, state: RefundState) -> bool:
        return bool(state.customer["loyalty_tier"] == "gold")


def failing_condition_workflow() -> Workflow[RefundState, RefundStore]:
    def graph() -> Graph:
        load, decide = LoadOrder(), Decide()
        return Graph(
            source=load, sinks=[decide],
            edges=[Edge(tail=load, head=decide, condition=CustomerIsGold())],
        )

    return _refund_workflow("Gold Refund Workflow", graph)


class AskModel(Node[RefundStore]):
    """Calls a model through an instrumented client span, which raises.

    With `recover`, the node catches the error and goes on, as a retrying node does.
    """

    def __init__(self, recover: bool) -> None:
        super().__init__()
        self.recover = recover

    async def service(self, store: RefundStore) -> None:
        await store.note("asking the model")
        try:
            # The SDK marks this span ERROR as the exception leaves it.
            with trace.get_tracer("my.app.llm").start_as_current_span("llm.chat_completion"):
                raise TimeoutError("model timed out")
        except TimeoutError:
            if not self.recover:
                raise
            await store.note("model timed out, using the rules instead")


def llm_failure_workflow() -> Workflow[RefundState, RefundStore]:
    def graph() -> Graph:
        recovers, fails, decide = AskModel(recover=True), AskModel(recover=False), Decide()
        return Graph(
            source=recovers, sinks=[decide],
            edges=[Edge(tail=recovers, head=fails), Edge(tail=fails, head=decide)],
        )

    return _refund_workflow("Model Refund Workflow", graph)


class FailingReview(Subflow[RefundState, RefundStore, RefundState, RefundStore]):
    """A subflow whose node raises: the parent fails with a WorkflowExecutionError."""

    async def pre_run_actions(self, parent_store: RefundStore, subflow_store: RefundStore) -> None:
        await subflow_store.note("reviewing")

    async def post_run_actions(self, parent_store: RefundStore, subflow_store: RefundStore) -> None:
        await parent_store.note("reviewed")


def failing_subflow_workflow() -> Workflow[RefundState, RefundStore]:
    def review_graph() -> Graph:
        explode = Explode()
        return Graph(source=explode, sinks=[explode], edges=[])

    def graph() -> Graph:
        load, decide = LoadOrder(), Decide()
        review = FailingReview(
            name="Failing Review", graph_factory=review_graph,
            store_factory=lambda: RefundStore(initial_state=RefundState()),
        )
        return Graph(
            source=load, sinks=[decide],
            edges=[Edge(tail=load, head=review), Edge(tail=review, head=decide)],
        )

    return _refund_workflow("Refund With Failing Review", graph)


class AwaitBank(Node[RefundStore]):
    """Waits for an answer that never comes, once it has told the application it started."""

    def __init__(self, started: asyncio.Event) -> None:
        super().__init__()
        self.started = started

    async def service(self, store: RefundStore) -> None:
        await store.note("waiting for the bank")
        self.started.set()
        await asyncio.Event().wait()  # never set: only cancelling the run ends it


def hanging_workflow(started: asyncio.Event) -> Workflow[RefundState, RefundStore]:
    def graph() -> Graph:
        load, wait, decide = LoadOrder(), AwaitBank(started), Decide()
        return Graph(
            source=load, sinks=[decide],
            edges=[Edge(tail=load, head=wait), Edge(tail=wait, head=decide)],
        )

    return _refund_workflow("Hanging Refund Workflow", graph)


async def cancelled_run() -> dict[str, Any]:
    """A run cancelled from outside while a node waits, as a caller's timeout does."""
    started = asyncio.Event()
    return await _cancelled_once_started("cancelled", hanging_workflow(started), started)


async def _cancelled_once_started(
    scenario: str, workflow: Workflow[Any, Any], started: asyncio.Event
) -> dict[str, Any]:
    task = asyncio.create_task(workflow.execute())
    await started.wait()
    task.cancel()
    try:
        await task
    except WorkflowCancelledError as exc:
        return {"scenario": scenario, "run_id": exc.run_id}
    raise AssertionError("the hanging run ended without being cancelled")


class PassThrough(Subflow[RefundState, RefundStore, RefundState, RefundStore]):
    """A subflow on a store of its own kind; its actions write nothing."""

    async def pre_run_actions(self, parent_store: RefundStore, subflow_store: RefundStore) -> None:
        return None

    async def post_run_actions(self, parent_store: RefundStore, subflow_store: RefundStore) -> None:
        return None


def _subflow(name: str, body: Callable[[], Node[RefundStore] | PassThrough]) -> PassThrough:
    def graph() -> Graph:
        load, inside = LoadOrder(), body()
        return Graph(source=load, sinks=[inside], edges=[Edge(tail=load, head=inside)])

    return PassThrough(
        name=name, graph_factory=graph,
        store_factory=lambda: RefundStore(initial_state=RefundState()),
    )


async def cancelled_deep_run() -> dict[str, Any]:
    """Cancelled while a node waits two subflows deep: Outer Review > Inner Review > AwaitBank."""
    started = asyncio.Event()

    def inner() -> PassThrough:
        return _subflow("Inner Review", lambda: AwaitBank(started))

    def graph() -> Graph:
        outer = _subflow("Outer Review", inner)
        return Graph(source=outer, sinks=[outer], edges=[])

    workflow = _refund_workflow("Deep Hanging Workflow", graph)
    return await _cancelled_once_started("cancelled_deep", workflow, started)


class Chat(BaseModel):
    role: str
    text: str


class ChatState(BaseState):
    messages: list[Chat] = Field(default_factory=list)
    turns: int = 0


class ChatStore(BaseStore[ChatState]):
    async def append(self, message: Chat) -> None:
        await self.set_state({"messages": [*self._state.messages, message]})

    async def next_turn(self) -> None:
        await self.set_state({"turns": self._state.turns + 1})


CHAT_TURNS = 30
APPENDS_PER_TURN = 20


class Converse(Node[ChatStore]):
    async def service(self, store: ChatStore) -> None:
        turn = (await store.get_state()).turns
        if turn == CHAT_TURNS // 2:
            # Export what has ended so far, as the batch processor does every 5 s
            # of a long run: the rest, the workflow span last, comes in later
            # requests, however fast this machine is.
            provider = trace.get_tracer_provider()
            assert isinstance(provider, TracerProvider)  # the SDK's, installed by main()
            provider.force_flush()
        for index in range(APPENDS_PER_TURN):
            role = "user" if index % 2 == 0 else "assistant"
            text = f"turn {turn} message {index}: " + "lorem ipsum dolor sit amet " * 3
            await store.append(Chat(role=role, text=text))
        await store.next_turn()


class TurnsBelow(Condition[ChatState]):
    def __init__(self, limit: int) -> None:
        self.limit = limit

    def evaluate(self, state: ChatState) -> bool:
        return state.turns < self.limit

    def __str__(self) -> str:
        return f"TurnsBelow({self.limit})"


class Summarize(Node[ChatStore]):
    async def service(self, store: ChatStore) -> None:
        count = len((await store.get_state()).messages)
        await store.append(Chat(role="system", text=f"summary of {count} messages"))


def large_state_loop_workflow() -> Workflow[ChatState, ChatStore]:
    """g2_large_state_loop's shape: a looping node grows a large state, 20 appends a turn.

    Its spans are split over several requests with the workflow span in the last.
    """

    def graph() -> Graph:
        converse, summarize = Converse(), Summarize()
        return Graph(
            source=converse, sinks=[summarize],
            edges=[
                Edge(tail=converse, head=converse, condition=TurnsBelow(CHAT_TURNS)),
                Edge(tail=converse, head=summarize),
            ],
        )

    return Workflow[ChatState, ChatStore](
        name="Chat Workflow", graph_factory=graph,
        store_factory=lambda: ChatStore(initial_state=ChatState()),
    )


class HandOff(Node[RefundStore]):
    """Lets a task that no span is current in write the store, and waits for it."""

    def __init__(self, started: asyncio.Event, done: asyncio.Event) -> None:
        super().__init__()
        self.started, self.done = started, done

    async def service(self, store: RefundStore) -> None:
        await store.note("handing off")
        self.started.set()
        await self.done.wait()
        await store.attempt()


def handoff_workflow(
    started: asyncio.Event, done: asyncio.Event
) -> Workflow[RefundState, RefundStore]:
    def graph() -> Graph:
        handoff, decide = HandOff(started, done), Decide()
        return Graph(source=handoff, sinks=[decide], edges=[Edge(tail=handoff, head=decide)])

    return _refund_workflow("Handoff Workflow", graph)


async def borrowed_store_runs() -> list[dict[str, Any]]:
    """h_borrowed_store's shape: one live store lent to four executions, each its own trace.

    "two" runs while a background task created outside any span writes the
    store: that write takes a sequence number but no event records it.
    "three" and "four" run at once, so each one's interval holds the other's writes.
    """
    store = RefundStore(initial_state=RefundState())
    runs = [("one", await linear_workflow().execute(store=store))]
    started, done = asyncio.Event(), asyncio.Event()

    async def untraced_write() -> None:
        await started.wait()
        await store.note("written by a background task")
        done.set()

    background = asyncio.create_task(untraced_write())
    runs.append(("two", await handoff_workflow(started, done).execute(store=store)))
    await background
    three, four = await asyncio.gather(
        linear_workflow().execute(store=store), linear_workflow().execute(store=store)
    )
    runs += [("three", three), ("four", four)]
    return [
        {
            "scenario": f"borrowed_{label}",
            "run_id": result.run_id,
            "final_state": result.state.model_dump(mode="json"),
        }
        for label, result in runs
    ]


class LedgerState(BaseState):
    amount: Decimal = Decimal("0")
    flag: Any = None


class LedgerStore(BaseStore[LedgerState]):
    async def set_amount(self, amount: Decimal) -> None:
        await self.set_state({"amount": amount})

    async def set_flag(self, flag: Any) -> None:
        await self.set_state({"flag": flag})


class Book(Node[LedgerStore]):
    """Writes values equal in Python to what the store holds, serialized otherwise.

    Decimal 12.50 == 12.5 and True == 1: Junjo records a patch for each, but the
    store keeps its state (and revision).
    """

    async def service(self, store: LedgerStore) -> None:
        await store.set_amount(Decimal("12.50"))
        await store.set_amount(Decimal("12.5"))
        await store.set_flag(1)
        await store.set_flag(True)


def ledger_workflow() -> Workflow[LedgerState, LedgerStore]:
    def graph() -> Graph:
        book = Book()
        return Graph(source=book, sinks=[book], edges=[])

    return Workflow[LedgerState, LedgerStore](
        name="Ledger Workflow", graph_factory=graph,
        store_factory=lambda: LedgerStore(initial_state=LedgerState()),
    )


def policy_check_workflow() -> Workflow[RefundState, RefundStore]:
    def graph() -> Graph:
        check = CheckPolicy()
        return Graph(source=check, sinks=[check], edges=[])

    return _refund_workflow("Policy Check", graph)


class KeyedState(BaseState):
    data: dict[str, Any] = Field(default_factory=dict)
    items: list[str] = Field(default_factory=list)


class KeyedStore(BaseStore[KeyedState]):
    """Records each state it commits: the application's own account of every step."""

    def __init__(self, initial_state: KeyedState) -> None:
        super().__init__(initial_state=initial_state)
        self.started = initial_state.model_dump(mode="json")
        self.committed: list[dict[str, Any]] = []
        self.writers: list[str] = []

    async def put(self, writer: str = "", **update: Any) -> None:
        # A copy: the caller goes on editing its dicts and lists for the next step.
        await self.set_state(copy.deepcopy(update))
        self.committed.append(self._state.model_dump(mode="json"))
        self.writers.append(writer)


# Keys that JSON Pointer escapes ("/" and "~"), that look like list indexes, that are
# empty, non-ASCII or markup: each step's patch addresses them (SCHEMA.md 3.1).
AWKWARD_DATA: dict[str, Any] = {
    "a/b": 1, "~x": {"0": "zero"}, "0": [1, 2], "10": True, "": "empty",
    "ü ñ": "unicode", "<b>": "<script>alert(1)</script>",
}


class RewriteAwkwardKeys(Node[KeyedStore]):
    async def service(self, store: KeyedStore) -> None:
        # Over what the concurrent writers left, so their keys are in the final state too.
        data = {**(await store.get_state()).data, **copy.deepcopy(AWKWARD_DATA)}
        await store.put(data=data)
        data["~x"]["0"], data["10"] = "changed", False
        await store.put(data=data)
        await store.put(items=["a", "b", "c"])
        await store.put(items=["c", "a", "b"])  # a reorder: a `move` op
        del data["a/b"]
        data["~1"] = None
        await store.put(data=data)
        data["0"].append(3)
        await store.put(data=data)
        await store.put(items=[])  # a clear: one `remove` per element
        await store.put(items=[])  # a no-op: patch [], sequence still +1


class TallyAwkwardKeys(Node[KeyedStore]):
    """One of several concurrent writers of one store, each under its own awkward keys."""

    def __init__(self, label: str) -> None:
        super().__init__()
        self.label = label

    async def service(self, store: KeyedStore) -> None:
        for count in range(4):
            data = (await store.get_state()).data
            await store.put(self.label, data={**data, f"{self.label}/{count}": count})
            await asyncio.sleep(0)  # let the other writers in between


async def awkward_keys_run() -> dict[str, Any]:
    """A run whose every step writes awkward keys; with the state after each step.

    Three concurrent writers interleave their steps first (SCHEMA.md 7: their
    events sit on three spans, ordered by the store's sequence alone).
    """
    store = KeyedStore(KeyedState())

    def graph() -> Graph:
        tallies = RunConcurrent(
            name="Tallies", items=[TallyAwkwardKeys(label) for label in ("x/y", "~0", "1")]
        )
        rewrite = RewriteAwkwardKeys()
        return Graph(source=tallies, sinks=[rewrite], edges=[Edge(tail=tallies, head=rewrite)])

    workflow = Workflow[KeyedState, KeyedStore](
        name="Awkward Keys", graph_factory=graph, store_factory=lambda: store
    )
    result = await workflow.execute()
    return {
        "scenario": "awkward_keys",
        "run_id": result.run_id,
        "final_state": result.state.model_dump(mode="json"),
        "states": store.committed,
        "writers": store.writers,
    }


# Random runs (tests/test_live_junjo.py): keys and values chosen to be awkward for
# JSON Pointer, JSON Patch's list diffs, the field index and HTML alike.
RANDOM_KEYS = (
    "a", "b", "c", "a/b", "~", "~1", "0", "1", "10", "", "ü ñ", "x y", '"q"', "<i>", "and",
)
RANDOM_SCALARS: tuple[Any, ...] = (
    None, True, False, 0, 1, -7, 2**53 - 1, -(2**53 - 1), 0.5, -2.25, 1e-07, 1.5e300,
    "", "x", "refund", "<script>alert(1)</script>", "ü ñ", 'quote " and \\', "line\nbreak", "~0/1",
)
RANDOM_DEPTH = 4
RANDOM_RUNS = 8


def random_value(rng: random.Random, depth: int) -> Any:
    """A JSON value nested at most RANDOM_DEPTH deep below `depth`."""
    roll = rng.random()
    if depth < RANDOM_DEPTH and roll < 0.2:
        size = rng.randint(0, 3)
        return {rng.choice(RANDOM_KEYS): random_value(rng, depth + 1) for _ in range(size)}
    if depth < RANDOM_DEPTH and roll < 0.35:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return rng.choice(RANDOM_SCALARS)


def _containers(value: Any, depth: int = 0) -> list[tuple[Any, int]]:
    """Every dict and list inside `value` (itself included), with its depth."""
    if isinstance(value, dict):
        children = list(value.values())
    elif isinstance(value, list):
        children = value
    else:
        return []
    found = [(value, depth)]
    for child in children:
        found.extend(_containers(child, depth + 1))
    return found


def random_edit(rng: random.Random, data: dict[str, Any]) -> None:
    """One edit in place: set or delete a key; replace, insert, delete or shuffle in a list."""
    target, depth = rng.choice(_containers(data))
    roll = rng.random()
    if isinstance(target, dict):
        if target and roll < 0.3:
            del target[rng.choice(list(target))]
        else:
            target[rng.choice(RANDOM_KEYS)] = random_value(rng, depth + 1)
    elif target and roll < 0.25:
        del target[rng.randrange(len(target))]
    elif target and roll < 0.45:
        target[rng.randrange(len(target))] = random_value(rng, depth + 1)
    elif target and roll < 0.6:
        rng.shuffle(target)
    else:
        target.insert(rng.randint(0, len(target)), random_value(rng, depth + 1))


async def random_commit(rng: random.Random, store: KeyedStore, writer: str) -> None:
    """Commit 0-3 random edits of `data` (0: a no-op, patch []), sometimes of `items` too."""
    state = await store.get_state()
    data, items = copy.deepcopy(state.data), list(state.items)
    for _ in range(rng.choice((0, 1, 1, 2, 3))):
        random_edit(rng, data)
    if rng.random() < 0.2:
        rng.shuffle(items)
        items.insert(rng.randint(0, len(items)), rng.choice(("p", "q", "r")))
    await store.put(writer, data=data, items=items)


def random_start(rng: random.Random) -> KeyedState:
    data = {rng.choice(RANDOM_KEYS): random_value(rng, 2) for _ in range(rng.randint(0, 4))}
    return KeyedState(data=data, items=["p", "q"])


class RandomEdits(Node[KeyedStore]):
    """Commits a few random edits; subclassed per node so each has its own name.

    `fails`: raises once its edits are committed, as a node whose model call
    failed would, so the run ends in error after a random history.
    """

    def __init__(self, seed: int, fails: bool) -> None:
        super().__init__()
        self.seed, self.fails = seed, fails

    async def service(self, store: KeyedStore) -> None:
        rng = random.Random(self.seed)
        for _ in range(rng.randint(1, 3)):
            await random_commit(rng, store, self.name)
            await asyncio.sleep(0)  # let concurrent siblings in between
        if self.fails:
            raise RuntimeError(f"{self.name} failed on purpose")


class RandomSubflow(Subflow[KeyedState, KeyedStore, KeyedState, KeyedStore]):
    """A random graph on a store of its own; its actions edit both stores.

    Its store is kept in `stores` under its name, for the caller to read what
    it committed.
    """

    def __init__(self, name: str, seed: int, depth: int, stores: dict[str, KeyedStore]) -> None:
        self.rng = random.Random(seed)
        start, graph_seed = random_start(self.rng), self.rng.randrange(2**32)

        def new_store() -> KeyedStore:
            stores[name] = KeyedStore(start.model_copy(deep=True))
            return stores[name]

        super().__init__(
            name=name,
            graph_factory=lambda: random_graph(random.Random(graph_seed), name, depth + 1, stores),
            store_factory=new_store,
        )

    async def pre_run_actions(self, parent_store: KeyedStore, subflow_store: KeyedStore) -> None:
        await random_commit(self.rng, subflow_store, self.name)

    async def post_run_actions(self, parent_store: KeyedStore, subflow_store: KeyedStore) -> None:
        await random_commit(self.rng, parent_store, self.name)


def random_graph(
    rng: random.Random, prefix: str, depth: int, stores: dict[str, KeyedStore]
) -> Graph:
    """A chain of 1-4 stages: a node, a RunConcurrent of 2-3 nodes, or a subflow.

    Names come from positions, so building the graph again names it the same.
    A failing node is never a RunConcurrent child: the siblings it cancels could
    be stopped between committing and recording a state.
    """
    names = iter(range(1, 100))

    def node(fails: bool = False) -> RandomEdits:
        kind = type(f"Edit{next(names)}", (RandomEdits,), {})
        edits: RandomEdits = kind(rng.randrange(2**32), fails)
        return edits

    stages: list[Node[KeyedStore] | RunConcurrent | RandomSubflow] = []
    for index in range(rng.randint(1, 4)):
        roll = rng.random()
        if roll < 0.3:
            siblings = [node() for _ in range(rng.randint(2, 3))]
            stages.append(RunConcurrent(name=f"Stage{index}", items=siblings))
        elif roll < 0.45 and depth < 2:
            name = f"{prefix}.Sub{index}" if prefix else f"Sub{index}"
            stages.append(RandomSubflow(name, rng.randrange(2**32), depth, stores))
        else:
            stages.append(node(fails=rng.random() < 0.04))
    pairs = itertools.pairwise(stages)
    edges: list[Edge[KeyedState]] = [Edge(tail=tail, head=head) for tail, head in pairs]
    return Graph(source=stages[0], sinks=[stages[-1]], edges=edges)


def _recorded(name: str, store: KeyedStore) -> dict[str, Any]:
    return {
        "name": name,
        "start_state": store.started,
        "final_state": store.committed[-1] if store.committed else store.started,
        "states": store.committed,
        "writers": store.writers,
    }


async def random_runs(seed: int, count: int) -> list[dict[str, Any]]:
    """`count` runs of random graphs over random start states, with every committed step.

    Each run's subflows are listed under `subflows` by name, with theirs.
    """
    rng = random.Random(seed)
    outcomes = []
    for index in range(count):
        name = f"Random {index}"
        store = KeyedStore(random_start(rng))
        subflows: dict[str, KeyedStore] = {}
        # Junjo may build the graph more than once: the same seed draws the same graph.
        graph_seed = rng.randrange(2**32)
        workflow = Workflow[KeyedState, KeyedStore](
            name=name,
            graph_factory=lambda graph_seed=graph_seed, subflows=subflows: random_graph(
                random.Random(graph_seed), "", 0, subflows
            ),
            store_factory=lambda store=store: store,
        )
        try:
            run_id, error = (await workflow.execute()).run_id, None
        except WorkflowExecutionError as exc:
            run_id, error = exc.run_id, str(exc.__cause__)
        # A subflow that never ran (after a failure) never made its store.
        ran = {sub: _recorded(sub, kept) for sub, kept in subflows.items()}
        outcomes.append({
            "scenario": f"random_{index}",
            "run_id": run_id,
            "error": error,
            **_recorded(name, store),
            "subflows": ran,
        })
    return outcomes


async def lent_in_request_runs() -> list[dict[str, Any]]:
    """A store lent to two runs inside a request's span; the handler writes it before each.

    The runs write only attempts and notes; the handler's writes (the order,
    then a refund decision) are events on the request span, in no run's interval.
    """
    store = RefundStore(initial_state=RefundState())
    runs = []
    with trace.get_tracer("my.web").start_as_current_span("POST /refunds"):
        await store.load_order("A-2002", {"name": "Grace", "tier": "silver"})
        runs.append(("first", await policy_check_workflow().execute(store=store)))
        await store.decide(True, 10.0, "goodwill")
        runs.append(("second", await policy_check_workflow().execute(store=store)))
    return [
        {
            "scenario": f"lent_in_request_{label}",
            "run_id": result.run_id,
            "final_state": result.state.model_dump(mode="json"),
        }
        for label, result in runs
    ]


SINGLE_RUNS: dict[str, Callable[[], Workflow[Any, Any]]] = {
    "linear": linear_workflow,
    "concurrent": concurrent_workflow,
    "subflow": subflow_workflow,
    "concurrent_subflow": concurrent_subflow_workflow,
    "twin_subflows": twin_subflows_workflow,
    "failing": failing_workflow,
    "failing_subflow": failing_subflow_workflow,
    "llm_failure": llm_failure_workflow,
    "large_state_loop": large_state_loop_workflow,
    "agent_in_node": agent_workflow,
    "failing_agent": failing_agent_workflow,
    "own_store_agent": own_store_agent_workflow,
    "ledger": ledger_workflow,
    "failing_condition": failing_condition_workflow,
}


async def run(name: str) -> dict[str, Any]:
    workflow = SINGLE_RUNS[name]()
    try:
        result = await workflow.execute()
    except WorkflowExecutionError as exc:
        return {"scenario": name, "run_id": exc.run_id, "error": str(exc.__cause__)}
    return {
        "scenario": name,
        "run_id": result.run_id,
        "final_state": result.state.model_dump(mode="json"),
    }


async def runs_of(name: str) -> list[dict[str, Any]]:
    """Every execution a scenario ran, as the application saw it."""
    if name == "borrowed_store":
        return await borrowed_store_runs()
    if name == "lent_in_request":
        return await lent_in_request_runs()
    if name == "cancelled":
        return [await cancelled_run()]
    if name == "cancelled_deep":
        return [await cancelled_deep_run()]
    if name == "top_level_agent":
        return [await top_level_agent_run()]
    if name == "awkward_keys":
        return [await awkward_keys_run()]
    if name == "random":
        return await random_runs(int(os.environ["RANDOM_RUNS_SEED"]), RANDOM_RUNS)
    return [await run(name)]


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
        for outcome in asyncio.run(runs_of(name)):
            print(json.dumps(outcome), flush=True)
    provider.force_flush()
    provider.shutdown()


if __name__ == "__main__":
    main(sys.argv[1:])
