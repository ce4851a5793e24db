"""trace_graph: a compiled LangGraph graph that emits the state-evidence convention.

`trace_graph(app)` returns a copy of the compiled graph whose class overrides `stream` and
`astream` (which `invoke`, `ainvoke`, `batch` and the event APIs all go through); every
other method is the graph's own. A run asks LangGraph for two more stream modes than the
caller did, `checkpoints` (the state after each superstep, read from the graph's channels)
and `tasks` (each task's name and raw writes), over all subgraphs, observes them in the
caller's thread as they are produced, and hands the caller exactly the chunks and shapes it
asked for. LangGraph emits `checkpoints` only when a checkpointer is present, so a graph
without one runs with a saver that stores nothing (`NullSaver`) under a fresh thread id;
state, resume and history then behave as without a checkpointer. The state is diffed field
by field, re-reading only the fields a superstep wrote or replaced, so no copy of the whole
state is made per step. A graph invoked as another graph's subgraph is recorded by the
outer traced graph, not by itself.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import re
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.pregel import Pregel
from opentelemetry.trace import Tracer, TracerProvider

from statetrail_producer import keys
from statetrail_producer.canonical import JSON, Policy, compact_json, mode_of
from statetrail_producer.emitter import RunEmitter, get_tracer, new_id
from statetrail_producer.state import RecordedState

G = TypeVar("G", bound=Pregel[Any, Any, Any, Any])

FRAMEWORK: str = "langgraph"
_OBSERVED_MODES = ("checkpoints", "tasks")
_CHECKPOINTER_KEY = "__pregel_checkpointer"
_INTERNAL_FIELD = re.compile(r"^(__.*__|branch:.*|__pregel_.*)$")


def trace_graph(graph: G, *, name: str | None = None, policy: Policy | None = None,
                tracer_provider: TracerProvider | None = None) -> G:
    """A copy of the compiled `graph` that records each run; use it exactly like the graph."""
    tracer = _GraphTracer(graph, name or graph.name or type(graph).__name__,
                          policy or Policy(), get_tracer(tracer_provider))
    base = type(graph)

    def stream(self: Pregel[Any, Any, Any, Any], input: Any, config: RunnableConfig | None = None,
               **kwargs: Any) -> Iterator[Any]:
        return tracer.stream(base.stream, self, input, config, kwargs)

    def astream(self: Pregel[Any, Any, Any, Any], input: Any,
                config: RunnableConfig | None = None, **kwargs: Any) -> AsyncIterator[Any]:
        return tracer.astream(base.astream, self, input, config, kwargs)

    traced = type(f"Traced{base.__name__}", (base,), {
        "stream": stream, "astream": astream, "__module__": base.__module__,
    })
    # Pregel.copy() builds a graph the same way, so the copy is a complete graph.
    attributes = {k: v for k, v in graph.__dict__.items() if k != "__orig_class__"}
    return cast(G, traced(**attributes))


class NullSaver(BaseCheckpointSaver[str]):
    """A checkpointer that keeps nothing: it turns LangGraph's checkpoint stream on for a
    graph compiled without one, and every run starts from an empty thread, as it would."""

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return None

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return None

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        return _saved(config, checkpoint)

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint,
                   metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
        return _saved(config, checkpoint)

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        return None

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                          task_id: str, task_path: str = "") -> None:
        return None


def _saved(config: RunnableConfig, checkpoint: Checkpoint) -> RunnableConfig:
    configurable = dict(config.get("configurable", {}))
    configurable["checkpoint_id"] = checkpoint["id"]
    return {**config, "configurable": configurable}


class _GraphTracer:
    """What one traced graph knows across its runs: names, policy, drawn graphs, reducers."""

    def __init__(self, graph: Pregel[Any, Any, Any, Any], name: str, policy: Policy,
                 tracer: Tracer) -> None:
        self.name = name
        self.policy = policy
        self.tracer = tracer
        self.version = _version("langgraph")
        self._graph_json: dict[int, str | None] = {}
        self._subgraphs: dict[str, Pregel[Any, Any, Any, Any]] | None = None
        self._root = graph

    def stream(self, base: Callable[..., Iterator[Any]], graph: Pregel[Any, Any, Any, Any],
               input: Any, config: RunnableConfig | None, kwargs: dict[str, Any]) -> Iterator[Any]:
        call = self._prepare(graph, config, kwargs)
        if call is None:
            yield from base(graph, input, config, **kwargs)
            return
        run = _Run(self, graph, input, call.thread_id)
        if not run.recording:
            yield from base(graph, input, config, **kwargs)
            return
        inner = base(graph, input, call.config, **call.kwargs)
        try:
            while True:
                tokens = run.root.emitter.enter()
                try:
                    chunk = next(inner)
                except StopIteration:
                    break
                finally:
                    run.root.emitter.leave(tokens)
                out = run.observe(chunk, call)
                if out is not _SKIP:
                    yield out
        except GeneratorExit:
            run.finish_cancelled()
            raise
        except BaseException as error:
            run.finish_error(error)
            raise
        finally:
            _close(inner)
        run.finish()

    async def astream(self, base: Callable[..., AsyncIterator[Any]],
                      graph: Pregel[Any, Any, Any, Any], input: Any,
                      config: RunnableConfig | None, kwargs: dict[str, Any]) -> AsyncIterator[Any]:
        call = self._prepare(graph, config, kwargs)
        if call is None:
            async for chunk in base(graph, input, config, **kwargs):
                yield chunk
            return
        run = _Run(self, graph, input, call.thread_id)
        if not run.recording:
            async for chunk in base(graph, input, config, **kwargs):
                yield chunk
            return
        inner = base(graph, input, call.config, **call.kwargs)
        try:
            while True:
                tokens = run.root.emitter.enter()
                try:
                    chunk = await anext(inner)
                except StopAsyncIteration:
                    break
                finally:
                    run.root.emitter.leave(tokens)
                out = run.observe(chunk, call)
                if out is not _SKIP:
                    yield out
        except GeneratorExit:
            run.finish_cancelled()
            raise
        except BaseException as error:
            run.finish_error(error)
            raise
        finally:
            await _aclose(inner)
        run.finish()

    def _prepare(self, graph: Pregel[Any, Any, Any, Any], config: RunnableConfig | None,
                 kwargs: dict[str, Any]) -> _Call | None:
        """The arguments a recorded run passes to LangGraph, or None when it is not recorded
        (a subgraph call, a graph that never checkpoints)."""
        configurable = dict((config or {}).get("configurable") or {})
        own = dict((graph.config or {}).get("configurable") or {})
        if configurable.get("checkpoint_ns") or graph.checkpointer is False:
            return None
        inner_kwargs = dict(kwargs)
        if _CHECKPOINTER_KEY not in configurable and graph.checkpointer is None:
            configurable[_CHECKPOINTER_KEY] = NullSaver()
            if "thread_id" not in configurable and "thread_id" not in own:
                configurable["thread_id"] = f"statetrail-{new_id()}"
            # Nothing is kept, so nothing need be saved per step: the checkpoint stream is
            # produced either way, without a save handed to a thread at every superstep.
            if inner_kwargs.get("durability") is None:
                inner_kwargs["durability"] = "exit"
        thread_id = str(configurable.get("thread_id", own.get("thread_id", "")))
        requested = kwargs.get("stream_mode") or graph.stream_mode
        single = isinstance(requested, str)
        modes = [requested] if single else list(requested)
        inner_kwargs["stream_mode"] = modes + [m for m in _OBSERVED_MODES if m not in modes]
        wanted = bool(kwargs.get("subgraphs", False))
        # Streaming subgraphs costs LangGraph a good deal per step: only when there are some.
        inner_kwargs["subgraphs"] = wanted or self.has_subgraphs()
        return _Call(
            config=cast(RunnableConfig, {**(config or {}), "configurable": configurable}),
            kwargs=inner_kwargs, modes=frozenset(modes), single=single, subgraphs=wanted,
            inner_subgraphs=inner_kwargs["subgraphs"], v2=kwargs.get("version", "v1") == "v2",
            thread_id=thread_id,
        )

    def graph_json(self, graph: Pregel[Any, Any, Any, Any]) -> str | None:
        key = id(graph)
        if key not in self._graph_json:
            self._graph_json[key] = _draw(graph)
        return self._graph_json[key]

    def subgraph(self, namespace: tuple[str, ...]) -> Pregel[Any, Any, Any, Any] | None:
        return self._known_subgraphs().get("|".join(s.split(":")[0] for s in namespace))

    def has_subgraphs(self) -> bool:
        """Whether LangGraph finds subgraphs in the graph (one called from inside a node's
        function is not found: its writes are recorded as its node's, not as a run)."""
        return bool(self._known_subgraphs())

    def _known_subgraphs(self) -> dict[str, Pregel[Any, Any, Any, Any]]:
        if self._subgraphs is None:
            found = self._root.get_subgraphs(recurse=True)
            self._subgraphs = {path: g for path, g in found if isinstance(g, Pregel)}
        return self._subgraphs


class _Call:
    """One call's arguments to LangGraph and the output shape its caller asked for."""

    def __init__(self, *, config: RunnableConfig, kwargs: dict[str, Any], modes: frozenset[str],
                 single: bool, subgraphs: bool, inner_subgraphs: bool, v2: bool,
                 thread_id: str) -> None:
        self.config = config
        self.kwargs = kwargs
        self.modes = modes
        self.single = single
        self.subgraphs = subgraphs
        self.inner_subgraphs = inner_subgraphs
        self.v2 = v2
        self.thread_id = thread_id

    def reshape(self, namespace: tuple[str, ...], mode: str, payload: Any, chunk: Any) -> Any:
        """The chunk as the caller's own stream call would have yielded it, or _SKIP."""
        if mode not in self.modes or (namespace and not self.subgraphs):
            return _SKIP
        if self.v2:
            return chunk
        if self.subgraphs:
            return (namespace, payload) if self.single else (namespace, mode, payload)
        return payload if self.single else (mode, payload)


_SKIP = object()


class _Namespace:
    """The recorded run of one namespace (the root graph, or one subgraph invocation)."""

    def __init__(self, emitter: RunEmitter, graph: Pregel[Any, Any, Any, Any] | None,
                 policy: Policy) -> None:
        self.emitter = emitter
        self.graph = graph
        self.state = RecordedState(policy)
        self.started = False
        self.writes: list[dict[str, Any]] = []
        self.written: set[str] = set()
        self.writes_truncated = False
        self.writes_redacted = False
        self.next: list[str] = []
        self.interrupted = False
        self.error_action: str | None = None
        # The reducers attribute by the fields a superstep wrote, in order: supersteps repeat.
        self.reducers: dict[tuple[str, ...], str] = {}

    def finish(self, status: str, error: BaseException | None = None) -> None:
        if not self.started:
            self.emitter.start(self.state, sequence=0)
        self.emitter.finish(self.state, status=status, error=error,
                            error_action=self.error_action)


class _Run:
    """One call of the traced graph: its root namespace and the subgraph runs inside it."""

    def __init__(self, tracer: _GraphTracer, graph: Pregel[Any, Any, Any, Any], input: Any,
                 thread_id: str) -> None:
        self.tracer = tracer
        self.input = input
        self.thread_id = thread_id
        root = RunEmitter(tracer.tracer, name=tracer.name, kind="graph", framework=FRAMEWORK,
                          framework_version=tracer.version, store_id=thread_id)
        self.root = _Namespace(root, graph, tracer.policy)
        self.namespaces: dict[tuple[str, ...], _Namespace] = {(): self.root}
        self.recording = root.recording

    def observe(self, chunk: Any, call: _Call) -> Any:
        if call.v2:
            namespace, mode, payload = tuple(chunk["ns"]), chunk["type"], chunk["data"]
        elif call.inner_subgraphs:
            namespace, mode, payload = chunk
        else:
            namespace = ()
            mode, payload = chunk
        if mode in _OBSERVED_MODES:
            if mode == "checkpoints":
                self._checkpoint(namespace, payload)
            elif "result" in payload:
                self._task_result(namespace, payload)
        return call.reshape(namespace, mode, payload, chunk)

    def _namespace(self, namespace: tuple[str, ...], payload: Mapping[str, Any]) -> _Namespace:
        found = self.namespaces.get(namespace)
        if found is not None:
            return found
        parent = self.namespaces.get(namespace[:-1], self.root)
        checkpoint_ns = payload["config"]["configurable"].get("checkpoint_ns", "|".join(namespace))
        name = namespace[-1].split(":")[0]
        emitter = RunEmitter(
            self.tracer.tracer, name=name, kind="subgraph", framework=FRAMEWORK,
            framework_version=self.tracer.version, store_id=f"{self.thread_id}|{checkpoint_ns}",
            parent_id=parent.emitter.run_id, parent_context=parent.emitter.context,
        )
        created = _Namespace(emitter, self.tracer.subgraph(namespace), self.tracer.policy)
        self.namespaces[namespace] = created
        return created

    def _checkpoint(self, namespace: tuple[str, ...], payload: Mapping[str, Any]) -> None:
        run = self._namespace(namespace, payload)
        values = payload["values"]
        raw = values if isinstance(values, Mapping) else {"__root__": values}
        step = int(payload["metadata"]["step"])
        if not run.started:
            run.state.load(raw)
            graph = self.tracer.graph_json(run.graph) if run.graph is not None else None
            run.emitter.start(run.state, sequence=step + 1, graph=graph)
            run.started = True
        else:
            self._transition(run, raw, step)
        run.next = list(payload.get("next") or [])

    def _transition(self, run: _Namespace, raw: Mapping[str, Any], step: int) -> None:
        if not run.writes and run.next == ["__start__"] and run is self.root:
            self._input_write(run)
        change = run.state.track(raw, run.written)
        fields = tuple(field for write in run.writes for field in write["update"])
        reducers = run.reducers.get(fields)
        if reducers is None:
            channels = run.graph.channels if run.graph is not None else {}
            reducers = compact_json({field: reducer_name(channels.get(field)) for field in fields})
            run.reducers[fields] = reducers
        action = ", ".join(write["writer"] for write in run.writes) or f"superstep {step}"
        run.emitter.transition(
            run.state, change, sequence=step + 1, action=action, step=step,
            writes=run.writes, writes_mode=mode_of(run.writes_truncated, run.writes_redacted),
            reducers=reducers,
        )
        run.writes = []
        run.written = set()
        run.writes_truncated = run.writes_redacted = False

    def _input_write(self, run: _Namespace) -> None:
        if isinstance(self.input, Mapping):
            self._record_write(run, "__start__", None, self.input)

    def _record_write(self, run: _Namespace, writer: str, task_id: str | None,
                      result: Any) -> None:
        update: dict[str, JSON] = {}
        fields = result if isinstance(result, Mapping) else {"__root__": result}
        for field, value in fields.items():
            if not isinstance(field, str) or (_INTERNAL_FIELD.match(field) and field != "__root__"):
                continue
            projected, projector = run.state.project(value, (field,))
            run.writes_truncated |= projector.truncated
            run.writes_redacted |= projector.redacted
            update[field] = projected
            run.written.add(field)
        run.writes.append({"writer": writer, "task_id": task_id, "update": update})

    def _task_result(self, namespace: tuple[str, ...], payload: Mapping[str, Any]) -> None:
        run = self.namespaces.get(namespace)
        if run is None:
            return
        name, task_id = str(payload["name"]), str(payload["id"])
        self._record_write(run, name, task_id, payload.get("result") or {})
        error = payload.get("error")
        if error is not None:
            run.error_action = name
            self.root.error_action = self.root.error_action or name
        if payload.get("interrupts"):
            run.interrupted = True
        child = self.namespaces.get((*namespace, f"{name}:{task_id}"))
        if child is not None and not child.emitter.finished:
            if error is not None:
                failure = error if isinstance(error, BaseException) else RuntimeError(str(error))
                child.finish(keys.STATUS_FAILED, failure)
            else:
                child.finish(keys.STATUS_INTERRUPTED if payload.get("interrupts")
                             else keys.STATUS_COMPLETED)

    def _open_children(self) -> list[_Namespace]:
        return [ns for key, ns in self.namespaces.items() if key and not ns.emitter.finished]

    def finish(self) -> None:
        for child in self._open_children():
            child.finish(keys.STATUS_INTERRUPTED if child.interrupted else keys.STATUS_COMPLETED)
        self.root.finish(keys.STATUS_INTERRUPTED if self.root.interrupted
                         else keys.STATUS_COMPLETED)

    def finish_error(self, error: BaseException) -> None:
        if isinstance(error, (KeyboardInterrupt, SystemExit, asyncio.CancelledError)):
            self.finish_cancelled()
            return
        for child in self._open_children():
            child.finish(keys.STATUS_FAILED, error)
        self.root.finish(keys.STATUS_FAILED, error)

    def finish_cancelled(self) -> None:
        for child in self._open_children():
            child.finish(keys.STATUS_CANCELLED)
        self.root.finish(keys.STATUS_CANCELLED)


def reducer_name(channel: object) -> str:
    """How a LangGraph channel merges writes, as the convention names reducers."""
    if channel is None:
        return keys.REDUCER_UNKNOWN
    kind = type(channel).__name__
    if kind in ("LastValue", "LastValueAfterFinish"):
        return keys.REDUCER_LAST_VALUE
    function = getattr(channel, "operator", None) or getattr(channel, "reducer", None)
    if callable(function):
        return function_name(function)
    return re.sub(r"(?<!^)(?=[A-Z])", "_", kind).lower()


def function_name(function: Callable[..., Any]) -> str:
    """`operator.add` for the operator module's functions, else `<module>.<qualname>`."""
    module = getattr(function, "__module__", None)
    name = getattr(function, "__qualname__", None) or getattr(function, "__name__", None)
    if name is None:
        return type(function).__qualname__
    if module in ("_operator", "operator"):
        return f"operator.{name}"
    if "<locals>" in str(name) and module in sys.modules:
        # A decorated function (LangGraph's add_messages is one): the name its module
        # exports it under says more than the inner function's qualified name.
        exported = [k for k, v in vars(sys.modules[module]).items() if v is function]
        if exported:
            return f"{module}.{exported[0]}"
    return f"{module}.{name}" if module else str(name)


def _draw(graph: Pregel[Any, Any, Any, Any]) -> str | None:
    try:
        drawn = graph.get_graph()
    except Exception:  # drawing is a nicety: a graph LangGraph cannot draw still runs traced
        return None
    nodes = [{"id": str(node.id), "name": str(node.name)} for node in drawn.nodes.values()]
    edges = [{"source": str(edge.source), "target": str(edge.target),
              "conditional": bool(edge.conditional),
              "label": None if edge.data is None else str(edge.data)}
             for edge in drawn.edges]
    return compact_json({"nodes": nodes, "edges": edges})


def _close(stream: Iterator[Any]) -> None:
    close = getattr(stream, "close", None)
    if callable(close):
        close()


async def _aclose(stream: AsyncIterator[Any]) -> None:
    close = getattr(stream, "aclose", None)
    if callable(close):
        await close()


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


__all__ = ["NullSaver", "function_name", "reducer_name", "trace_graph"]
