"""trace_workflow against live LlamaIndex workflows and the real OpenTelemetry SDK.

The steps record the store's own state after each of their writes; the emitted start state
and patches, replayed with `jsonpatch`, must give exactly those states, in order, with each
digest verified, each transition named by its step, and a failing step ending the run.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from producer_evidence import Capture, attrs
from pydantic import BaseModel
from statetrail_producer.llama_index import trace_workflow
from workflows import Context, Workflow, step
from workflows.events import Event, StartEvent, StopEvent


class Drafted(Event):
    words: int


class Profile(BaseModel):
    count: int = 0
    names: list[str] = []


async def _dict_record(ctx: Context) -> dict[str, Any]:
    """The store's own state, as its checkpoint encodes it."""
    data = ctx.store.checkpoint().to_dict()["state_data"]  # type: ignore[attr-defined]
    return dict(data["_data"])


class Writer(Workflow):
    def __init__(self, record: list[dict[str, Any]], fail: bool = False) -> None:
        super().__init__(timeout=30)
        self.record = record
        self.fail = fail

    @step
    async def draft(self, ctx: Context, ev: StartEvent) -> Drafted:
        await ctx.store.set("topic", ev.get("topic"))
        self.record.append(await _dict_record(ctx))
        await ctx.store.set("draft", {"title": "T", "tags": ["a"]})
        self.record.append(await _dict_record(ctx))
        return Drafted(words=3)

    @step
    async def review(self, ctx: Context, ev: Drafted) -> StopEvent:
        await ctx.store.set("draft.tags", ["a", "b"])
        self.record.append(await _dict_record(ctx))
        async with ctx.store.edit_state() as state:
            state["words"] = ev.words
            state["draft"]["title"] = "Final"
        self.record.append(await _dict_record(ctx))
        if self.fail:
            raise RuntimeError("reviewer walked out")
        return StopEvent(result="done")


def test_producer_llama_index_store_writes_replay_to_the_store_record() -> None:
    capture = Capture()
    record: list[dict[str, Any]] = []
    wf = trace_workflow(Writer(record), tracer_provider=capture.provider)

    async def run() -> Any:
        handler = wf.run(topic="otters")
        result = await handler
        return result, await _dict_record(handler.ctx)

    result, final = asyncio.run(run())
    assert result == "done"
    evidence = capture.evidence()
    (owner,) = evidence.owners(run_kind="workflow")
    run_id = attrs(owner)["statetrail.run.id"]
    steps = evidence.replay(run_id)
    assert [s.state for s in steps] == [{}, *record]
    assert evidence.verified_end(run_id) == final
    assert [s.attributes["statetrail.transition.action"] for s in steps[1:]] == [
        "draft", "draft", "review", "review"]
    assert attrs(owner)["statetrail.run.status"] == "completed"
    assert attrs(owner)["statetrail.framework.name"] == "llama-index-workflows"


def test_producer_llama_index_failing_step_ends_the_run_with_its_error() -> None:
    capture = Capture()
    record: list[dict[str, Any]] = []
    wf = trace_workflow(Writer(record, fail=True), tracer_provider=capture.provider)

    async def run() -> None:
        await wf.run(topic="otters")

    with pytest.raises(RuntimeError, match="walked out"):
        asyncio.run(run())
    evidence = capture.evidence()
    (owner,) = evidence.owners(run_kind="workflow")
    attributes = attrs(owner)
    assert attributes["statetrail.run.status"] == "failed"
    assert attributes["statetrail.run.error.action"] == "review"
    assert attributes["error.type"] == "RuntimeError"
    assert not owner.status.is_ok
    steps = evidence.replay(attributes["statetrail.run.id"])
    assert [s.state for s in steps[1:]] == record
    assert evidence.verified_end(attributes["statetrail.run.id"]) == record[-1]


class Counter(Workflow):
    @step
    async def bump(self, ctx: Context[Profile], ev: StartEvent) -> StopEvent:
        async with ctx.store.edit_state() as state:
            state.count += 1
            state.names.append(f"run{state.count}")
        return StopEvent(result=(await ctx.store.get_state()).model_dump())


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def test_producer_llama_index_typed_state_and_runs_sharing_a_context() -> None:
    capture = Capture()
    wf = trace_workflow(Counter(timeout=30), name="counter", tracer_provider=capture.provider)

    async def run() -> list[Any]:
        first = wf.run()
        results = [await first]
        second = wf.run(ctx=first.ctx)
        results.append(await second)
        results.append(await wf.run())
        return results

    results = asyncio.run(run())
    assert results[1] == {"count": 2, "names": ["run1", "run2"]}
    evidence = capture.evidence()
    owners = sorted((attrs(o) for o in evidence.owners(run_name="counter")),
                    key=lambda a: (a["statetrail.store.id"], a["statetrail.store.sequence.start"]))
    ends = [evidence.verified_end(a["statetrail.run.id"]) for a in owners]
    assert sorted(map(_text, ends)) == sorted(map(_text, results))
    by_store: dict[str, list[dict[str, Any]]] = {}
    for a in owners:
        by_store.setdefault(a["statetrail.store.id"], []).append(a)
    assert sorted(len(runs) for runs in by_store.values()) == [1, 2]
    earlier, later = next(runs for runs in by_store.values() if len(runs) == 2)
    assert later["statetrail.store.sequence.start"] == earlier["statetrail.store.sequence.end"]
    assert later["statetrail.state.start.digest"] == earlier["statetrail.state.end.digest"]
    patch_paths = [e["statetrail.transition.patch"] for e in evidence.events(
        "statetrail.transition")]
    assert all("state_data" not in p for p in patch_paths), "paths are the state's own"


class Watcher(Workflow):
    """Writes, then looks at what has already been exported while the run is still going."""

    def __init__(self, capture: Capture, seen: dict[str, Any]) -> None:
        super().__init__(timeout=30)
        self.capture = capture
        self.seen = seen

    @step
    async def work(self, ctx: Context, ev: StartEvent) -> StopEvent:
        await ctx.store.set("progress", 1)
        evidence = self.capture.evidence()
        self.seen["starts"] = len(evidence.events("statetrail.run.start"))
        self.seen["transitions"] = [e["statetrail.transition.patch"]
                                    for e in evidence.events("statetrail.transition")]
        self.seen["owners"] = len(evidence.owners())
        return StopEvent(result="ok")


def test_producer_llama_index_start_and_writes_leave_before_the_run_ends() -> None:
    capture = Capture()
    seen: dict[str, Any] = {}
    wf = trace_workflow(Watcher(capture, seen), tracer_provider=capture.provider)

    async def run() -> Any:
        return await wf.run()

    assert asyncio.run(run()) == "ok"
    assert seen == {"starts": 1, "transitions": ['[{"op":"add","path":"/progress","value":1}]'],
                    "owners": 0}
    assert len(capture.evidence().owners()) == 1
