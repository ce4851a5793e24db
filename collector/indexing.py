"""What a replayed history puts in the field index.

Stage: pure (no I/O). collector/fieldindex.py flattens states into rows; this
module decides which states and nodes to flatten: the start, the end, and every
node a patch wrote, read from the state right after it. The replayer watches
the replay itself (`TouchedValues`); anything else may walk the history again
(`field_index` without `touched`). A property test checks both agree with the
nodes of every state the history passed through.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial

from collector.fieldindex import (
    ABSENT,
    Absent,
    FieldIndex,
    JsonValue,
    Nodes,
    index_nodes,
    index_rows,
)
from collector.history import History, walk
from collector.jsondoc import (
    JsonPatchOp,
    Missing,
    changed_paths,
    list_index,
    resolve,
    shifting_paths,
)


def field_index(history: History, run_id: str, touched: Nodes | None = None) -> FieldIndex:
    """The filterable values of a history: its start, every write, and its end.

    The end is the recorded end state when there is one (it is what the run
    ended with, whatever the evidence in between), else the replayed end.
    `touched` is what a `TouchedValues` saw during the replay; without it the
    history is walked again to find the same values.
    """
    recorded = history.recorded_end
    if not history.has_states:
        return index_rows(run_id, ABSENT, ABSENT if isinstance(recorded, Missing) else recorded)
    if touched is None:
        touched = Nodes()
        for pointer, value in _walked(history):
            touched.add(pointer, value)
    start = history.state_at(history.start_sequence)
    end = history.replayed_end if isinstance(recorded, Missing) else recorded
    return index_nodes(run_id, start, end, touched)


class TouchedValues:
    """Replay's observer for the field index: every node a patch wrote, as it was then.

    Watching the replay saves walking the history a second time (re-applying
    every patch was a sixth of a replay batch). Each value is flattened as it
    is seen, because the replay goes on patching the same document in place.
    """

    def __init__(self) -> None:
        self.nodes = Nodes()

    def __call__(self, ops: Sequence[JsonPatchOp], state: JsonValue) -> None:
        for pointer, value in _written(changed_paths(ops), lambda: shifting_paths(ops), state):
            self.nodes.add(pointer, value)


def _walked(history: History) -> Iterator[tuple[str, JsonValue | Absent]]:
    """`TouchedValues`' values, found by walking the history again.

    A generator on purpose: the walked state is one working document patched
    in place, so each value must be flattened before the walk moves on.
    (Collected into a list first, a value later patched in place was indexed
    with its later content, and `ever` missed the earlier one.)
    """
    for step, state in walk(history):
        if step.applied:
            shifting = partial(_shifting_in, step.transition.patch_json)
            yield from _written(step.changed_paths, shifting, state)


def _written(
    pointers: Iterable[str], shifting: Callable[[], frozenset[str]], state: JsonValue
) -> Iterator[tuple[str, JsonValue | Absent]]:
    """Each node at `pointers` in the state after a step, and array elements it moved.

    Inserting into or removing from an array moves every later element to a
    new index: new (path, value) pairs that no op names. `shifting` gives the
    pointers the step inserted at or removed from; it is asked only when a
    pointer names an array slot.
    """
    shifted: frozenset[str] | None = None
    for pointer in pointers:
        parent_pointer, _, token = pointer.rpartition("/")
        parent = resolve(state, parent_pointer) if pointer else None
        if isinstance(parent, list):
            if shifted is None:
                shifted = shifting()
            if pointer in shifted:
                yield from _elements_from(parent_pointer, parent, token)
                continue
        value = resolve(state, pointer)
        yield pointer, ABSENT if isinstance(value, Missing) else value


def _shifting_in(patch_text: str) -> frozenset[str]:
    """`shifting_paths` of an applied patch's text (which therefore parses)."""
    ops: list[JsonPatchOp] = json.loads(patch_text)
    return shifting_paths(ops)


def _elements_from(
    pointer: str, array: list[JsonValue], token: str
) -> Iterator[tuple[str, JsonValue | Absent]]:
    """The elements of `array` (at `pointer`) from the index `token` names to the end."""
    first = len(array) - 1 if token == "-" else list_index(token)
    for index in range(max(first or 0, 0), len(array)):
        yield f"{pointer}/{index}", array[index]
