"""trace_workflow: a LlamaIndex workflow whose runs emit the state-evidence convention.

`trace_workflow(wf)` instruments the workflow instance in place (its `run` method) and
returns it. Each `run()` is one run of kind `workflow`. Its start state is the run's store
as `StateCheckpoint` encodes it (the `_data` object of the default `DictState`, a typed
state model's fields otherwise); each committed store write (`set`, `set_state`,
`edit_state`, `clear`) is one transition, named by the step that made it, whose patch is
`StateCheckpoint.diff` from the previous write with the checkpoint's own prefix removed. A
step that raises ends the run `failed` with its error. Runs given the `Context` of an
earlier run (or that run's `handler.ctx`) continue its store. Only the in-memory state
store has checkpoints; with another store the run is recorded without transitions.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import weakref
from collections.abc import Mapping
from typing import Any, TypeVar

from opentelemetry.trace import Tracer, TracerProvider
from workflows import Workflow
from workflows.context.state_store import InMemoryStateStore, StateCheckpoint
from workflows.runtime.types.results import StepWorkerStateContextVar

from statetrail_producer import keys
from statetrail_producer.canonical import Policy
from statetrail_producer.emitter import RunEmitter, get_tracer, new_id
from statetrail_producer.patch import PatchError
from statetrail_producer.pointer import escape, parse
from statetrail_producer.state import Change, RecordedState

W = TypeVar("W", bound=Workflow)

FRAMEWORK: str = "llama-index-workflows"


def trace_workflow(workflow: W, *, name: str | None = None, policy: Policy | None = None,
                   tracer_provider: TracerProvider | None = None) -> W:
    """Record every `run()` of `workflow` (instrumented in place; returned for chaining)."""
    tracer = _WorkflowTracer(workflow, name or type(workflow).__name__, policy or Policy(),
                             get_tracer(tracer_provider))
    object.__setattr__(workflow, "run", tracer.run)
    return workflow


class _WorkflowTracer:
    def __init__(self, workflow: Workflow, name: str, policy: Policy, tracer: Tracer) -> None:
        self._run = workflow.run
        self.name = name
        self.policy = policy
        self.tracer = tracer
        try:
            self.version: str | None = importlib.metadata.version(FRAMEWORK)
        except importlib.metadata.PackageNotFoundError:
            self.version = None
        # Contexts of earlier runs, so a run handed one continues that store.
        self._stores: weakref.WeakKeyDictionary[object, str] = weakref.WeakKeyDictionary()
        self._sequences: dict[str, int] = {}
        self.step_names = _step_names(workflow)

    def run(self, ctx: Any = None, start_event: Any = None, **kwargs: Any) -> Any:
        store_id = self._store_of(ctx) or new_id()
        emitter = RunEmitter(self.tracer, name=self.name, kind="workflow", framework=FRAMEWORK,
                             framework_version=self.version, store_id=store_id)
        with emitter.current():
            # Tasks the run creates copy this context: its spans nest under the run.
            handler = self._run(ctx=ctx, start_event=start_event, **kwargs)
        self._remember(ctx, store_id)
        self._remember(handler.ctx, store_id)
        recorder = _Recorder(self, emitter, handler.ctx.store)
        # The handler's own task: a callback on it runs before any `await handler` resumes,
        # so the run has ended by the time its caller sees the result.
        result_task = getattr(handler, "_result_task", None)
        if isinstance(result_task, asyncio.Future):
            result_task.add_done_callback(recorder.done)
        else:
            watcher = asyncio.ensure_future(handler.stop_event_result())
            watcher.add_done_callback(recorder.done)
        return handler

    def _store_of(self, ctx: Any) -> str | None:
        if ctx is None:
            return None
        try:
            return self._stores.get(ctx)
        except TypeError:
            return None

    def _remember(self, ctx: Any, store_id: str) -> None:
        if ctx is not None:
            try:
                self._stores[ctx] = store_id
            except TypeError:
                return

    def next_sequence(self, store_id: str) -> int:
        self._sequences[store_id] = self._sequences.get(store_id, 0) + 1
        return self._sequences[store_id]

    def sequence(self, store_id: str) -> int:
        return self._sequences.get(store_id, 0)


class _Recorder:
    """One run: follows its store's committed writes and ends the run with the handler."""

    def __init__(self, owner: _WorkflowTracer, emitter: RunEmitter, store: object) -> None:
        self.owner = owner
        self.emitter = emitter
        self.state = RecordedState(owner.policy)
        self.store = store if isinstance(store, InMemoryStateStore) else None
        self.previous: StateCheckpoint | None = None
        self.prefix: tuple[str, ...] = ("state_data",)
        if self.store is not None:
            self.previous = self.store.checkpoint()
            self._reload(self.previous)
            write = self.store._write_state

            async def observed(state: Any, storage: Any = None) -> None:
                await write(state, storage)
                self.written()

            object.__setattr__(self.store, "_write_state", observed)
        emitter.start(self.state, sequence=owner.sequence(emitter.store_id))

    def _reload(self, checkpoint: StateCheckpoint) -> None:
        data = checkpoint.to_dict()["state_data"]
        self.prefix, state = _state_root(data)
        self.state.load(state)

    def written(self) -> None:
        """A write committed: record the difference since the previous one as a transition."""
        if self.store is None or self.previous is None or self.emitter.finished:
            return
        current = self.store.checkpoint()
        ops = current.diff(self.previous)
        self.previous = current
        change = self._translate(ops)
        if change is None:
            # The state's shape changed (a new state type): record the new state whole.
            before = self.state.snapshot()
            self._reload(current)
            change = Change([{"op": "remove", "path": "/" + escape(k)} for k in before]
                            + [{"op": "add", "path": "/" + escape(k), "value": v}
                               for k, v in self.state.snapshot().items()])
        else:
            try:
                self.state.apply(change)
            except PatchError:
                self._reload(current)
        sequence = self.owner.next_sequence(self.emitter.store_id)
        self.emitter.transition(self.state, change, sequence=sequence, action=_step_name())

    def _translate(self, ops: list[dict[str, Any]]) -> Change | None:
        """The checkpoint's operations on the state's own paths, with projected values."""
        change = Change([])
        prefix = "".join("/" + p for p in self.prefix)
        for op in ops:
            path = str(op.get("path", ""))
            if not path.startswith(prefix + "/"):
                return None
            translated = dict(op, path=path[len(prefix):])
            if "from" in op:
                source = str(op["from"])
                if not source.startswith(prefix + "/"):
                    return None
                translated["from"] = source[len(prefix):]
            if "value" in op:
                value, projector = self.state.project(op["value"], parse(translated["path"]))
                translated["value"] = value
                change.absorb(projector)
            change.ops.append(translated)
        return change

    def done(self, future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            self.emitter.finish(self.state, status=keys.STATUS_CANCELLED)
            return
        error = future.exception()
        if error is not None:
            self.emitter.finish(self.state, status=keys.STATUS_FAILED, error=error,
                                error_action=_failing_step(error, self.owner.step_names))
        else:
            self.emitter.finish(self.state, status=keys.STATUS_COMPLETED)


def _state_root(data: Mapping[str, Any]) -> tuple[tuple[str, ...], Mapping[str, Any]]:
    """Where the state sits in a checkpoint's `state_data`: DictState's `_data`, a model's
    `value`, else the whole of it."""
    tree = data.get("_tree")
    if tree == "dict" and isinstance(data.get("_data"), Mapping):
        return ("state_data", "_data"), data["_data"]
    if tree == "model" and isinstance(data.get("value"), Mapping):
        return ("state_data", "value"), data["value"]
    return ("state_data",), data


def _step_names(workflow: Workflow) -> frozenset[str]:
    """The names of the workflow's steps (its `@step` methods and added steps)."""
    try:
        return frozenset(workflow._get_steps())
    except Exception:  # a private API: without it, failing steps are just not named
        return frozenset()


def _failing_step(error: BaseException, steps: frozenset[str]) -> str | None:
    """The step whose code raised `error`: the innermost frame of its traceback (or of
    the errors it was raised from) that runs a step of the workflow."""
    found: str | None = None
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        trace = current.__traceback__
        while trace is not None:
            name = trace.tb_frame.f_code.co_name
            if name in steps:
                found = name
            trace = trace.tb_next
        if found is not None:
            return found
        current = current.__cause__ or current.__context__
    return None


def _step_name() -> str:
    try:
        return StepWorkerStateContextVar.get().state.step_name
    except LookupError:
        return "store"
