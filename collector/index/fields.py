"""Flatten an execution's JSON states into field-index rows.

Pure (no I/O): the start state, the final state and each transition's touched
pointers (with their values after it) become the rows collector/store/filters.py
loads and queries.

Invariants:
- One row per distinct (path, kind, value) in the whole history, `is_final` when it
  is a node of the final state; every node but the root is a row (containers too,
  valueless, so `exists` works on them).
- The last element of every non-empty array is a row twice: at its index and at
  LAST_TOKEN (`/messages/~-1/role`), so `messages[-1]` is read like a key.
- Intermediate states are never flattened whole: the start plus each touched subtree
  sees every (path, value) the history held.
- Every string encodes as UTF-8 (a lone surrogate becomes its escape, `_clean`).
- At most `max_rows` rows, final-state rows first; `truncated` reports any loss.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import Enum
from itertools import chain
from typing import Any, Final, Literal, TypeAlias

from collector.replay.jsondoc import escape_token

JsonValue: TypeAlias = dict[str, "JsonValue"] | list["JsonValue"] | str | int | float | bool | None
Kind: TypeAlias = Literal["null", "bool", "number", "string", "object", "array"]

MAX_ROWS: Final = 50_000
"""Default cap on rows per execution; beyond it the index is marked truncated."""

LAST_TOKEN: Final = "~-1"
"""The pointer token of an array's last element's second row (query_ast.Wildcard.LAST)."""


class Absent(Enum):
    """Marks a value that is not there: a removed path, or a withheld state."""

    ABSENT = "absent"


ABSENT: Final = Absent.ABSENT


@dataclass(frozen=True, slots=True)
class FieldRow:
    """One node of some state: its RFC 6901 pointer, the container's, and its value.

    Exactly one of `num`/`text`/`flag` is set for number/string/bool nodes;
    none for null, object and array nodes. Numbers are floats because the
    filter compares them numerically (integers beyond 2**53 lose precision).
    """

    path: str
    parent: str
    kind: Kind
    num: float | None
    text: str | None
    flag: bool | None
    is_final: bool


@dataclass(frozen=True, slots=True)
class FieldIndex:
    """All rows for one execution, and whether the row cap cut any off. Kept as distinct
    nodes, final ones first, not FieldRows: the store writes them column by column."""

    run_id: str
    nodes: tuple[NodeKey, ...]
    final_count: int
    truncated: bool

    @property
    def rows(self) -> tuple[FieldRow, ...]:
        return tuple(
            FieldRow(*node, number < self.final_count) for number, node in enumerate(self.nodes)
        )


NodeKey: TypeAlias = tuple[str, str, Kind, float | None, str | None, bool | None]
"""(path, parent, kind, num, text, flag): a row without its final flag."""


def index_rows(
    run_id: str,
    start_state: JsonValue | Absent,
    final_state: JsonValue | Absent,
    touched: Iterable[tuple[str, JsonValue | Absent]] = (),
    *,
    max_rows: int = MAX_ROWS,
) -> FieldIndex:
    """Build the field index of one execution.

    `touched` lists, per transition in order, each pointer written and its value after
    the transition (`ABSENT` for a removal: `missing` answers absence). A withheld
    start or final state is `ABSENT`, and the rows cover only what is known.
    """
    nodes = Nodes(max_rows)
    for pointer, value in touched:
        nodes.add(pointer, value)
    return index_nodes(run_id, start_state, final_state, nodes)


def index_nodes(
    run_id: str, start_state: JsonValue | Absent, final_state: JsonValue | Absent, touched: Nodes
) -> FieldIndex:
    """`index_rows` for touched values already flattened (see `Nodes`)."""
    seen = Nodes(touched.max_rows)
    seen.add("", final_state)
    final_count = len(seen.keys)
    seen.add("", start_state)
    seen.extend(touched)
    return FieldIndex(
        run_id, tuple(seen.keys), final_count, seen.overflowed or touched.overflowed
    )


class Nodes:
    """The distinct nodes of some JSON values, in the order first seen, at most `max_rows`.

    A value is flattened when it is added, so the caller may go on to change
    it in place (replay patches one working document): the rows keep what the
    value held then, with no copy of it.
    """

    __slots__ = ("keys", "max_rows", "overflowed")

    def __init__(self, max_rows: int = MAX_ROWS) -> None:
        self.keys: dict[NodeKey, None] = {}
        self.max_rows = max_rows
        self.overflowed = False

    def extend(self, other: Nodes) -> None:
        keys = self.keys
        if len(keys) + len(other.keys) <= self.max_rows:
            keys.update(other.keys)  # room for all: a key already here keeps its place
            return
        for key in other.keys:
            if key not in keys:
                if len(keys) >= self.max_rows:
                    self.overflowed = True
                    return
                keys[key] = None

    def add(self, pointer: str, value: JsonValue | Absent) -> None:
        """Every node at and under `pointer`, in pre-order; the document root itself is no row."""
        if isinstance(value, Absent) or self.overflowed:
            return
        value = _exact(value)
        pointer = _clean(pointer)  # a written pointer: keyed as its member names are
        if pointer and not self._keep(_key(pointer, pointer.rpartition("/")[0], value)):
            return
        if type(value) is list:
            self._add_children(_elements(value), pointer, True)
        elif type(value) is dict:
            self._add_children(iter(value.items()), pointer, False)

    def add_elements(self, pointer: str, array: list[JsonValue], first: int) -> None:
        """`add` of each element of the array at `pointer` from index `first` on, in order."""
        if not self.overflowed:
            self._add_children(enumerate(array[first:], first), _clean(pointer), True)

    def _add_children(
        self, children: Iterator[tuple[Any, Any]], parent: str, in_array: bool
    ) -> None:
        """Every node under `parent` (`children` are its (index or member, value) pairs).

        Iterative: telemetry may nest deeper than Python's recursion limit. The
        replayer's hottest loop, so it dispatches on exact types and keys scalars
        where it meets them (only containers go on the stack).
        """
        keys = self.keys
        max_rows = self.max_rows
        # The open containers above this one: the children each has still to
        # visit, its pointer (their parent), and whether it is an array.
        stack: list[tuple[Iterator[tuple[Any, Any]], str, bool]] = []
        while True:
            prefix = parent + "/"
            for name, child in children:
                if in_array:
                    path = prefix + str(name)
                elif name.isascii() and "~" not in name and "/" not in name:
                    path = prefix + name  # the usual member name: nothing to clean or escape
                else:
                    path = prefix + escape_token(_clean(name))
                kind = type(child)
                key: NodeKey
                if kind is str:
                    text = child if child.isascii() else _clean(child)
                    key = (path, parent, "string", None, text, None)
                elif kind is int:
                    key = (path, parent, "number", _as_float(child), None, None)
                elif kind is float:
                    key = (path, parent, "number", child, None, None)
                elif kind is bool:
                    key = (path, parent, "bool", None, None, child)
                elif child is None:
                    key = (path, parent, "null", None, None, None)
                elif kind is dict or kind is list:
                    container: Kind = "object" if kind is dict else "array"
                    keys[(path, parent, container, None, None, None)] = None
                    if len(keys) > max_rows:
                        keys.popitem()  # the key just added: there was no room for it
                        self.overflowed = True
                        return
                    # Descend: this container's children come before its next sibling.
                    stack.append((children, parent, in_array))
                    in_array = kind is list
                    children = _elements(child) if in_array else iter(child.items())
                    parent = path
                    break
                else:
                    # Not a type JSON decodes to (a subclass): flattened as its base type.
                    self.add(path, child)
                    if self.overflowed:
                        return
                    continue
                # Checked per key, so a huge state never holds more than the cap.
                keys[key] = None
                if len(keys) > max_rows:
                    keys.popitem()  # the key just added: there was no room for it
                    self.overflowed = True
                    return
            else:
                if not stack:
                    return
                children, parent, in_array = stack.pop()

    def _keep(self, key: NodeKey) -> bool:
        """Add `key` unless there is no room for it (then False, and overflowed)."""
        if key not in self.keys:
            if len(self.keys) >= self.max_rows:
                self.overflowed = True
                return False
            self.keys[key] = None
        return True


def _elements(array: list[Any]) -> Iterator[tuple[Any, Any]]:
    """An array's (index, element) pairs, then its last element again as LAST_TOKEN."""
    if not array:
        return iter(())
    return chain(enumerate(array), ((LAST_TOKEN, array[-1]),))


def _exact(value: JsonValue) -> JsonValue:
    """`value` as the JSON type it is an instance of (JSON decodes to no subclass)."""
    if type(value) in _JSON_TYPES or not isinstance(value, dict | list | str):
        return value
    if isinstance(value, dict):
        return dict(value)
    return list(value) if isinstance(value, list) else str(value)


_JSON_TYPES: Final = frozenset({dict, list, str, int, float, bool, type(None)})


def _key(path: str, parent: str, node: JsonValue) -> NodeKey:
    """The key of one node of exact JSON type (see `_exact`)."""
    if type(node) is str:
        return (path, parent, "string", None, _clean(node), None)
    if type(node) is dict:
        return (path, parent, "object", None, None, None)
    if type(node) is list:
        return (path, parent, "array", None, None, None)
    return _scalar_key(path, parent, node)


def _scalar_key(path: str, parent: str, node: JsonValue) -> NodeKey:
    # bool before int/float: True is an int in Python but a JSON boolean.
    if isinstance(node, bool):
        return (path, parent, "bool", None, None, node)
    if isinstance(node, (int, float)):  # a tuple checks faster than a union
        return (path, parent, "number", _as_float(node), None, None)
    if node is None:
        return (path, parent, "null", None, None, None)
    # Nothing else comes out of JSON; kept as a value-less node rather than failing.
    return (path, parent, "array", None, None, None)


def _as_float(number: int | float) -> float:
    try:
        return float(number)
    except OverflowError:  # an integer beyond float range: keep its sign, at least
        return math.inf if number > 0 else -math.inf


def _clean(text: str) -> str:
    """Make text encodable as UTF-8: JSON allows lone surrogate escapes, UTF-8 does not.
    Cleaning a whole pointer equals cleaning each member name, so a node a patch wrote
    and the same node found inside a state get one key."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text
