"""Flatten an execution's JSON states into field-index rows.

Stage: pure (no I/O). Replay hands over the start state, the final state and,
per transition, the pointers its ops touched with the value found there
afterwards; this module turns them into the rows `collector.store.filters`
bulk-loads and queries.

Invariants:
- One row per distinct (path, kind, value) across the whole history; a row
  whose (path, kind, value) is a node of the final state has `is_final=True`
  (one row, never a final and a non-final twin).
- Every node except the root becomes a row: leaves and containers alike, so
  `exists` works on objects and arrays. Container rows carry no value.
- Intermediate states are never flattened whole. A state differs from its
  predecessor only under the pointers a transition touched, so flattening the
  start state plus each touched subtree sees every (path, value) the history
  ever held.
- At most `max_rows` rows per execution; final-state rows are kept first
  (`final` is the default filter scope) and `truncated` reports any loss.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Final, Literal, TypeAlias

JsonValue: TypeAlias = dict[str, "JsonValue"] | list["JsonValue"] | str | int | float | bool | None
Kind: TypeAlias = Literal["null", "bool", "number", "string", "object", "array"]

MAX_ROWS: Final = 50_000
"""Default cap on rows per execution; beyond it the index is marked truncated."""


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
    """All rows for one execution, and whether the row cap cut any off."""

    run_id: str
    rows: tuple[FieldRow, ...]
    truncated: bool


_Key: TypeAlias = tuple[str, str, Kind, float | None, str | None, bool | None]
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

    `touched` lists, per transition in order, each pointer an op wrote to and
    the value at that pointer in the state after the transition (`ABSENT` for
    a removal, which adds nothing: absence is answered by `missing`). A
    withheld start or final state is passed as `ABSENT`; the rows then cover
    only what is known. Pointers must be valid RFC 6901 pointers ("" is the
    whole document).
    """
    seen: dict[_Key, bool] = {}
    truncated = False

    def add(keys: Iterator[_Key], is_final: bool) -> None:
        nonlocal truncated
        for key in keys:
            if key in seen:
                continue
            if len(seen) >= max_rows:
                truncated = True
                return
            seen[key] = is_final

    if not isinstance(final_state, Absent):
        add(_subtree("", final_state), is_final=True)
    if not isinstance(start_state, Absent):
        add(_subtree("", start_state), is_final=False)
    for pointer, value in touched:
        if not isinstance(value, Absent):
            add(_subtree(pointer, value), is_final=False)
    rows = tuple(
        FieldRow(path, parent, kind, num, text, flag, is_final)
        for (path, parent, kind, num, text, flag), is_final in seen.items()
    )
    return FieldIndex(run_id, rows, truncated)


def escape_token(token: str) -> str:
    """RFC 6901 escaping of one reference token ("~" first, then "/")."""
    if "~" not in token and "/" not in token:
        return token
    return token.replace("~", "~0").replace("/", "~1")


def _subtree(pointer: str, value: JsonValue) -> Iterator[_Key]:
    """Pre-order nodes at and under `pointer`; the document root itself is no row.

    Iterative rather than recursive: telemetry may carry states nested deeper
    than Python's recursion limit. This and `_key` run for every node of every
    indexed state, the largest part of the replayer's work, hence the order of
    the type checks (commonest first).
    """
    stack: list[tuple[str, JsonValue]] = [(pointer, value)]
    while stack:
        path, node = stack.pop()
        if path:
            yield _key(path, node)
        if isinstance(node, dict):
            stack.extend(
                reversed([(f"{path}/{escape_token(_clean(k))}", v) for k, v in node.items()])
            )
        elif isinstance(node, list):
            stack.extend(reversed([(f"{path}/{i}", v) for i, v in enumerate(node)]))


def _key(path: str, node: JsonValue) -> _Key:
    parent = path.rpartition("/")[0]
    if isinstance(node, str):
        return (path, parent, "string", None, _clean(node), None)
    # bool before int/float: True is an int in Python but a JSON boolean.
    if isinstance(node, bool):
        return (path, parent, "bool", None, None, node)
    if isinstance(node, (int, float)):  # a tuple checks faster than a union
        return (path, parent, "number", _as_float(node), None, None)
    if node is None:
        return (path, parent, "null", None, None, None)
    if isinstance(node, dict):
        return (path, parent, "object", None, None, None)
    return (path, parent, "array", None, None, None)


def _as_float(number: int | float) -> float:
    try:
        return float(number)
    except OverflowError:  # an integer beyond float range: keep its sign, at least
        return math.inf if number > 0 else -math.inf


def _clean(text: str) -> str:
    """Make text encodable as UTF-8: JSON allows lone surrogate escapes, UTF-8 does not."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text
