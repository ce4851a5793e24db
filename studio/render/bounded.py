"""Bounded rendering of untrusted values: every page and JSON answer costs a capped amount.

Telemetry can nest arbitrarily deep or hold huge strings, so values are walked with an
explicit stack (no RecursionError) and stop at a budget: `json_preview` (`limit`
characters, MAX_RENDER_DEPTH levels), `cut_text`, and `api_value` (API_MAX_DEPTH).
What is left out is always said in the value itself ("… more not shown", or the
TRUNCATED_KEY object in the API).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

from collector.replay.jsondoc import MAX_JSON_DEPTH, JsonValue

# Levels of nesting a page draws; a real state is read well within this, and
# deeper levels are reached through the JSON API.
MAX_RENDER_DEPTH: Final = 32
# Levels the JSON API answers with: as deep as any payload the collector accepts,
# which json.dumps serialises without reaching the interpreter's recursion limit.
API_MAX_DEPTH: Final = MAX_JSON_DEPTH
# The member of the object that stands in, in a JSON answer, for a value nested deeper.
TRUNCATED_KEY: Final = "statetrail.truncated"
DEEPER_NOT_SHOWN: Final = "deeper levels not shown"

Container = dict[str, JsonValue] | list[JsonValue]


def cut_text(text: str, limit: int) -> str:
    """`text` cut at `limit` characters, saying how long the whole value is."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n… value of {len(text):,} characters not shown in full"


def cut_line(text: str, limit: int) -> str:
    """`text` cut at `limit` characters for a one-line place (a title, a table cell)."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def json_preview(
    value: JsonValue, limit: int, *, indent: int | None = None, sort_keys: bool = False
) -> str:
    """The value as JSON text (json.dumps's layout) of at most about `limit` characters.

    Containers below MAX_RENDER_DEPTH levels are written `[… deeper levels not
    shown]`, and text past `limit` is cut with "… more not shown", so a deep or
    huge value costs its first `limit` characters, not its size.
    """
    writer = _Writer(limit, indent, sort_keys)
    writer.value(value, 0)
    while writer.frames and not writer.full:
        writer.step()
    text = "".join(writer.parts)
    if writer.full:
        return f"{text[:limit]}\n… more not shown"
    return text


@dataclass(slots=True)
class _Frame:
    items: Iterator[tuple[str | None, JsonValue]]
    closer: str
    depth: int
    first: bool = True


@dataclass(slots=True)
class _Writer:
    limit: int
    indent: int | None
    sort_keys: bool
    parts: list[str] = field(default_factory=list)
    length: int = 0
    frames: list[_Frame] = field(default_factory=list)

    @property
    def full(self) -> bool:
        return self.length > self.limit

    def add(self, piece: str) -> None:
        self.parts.append(piece)
        self.length += len(piece)

    def value(self, value: JsonValue, depth: int) -> None:
        if not isinstance(value, dict | list):
            self.add(_scalar(value, self.limit - self.length + 1))
            return
        opener, closer = ("{", "}") if isinstance(value, dict) else ("[", "]")
        if not value:
            self.add(opener + closer)
        elif depth >= MAX_RENDER_DEPTH:
            self.add(f"{opener}… {DEEPER_NOT_SHOWN}{closer}")
        else:
            self.add(opener)
            self.frames.append(_Frame(self._items(value), closer, depth + 1))

    def _items(self, value: Container) -> Iterator[tuple[str | None, JsonValue]]:
        if isinstance(value, list):
            return ((None, item) for item in value)
        return iter(sorted(value.items()) if self.sort_keys else value.items())

    def step(self) -> None:
        frame = self.frames[-1]
        item = next(frame.items, None)
        if item is None:
            self.frames.pop()
            self.add(self._newline(frame.depth - 1) + frame.closer)
            return
        if not frame.first:
            self.add("," if self.indent is not None else ", ")
        frame.first = False
        self.add(self._newline(frame.depth))
        key, child = item
        if key is not None:
            self.add(_scalar(key, self.limit - self.length + 1) + ": ")
        self.value(child, frame.depth)

    def _newline(self, depth: int) -> str:
        return "" if self.indent is None else "\n" + " " * (self.indent * depth)


def _scalar(value: JsonValue, room: int) -> str:
    """A scalar as JSON; a string longer than `room` is cut first, so a huge one costs `room`."""
    if isinstance(value, str) and len(value) > room:
        value = value[: max(room, 0)]
    return json.dumps(value, ensure_ascii=False)


def deeper_than(value: JsonValue, limit: int) -> bool:
    """Whether containers nest more than `limit` levels (an explicit stack: no recursion)."""
    pending: list[tuple[Container, int]] = [(value, 1)] if isinstance(value, dict | list) else []
    while pending:
        node, depth = pending.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        # Only containers can nest; scalars, most of a state, are passed over here.
        pending += [(child, depth + 1) for child in children if isinstance(child, dict | list)]
    return False


def api_value(value: JsonValue, max_depth: int = API_MAX_DEPTH) -> JsonValue:
    """The value for a JSON answer: itself, or a copy with what nests deeper than `max_depth`
    replaced by `{TRUNCATED_KEY: "..."}`, so the answer always serialises."""
    if not deeper_than(value, max_depth):
        return value
    return copy_to_depth(value, max_depth)


def truncation_marker(max_depth: int) -> dict[str, JsonValue]:
    return {TRUNCATED_KEY: f"nested deeper than {max_depth} levels: {DEEPER_NOT_SHOWN}"}


def copy_to_depth(value: JsonValue, max_depth: int = API_MAX_DEPTH) -> JsonValue:
    """A copy sharing no container with `value`, cut at `max_depth` levels as `api_value` cuts."""
    root: list[JsonValue] = [None]
    # (source container, its copy, its depth), copied level by level.
    pending: list[tuple[Container, Container, int]] = []

    def copied(item: JsonValue, depth: int) -> JsonValue:
        if not isinstance(item, dict | list):
            return item
        if depth > max_depth:
            return truncation_marker(max_depth)
        empty: Container = {} if isinstance(item, dict) else []
        pending.append((item, empty, depth))
        return empty

    root[0] = copied(value, 1)
    while pending:
        source, target, depth = pending.pop()
        if isinstance(source, dict) and isinstance(target, dict):
            for key, item in source.items():
                target[key] = copied(item, depth + 1)
        elif isinstance(source, list) and isinstance(target, list):
            target.extend(copied(item, depth + 1) for item in source)
    return root[0]
