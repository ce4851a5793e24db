"""RFC 6902 JSON Patch between projected values: making one, and applying one in place.

`diff` writes the operations that turn one projected value into another: objects member by
member, arrays by their common prefix and suffix (so an append is one `add` per new item,
at an explicit index), anything else as one `replace`. Equality is JSON's: `true` is not
`1`, while `1` and `1.0` are the same number. `apply` edits a projected document in place
and raises `PatchError` on an operation that does not fit it.
"""

from __future__ import annotations

import copy
from typing import Any

from statetrail_producer.canonical import JSON
from statetrail_producer.pointer import escape, parse


class PatchError(ValueError):
    """An operation whose path or value does not fit the document."""


def json_equal(a: JSON, b: JSON) -> bool:
    """JSON equality: booleans are not numbers, and `1 == 1.0`."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, dict):
        return (isinstance(b, dict) and a.keys() == b.keys()
                and all(json_equal(a[k], b[k]) for k in a))
    if isinstance(a, list):
        return (isinstance(b, list) and len(a) == len(b)
                and all(json_equal(x, y) for x, y in zip(a, b, strict=True)))
    if isinstance(a, (int, float)):
        return isinstance(b, (int, float)) and a == b
    return type(a) is type(b) and a == b


def diff(old: JSON, new: JSON, path: str = "") -> list[dict[str, Any]]:
    """Operations turning `old` (at `path`) into `new`; `[]` when they are equal."""
    ops: list[dict[str, Any]] = []
    _diff(old, new, path, ops)
    return ops


def _diff(old: JSON, new: JSON, path: str, ops: list[dict[str, Any]]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in old:
            if key not in new:
                ops.append({"op": "remove", "path": f"{path}/{escape(key)}"})
        for key, value in new.items():
            child = f"{path}/{escape(key)}"
            if key in old:
                _diff(old[key], value, child, ops)
            else:
                ops.append({"op": "add", "path": child, "value": value})
    elif isinstance(old, list) and isinstance(new, list):
        _diff_lists(old, new, path, ops)
    elif not json_equal(old, new):
        ops.append({"op": "replace", "path": path, "value": new})


def _diff_lists(old: list[JSON], new: list[JSON], path: str, ops: list[dict[str, Any]]) -> None:
    shorter = min(len(old), len(new))
    prefix = 0
    while prefix < shorter and json_equal(old[prefix], new[prefix]):
        prefix += 1
    suffix = 0
    while (suffix < shorter - prefix
           and json_equal(old[len(old) - 1 - suffix], new[len(new) - 1 - suffix])):
        suffix += 1
    old_middle = old[prefix:len(old) - suffix]
    new_middle = new[prefix:len(new) - suffix]
    common = min(len(old_middle), len(new_middle))
    for i in range(common):
        _diff(old_middle[i], new_middle[i], f"{path}/{prefix + i}", ops)
    # Removing at one index repeatedly drops the surplus in order, as each removal shifts.
    for _ in range(len(old_middle) - common):
        ops.append({"op": "remove", "path": f"{path}/{prefix + common}"})
    for i in range(common, len(new_middle)):
        ops.append({"op": "add", "path": f"{path}/{prefix + i}", "value": new_middle[i]})


def apply(document: dict[str, JSON], op: dict[str, Any]) -> None:
    """Apply one operation to `document` in place (its root must stay an object)."""
    kind = op.get("op")
    segments = parse(str(op.get("path", "")))
    if not segments:
        raise PatchError(f"{kind} of the whole state is not applied in place")
    if kind == "add":
        _add(document, segments, op["value"])
    elif kind == "remove":
        _remove(document, segments)
    elif kind == "replace":
        _remove(document, segments)
        _add(document, segments, op["value"])
    elif kind in ("move", "copy"):
        source = parse(str(op.get("from", "")))
        value = _get(document, source)
        if kind == "move":
            _remove(document, source)
        else:
            value = copy.deepcopy(value)
        _add(document, segments, value)
    elif kind == "test":
        if not json_equal(_get(document, segments), op["value"]):
            raise PatchError(f"test failed at {op['path']}")
    else:
        raise PatchError(f"unknown operation {kind!r}")


def _parent(document: JSON, segments: list[str]) -> JSON:
    return _get(document, segments[:-1])


def _get(document: JSON, segments: list[str]) -> JSON:
    node = document
    for segment in segments:
        if isinstance(node, dict) and segment in node:
            node = node[segment]
        elif isinstance(node, list) and _index(segment, len(node) - 1) is not None:
            node = node[int(segment)]
        else:
            raise PatchError(f"no value at /{'/'.join(escape(s) for s in segments)}")
    return node


def _add(document: JSON, segments: list[str], value: JSON) -> None:
    parent = _parent(document, segments)
    last = segments[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        index = len(parent) if last == "-" else _index(last, len(parent))
        if index is None:
            raise PatchError(f"index {last!r} is outside a list of {len(parent)}")
        parent.insert(index, value)
    else:
        raise PatchError(f"cannot add below a {type(parent).__name__}")


def _remove(document: JSON, segments: list[str]) -> None:
    parent = _parent(document, segments)
    last = segments[-1]
    if isinstance(parent, dict) and last in parent:
        del parent[last]
    elif isinstance(parent, list) and (index := _index(last, len(parent) - 1)) is not None:
        del parent[index]
    else:
        raise PatchError(f"no value to remove at {last!r}")


def _index(segment: str, highest: int) -> int | None:
    if not segment.isdigit() or (len(segment) > 1 and segment[0] == "0"):
        return None
    index = int(segment)
    return index if index <= highest else None
