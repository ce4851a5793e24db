"""RFC 6901 JSON Pointers: parsing, formatting and escaping of path segments."""

from __future__ import annotations

import re

_BAD_ESCAPE = re.compile(r"~(?![01])")


class PointerError(ValueError):
    """A string that is not a JSON Pointer."""


def escape(segment: str) -> str:
    """One path segment as it appears in a pointer (`~` -> `~0`, `/` -> `~1`)."""
    return segment.replace("~", "~0").replace("/", "~1")


def unescape(segment: str) -> str:
    return segment.replace("~1", "/").replace("~0", "~")


def parse(pointer: str) -> list[str]:
    """The segments of a pointer; `""` (the whole document) has none."""
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PointerError(f"a JSON Pointer starts with '/': {pointer!r}")
    if _BAD_ESCAPE.search(pointer):
        raise PointerError(f"'~' must be followed by 0 or 1 in a JSON Pointer: {pointer!r}")
    return [unescape(part) for part in pointer[1:].split("/")]


def format_pointer(segments: list[str] | tuple[str, ...]) -> str:
    return "".join("/" + escape(segment) for segment in segments)
