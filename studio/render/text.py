"""Text the execution page's views print: page URLs, JSON values cut to a bounded size, pointers.

Shared by the timeline, state tree and provenance views and importing none of them.
Every value is cut by bounded.py, without recursion, so a huge or deep value costs the
page a bounded amount of HTML and time.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import urlencode

from collector.replay.jsondoc import JsonValue, Missing
from studio.render import bounded

STRING_PREVIEW_CHARS: Final = 200
DIFF_VALUE_CHARS: Final = 4000
# The most of one scalar a page holds behind "show all".
FULL_VALUE_CHARS: Final = 20_000

# The most of a member name or pointer a page prints; longer ones are cut, saying so.
LABEL_CHARS: Final = 300
# A field whose pointer is longer has no provenance link (its URL would be as long).
LINK_POINTER_CHARS: Final = 2000

# How the empty pointer (RFC 6901: the whole document) is named; "/" is the key "".
WHOLE_STATE: Final = "the whole state"


def href(base: str, **params: object) -> str:
    """A page URL with these query parameters (None values left out).

    Slashes stay as they are, so a field's pointer reads as itself (`path=/a/b`).
    """
    query = urlencode({k: str(v) for k, v in params.items() if v is not None}, safe="/")
    return f"{base}?{query}" if query else base


def json_text(value: JsonValue | Missing) -> str | None:
    """The value as indented JSON cut at DIFF_VALUE_CHARS; None when it is absent."""
    if isinstance(value, Missing):
        return None
    return bounded.json_preview(value, DIFF_VALUE_CHARS, indent=2)


def cut_text(text: str) -> str:
    """The text cut at DIFF_VALUE_CHARS, saying how much was left out."""
    return bounded.cut_text(text, DIFF_VALUE_CHARS)


def keys_text(count: int) -> str:
    """An object's size as the tree and provenance print it: "{1 key}", "{3 keys}"."""
    return f"{{{count:,} {'key' if count == 1 else 'keys'}}}"


def items_text(count: int) -> str:
    """An array's size as provenance prints it: "[1 item]", "[3 items]"."""
    return f"[{count:,} {'item' if count == 1 else 'items'}]"


def leaf_text(value: JsonValue) -> tuple[str, str | None]:
    """A scalar as one line of JSON cut at STRING_PREVIEW_CHARS, and more of it when it was cut.

    The longer text is cut at FULL_VALUE_CHARS, saying how long the string is.
    """
    if isinstance(value, str) and len(value) > FULL_VALUE_CHARS:
        text = bounded.json_preview(value[:FULL_VALUE_CHARS], FULL_VALUE_CHARS + 2)
        whole = f"{text}\n… value of {len(value):,} characters not shown in full"
        return text[:STRING_PREVIEW_CHARS] + "…", whole
    text = bounded.json_preview(value, FULL_VALUE_CHARS)
    if len(text) <= STRING_PREVIEW_CHARS:
        return text, None
    return text[:STRING_PREVIEW_CHARS] + "…", text


def key_label(key: str) -> str:
    """A member name as shown, quoted as a JSON string when it would read as another
    (empty, edged with white space, starting with a quote, or unprintable), and cut
    past LABEL_CHARS."""
    if len(key) > LABEL_CHARS:
        return f"{_key_label(key[:LABEL_CHARS])}… ({len(key):,} characters)"
    return _key_label(key)


def _key_label(key: str) -> str:
    if key and key == key.strip() and not key.startswith('"') and key.isprintable():
        return key
    return '"' + "".join(_escaped(char) for char in key) + '"'


def _escaped(char: str) -> str:
    if char in '"\\':
        return "\\" + char
    return char if char.isprintable() else char.encode("unicode_escape").decode("ascii")


def path_breaks(label: str) -> list[str]:
    """A pointer label in pieces that each end after a `/`: a template puts a line-break
    opportunity (`<wbr>`) between them, so a long path wraps at its separators, not inside
    a member name. Plain strings: autoescape still escapes every piece."""
    pieces = label.split("/")
    if label.startswith("/") and len(pieces) > 1:
        pieces[:2] = ["/" + pieces[1]]  # "/count" stays whole: no line of a lone "/"
    return [piece + "/" for piece in pieces[:-1]] + [pieces[-1]]


def pointer_label(pointer: str) -> str:
    """An RFC 6901 pointer as shown: WHOLE_STATE for "", else each token through key_label
    (escapes kept; text that is no pointer shown as it came; cut past LABEL_CHARS)."""
    if len(pointer) > LABEL_CHARS:
        return f"{pointer_label(pointer[:LABEL_CHARS])}… ({len(pointer):,} characters)"
    if not pointer:
        return WHOLE_STATE
    if not pointer.startswith("/"):
        return pointer
    return "".join("/" + key_label(token) for token in pointer.split("/")[1:])
