"""What a replayed history puts in the field index.

Stage: pure (no I/O). collector/index/fields.py flattens states into rows; this
module decides which states and nodes to flatten: the start, the end, and every
node a patch wrote, read from the state right after it. The replayer watches
the replay itself (`TouchedValues`); anything else may walk the history again
(`field_index` without `touched`). A property test checks both agree with the
nodes of every state the history passed through.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial

from collector.index.fields import (
    ABSENT,
    FieldIndex,
    JsonValue,
    Nodes,
    index_nodes,
    index_rows,
)
from collector.replay.checkpoints import applied_ops
from collector.replay.history import History, walk
from collector.replay.jsondoc import (
    JsonPatchOp,
    Missing,
    list_index,
    pointer_parts,
    resolve_parts,
    shifting_paths,
)


def field_index(history: History, run_id: str, touched: Nodes | None = None) -> FieldIndex:
    """The filterable values of a history: its start, every write, and its end (the
    recorded one when there is one: what the run ended with). Without `touched` (a
    `TouchedValues`) the history is walked again."""
    recorded = history.recorded_end
    if not history.has_states:
        return index_rows(run_id, ABSENT, ABSENT if isinstance(recorded, Missing) else recorded)
    if touched is None:
        touched = Nodes()
        for step, state in walk(history):
            # Flattened before the walk goes on: it patches one document in place.
            if step.applied:
                shifting = partial(_shifting_in, step.transition.patch_json)
                _add_written(touched, step.changed_paths, shifting, state)
    # Only read (flattened) here, so lent, not copied.
    start = history.peek_at(history.start_sequence)
    end = history.peek_at(history.last_sequence) if isinstance(recorded, Missing) else recorded
    return index_nodes(run_id, start, end, touched)


class TouchedValues:
    """Replay's observer for the field index: every node a patch wrote, as it was then.

    Watching the replay saves walking the history a second time. Each value is
    flattened as it is seen: the replay goes on patching the same document in place.
    """

    def __init__(self) -> None:
        self.nodes = Nodes()

    def __call__(
        self, ops: Sequence[JsonPatchOp], paths: tuple[str, ...], state: JsonValue
    ) -> None:
        _add_written(self.nodes, paths, lambda: shifting_paths(ops), state)


def _add_written(
    nodes: Nodes, pointers: Iterable[str], shifting: Callable[[], Mapping[str, int]],
    state: JsonValue,
) -> None:
    """Add each node at `pointers` in the state after a step, and array elements it moved
    (new (path, value) pairs no op names). Each array's moved elements are read once,
    from the lowest index shifted: N `add /list/i` ops would otherwise read N²/2."""
    shifted: Mapping[str, int] | None = None
    inserts: dict[str, int] | None = None
    moved_from: dict[str, tuple[list[JsonValue], int]] = {}
    for pointer in pointers:
        if not pointer:
            nodes.add(pointer, state)
            continue
        parts = pointer_parts(pointer)
        parent = resolve_parts(state, parts[:-1])
        if isinstance(parent, list):
            if shifted is None:
                shifted = shifting()
            if shifted.get(pointer, 0):
                parent_pointer, _, token = pointer.rpartition("/")
                if token == "-":
                    # An element appended with `-` ends no lower than the length minus
                    # every insert into this array in the patch: a later insert may
                    # land after it, moving it by one.
                    if inserts is None:
                        inserts = _inserts_per_array(shifted)
                    first = len(parent) - inserts.get(parent_pointer, 0)
                else:
                    first = list_index(token) or 0
                lowest = moved_from.get(parent_pointer, (parent, first))[1]
                moved_from[parent_pointer] = (parent, max(min(first, lowest), 0))
                continue
        # The node itself, found from its parent (already resolved).
        value = parent if isinstance(parent, Missing) else resolve_parts(parent, parts[-1:])
        nodes.add(pointer, ABSENT if isinstance(value, Missing) else value)
    for parent_pointer, (array, first) in moved_from.items():
        nodes.add_elements(parent_pointer, array, first)


def _inserts_per_array(shifted: Mapping[str, int]) -> dict[str, int]:
    """How many shifting ops name a slot of each container (an upper bound on its inserts)."""
    totals: dict[str, int] = {}
    for pointer, count in shifted.items():
        container = pointer.rpartition("/")[0]
        totals[container] = totals.get(container, 0) + count
    return totals


def _shifting_in(patch_text: str) -> dict[str, int]:
    """`shifting_paths` of an applied patch's text (which therefore parses)."""
    return shifting_paths(applied_ops(patch_text))
