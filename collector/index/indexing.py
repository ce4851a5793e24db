"""What a replayed history puts in the field index.

Stage: pure (no I/O). collector/index/fields.py flattens states into rows; this
module decides which states and nodes to flatten: the start, the end, and every
node a patch wrote, read from the state right after it. The replayer watches
the replay itself (`TouchedValues`); anything else may walk the history again
(`field_index` without `touched`). A property test checks both agree with the
nodes of every state the history passed through.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from itertools import product

from collector.index.fields import (
    ABSENT,
    LAST_TOKEN,
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
    unescape_token,
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
    from the lowest index shifted: N `add /list/i` ops would otherwise read N²/2.
    Each array's last element is kept a second time, as LAST_TOKEN (fields.py)."""
    shifted: Mapping[str, int] | None = None
    inserts: dict[str, int] | None = None
    moved_from: dict[str, tuple[list[JsonValue], int, list[int]]] = {}
    lasts: dict[str, JsonValue] = {}
    for pointer in pointers:
        if not pointer:
            nodes.add(pointer, state)
            continue
        parts = pointer_parts(pointer)
        parent, above = _resolve_noting_lasts(state, parts[:-1])
        if not _last_elements(lasts, pointer, parent, above):
            nodes.overflowed = True  # more spellings than the index could hold: truncated
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
                lowest = moved_from.get(parent_pointer, (parent, first, above))[1]
                moved_from[parent_pointer] = (parent, max(min(first, lowest), 0), above)
                continue
        # The node itself, found from its parent (already resolved).
        value = parent if isinstance(parent, Missing) else resolve_parts(parent, parts[-1:])
        nodes.add(pointer, ABSENT if isinstance(value, Missing) else value)
    for parent_pointer, (array, first, above) in moved_from.items():
        nodes.add_elements(parent_pointer, array, first)
        # The moved elements under each spelling that names a last element above them.
        tokens = parent_pointer.split("/")[1:]
        if len(above) >= MAX_LAST_LEVELS:
            nodes.overflowed = True
            continue
        for spelled in _spellings(tokens, above):
            nodes.add_elements(spelled, array, first)
    for pointer, value in lasts.items():
        nodes.add(pointer, value)


# Arrays nested this deep, each at its last element, spell a node more ways (2**n)
# than an execution's rows may number (fields.MAX_ROWS).
MAX_LAST_LEVELS = 16


def _last_elements(
    lasts: dict[str, JsonValue], pointer: str, container: JsonValue | Missing, above: list[int]
) -> bool:
    """Note in `lasts` what a write at `pointer` changed among the index's last-element
    rows, by the pointer of each; False (and nothing noted) past MAX_LAST_LEVELS.

    When the write is in an array (it may have changed its length or its last
    element), that array's last element as `<array>/~-1`; and the node written
    under each spelling of its pointer with one or more of the indices that are
    their array's last written LAST_TOKEN (`/a/3/b` as `/a/~-1/b` when 3 is the
    last of `a`). Each under every such spelling of the pointers above it too.
    `container` is what holds the node written; `above`, the depths of the
    pointer's tokens that are their array's last index (`_resolve_noting_lasts`).
    """
    if not (above or isinstance(container, list)):
        return True  # no array's last element is on the way: the usual write
    if not isinstance(container, dict | list):
        return True  # under a scalar, or removed: the write left nothing there
    tokens = pointer.split("/")[1:]  # each token as the pointer spells it
    if len(above) >= MAX_LAST_LEVELS:
        return False
    if isinstance(container, list):
        if tokens[-1] == "-":  # an append: the element is the last
            tokens[-1] = str(len(container) - 1)
        if container:
            last = container[-1]
            spellings = _spellings([*tokens[:-1], LAST_TOKEN], above, plain=True)
            lasts.update((spelled, last) for spelled in spellings)
    value = resolve_parts(container, (unescape_token(tokens[-1]),))
    if not isinstance(value, Missing):
        # The node as its own array's last element was noted just above.
        lasts.update((spelled, value) for spelled in _spellings(tokens, above))
    return True


def _resolve_noting_lasts(
    state: JsonValue, parts: Sequence[str]
) -> tuple[JsonValue | Missing, list[int]]:
    """The node at `parts` (as `resolve_parts` finds it), and the depths along them
    whose token is the last index of the array it is in."""
    depths: list[int] = []
    node: JsonValue = state
    for depth, part in enumerate(parts):
        if type(node) is list and part == str(len(node) - 1):
            depths.append(depth)
        found = resolve_parts(node, (part,))
        if isinstance(found, Missing):
            return found, depths
        node = found
    return node, depths


def _spellings(tokens: list[str], positions: list[int], *, plain: bool = False) -> Iterator[str]:
    """The pointer of `tokens` with each subset of `positions` written LAST_TOKEN (the
    empty subset, the pointer as it is, only if `plain`)."""
    for chosen in product((False, True), repeat=len(positions)):
        if plain or any(chosen):
            spelled = list(tokens)
            for position, last in zip(positions, chosen, strict=True):
                if last:
                    spelled[position] = LAST_TOKEN
            yield "/" + "/".join(spelled)


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
