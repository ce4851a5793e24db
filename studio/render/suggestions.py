"""The filter box's help and suggestions, from the paths stored runs actually have.

Reads the newest runs through the store's field catalog; no SQL here. The commonest
paths are listed under the filter box with an example built from real data, and every
path goes in a native <datalist> (offered with JavaScript off too). Paths and values
are telemetry: they reach the page only through autoescaped templates and JSON.
Answers are kept HELP_TTL_SECONDS, since on an index sorted by path the sampled
runs' rows are costly to find (docs/benchmarks.md, "the filter box's help").
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

from collector.index.query_ast import Path, format_path, literal, pattern_path
from collector.store import Store
from collector.store.field_catalog import MAX_PATHS, PathCount, ValueCount
from collector.store.filters import FieldValue
from studio.render.field_columns import exact_integer

HELP_TTL_SECONDS: Final = 60.0
# Answers kept (workflows' help, paths' values), the least recently used dropped first.
CACHED_ANSWERS: Final = 256
# Paths named in the help text; the datalist has them all.
HELP_PATHS: Final = 10
SCALAR_KINDS: Final = ("bool", "string", "number", "null")
# Workflows named beside a path in the datalist; the rest are counted.
WORKFLOWS_NAMED: Final = 2
# Which path makes the best example: a flag reads best, then a word, then a number.
EXAMPLE_KINDS: Final = ("bool", "string", "number")


@dataclass(frozen=True, slots=True)
class PathSuggestion:
    label: str  # as the filter language writes it: `refund.eligible`, `items[*].sku`
    pointer: str
    kinds: tuple[str, ...]
    runs: int  # of the sampled runs whose end state has it
    workflows: tuple[str, ...]  # of those runs

    @property
    def kind_text(self) -> str:
        return " or ".join(self.kinds)

    def label_in(self, sampled_workflows: int) -> str:
        """What the datalist says beside the path: its kinds, and its workflows when the
        sampled runs are of several (`string · Refund Workflow`)."""
        if sampled_workflows < 2 or not self.workflows:
            return self.kind_text
        named = ", ".join(self.workflows[:WORKFLOWS_NAMED])
        more = len(self.workflows) - WORKFLOWS_NAMED
        return f"{self.kind_text} · {named}" + (f" +{more}" if more > 0 else "")


@dataclass(frozen=True, slots=True)
class FieldHelp:
    """What the help under the filter box says, and what the datalist offers."""

    workflow: str | None
    sampled_runs: int
    paths: tuple[PathSuggestion, ...]
    # More paths than MAX_PATHS: the rarest were left out.
    truncated: bool
    example: str | None

    @property
    def sampled_workflows(self) -> int:
        """How many workflows the sampled runs (with any path) are of."""
        return len({name for p in self.paths for name in p.workflows})

    @property
    def shown(self) -> tuple[PathSuggestion, ...]:
        """The commonest paths holding a plain value (array elements as one `[*]` path
        each, so they do not crowd out named fields); the datalist has every path."""
        leaves = [p for p in self.paths if set(p.kinds) & set(SCALAR_KINDS)]
        return tuple(leaves[:HELP_PATHS])


NO_HELP: Final = FieldHelp(None, 0, (), False, None)


def field_help(store: Store, workflow: str | None) -> FieldHelp:
    """The paths of the newest runs (of `workflow`), and an example filter on one of them."""
    sampled, counts = store.field_paths(workflow)
    paths = tuple(_suggestion(count) for count in counts[:MAX_PATHS])
    example = None
    candidate = _example_path(paths)
    if candidate is not None:
        _, values = store.field_examples(pattern_path(candidate.pointer), workflow)
        if values:
            example = f"{candidate.label} = {value_literal(values[0].value)}"
    return FieldHelp(workflow, sampled, paths, len(counts) > MAX_PATHS, example)


def _suggestion(count: PathCount) -> PathSuggestion:
    label = format_path(pattern_path(count.pointer))
    return PathSuggestion(label, count.pointer, count.kinds, count.runs, count.workflows)


def _example_path(paths: tuple[PathSuggestion, ...]) -> PathSuggestion | None:
    for kind in EXAMPLE_KINDS:
        for path in paths:
            if path.kinds == (kind,):
                return path
    return None


def value_literal(value: FieldValue) -> str:
    """A stored scalar as the filter language writes it (`true`, `42`, `"text"`, `null`)."""
    kind, scalar = value
    if kind == "number" and isinstance(scalar, float):
        return str(int(scalar)) if exact_integer(scalar) else repr(scalar)
    return literal(scalar)


def paths_json(found: FieldHelp) -> dict[str, Any]:
    return {
        "workflow": found.workflow,
        "sampled_runs": found.sampled_runs,
        "truncated": found.truncated,
        "paths": [
            {
                "path": p.label, "pointer": p.pointer, "kinds": list(p.kinds), "runs": p.runs,
                "workflows": list(p.workflows),
            }
            for p in found.paths
        ],
        "example": found.example,
    }


def values_json(
    path: Path, workflow: str | None, sampled: int, values: list[ValueCount]
) -> dict[str, Any]:
    return {
        "path": format_path(path),
        "pointer": path.pointer,
        "workflow": workflow,
        "sampled_runs": sampled,
        "values": [
            {"literal": value_literal(v.value), "kind": v.value[0], "runs": v.runs}
            for v in values
        ],
    }


T = TypeVar("T")


class TimedCache(Generic[T]):
    """Answers kept for `ttl` seconds, at most CACHED_ANSWERS of them; thread-safe
    (handlers run in Starlette's thread pool). Two requests that miss together both
    compute: bounded work, and no request waits on another's query."""

    def __init__(
        self, ttl: float = HELP_TTL_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._ttl = ttl
        self._clock = clock
        self._entries: OrderedDict[Hashable, tuple[float, T]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, compute: Callable[[], T]) -> T:
        now = self._clock()
        with self._lock:
            found = self._entries.get(key)
            if found is not None and found[0] > now:
                self._entries.move_to_end(key)
                return found[1]
        value = compute()
        with self._lock:
            self._entries[key] = (now + self._ttl, value)
            self._entries.move_to_end(key)
            while len(self._entries) > CACHED_ANSWERS:
                self._entries.popitem(last=False)
        return value


@dataclass(frozen=True, slots=True)
class Suggestions:
    """The server's cached help and value suggestions (one per server: Services)."""

    helps: TimedCache[FieldHelp] = field(default_factory=TimedCache)
    values: TimedCache[tuple[int, list[ValueCount]]] = field(default_factory=TimedCache)

    def help(self, store: Store, workflow: str | None) -> FieldHelp:
        return self.helps.get(workflow, lambda: field_help(store, workflow))

    def examples(
        self, store: Store, path: Path, workflow: str | None
    ) -> tuple[int, list[ValueCount]]:
        return self.values.get(
            (path.pointer, workflow), lambda: store.field_examples(path, workflow)
        )
