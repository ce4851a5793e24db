"""Text the execution page's views print: page URLs, JSON values cut to a bounded size, pointers.

Shared by studio/render/timeline.py, studio/render/state_tree.py and
studio/render/provenance.py, and importing none of them, so nothing cycles. Every
value is cut (DIFF_VALUE_CHARS, STRING_PREVIEW_CHARS, FULL_VALUE_CHARS) by
studio/render/bounded.py, which walks it without recursion, so a huge or deeply nested
value costs the page a bounded amount of HTML and time.
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
    """A member name as shown, quoted as a JSON string when it would read as another.

    An empty name, one edged with white space (HTML collapses it), one that
    starts with a quote (so a quoted label stays unambiguous) or one holding an
    unprintable character is quoted, with the unprintable escaped: `/meta/""` is
    not `/meta`, and `" spaced "` is not `spaced`. A name longer than LABEL_CHARS
    is cut, saying how long it is.
    """
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


def pointer_label(pointer: str) -> str:
    """An RFC 6901 pointer as shown: WHOLE_STATE for "", else each token through key_label.

    Tokens keep their `~0`/`~1` escapes, as in the patches received. Text that
    is no pointer (a malformed `?path=`) is shown as it came. A pointer longer
    than LABEL_CHARS is cut, saying how long it is.
    """
    if len(pointer) > LABEL_CHARS:
        return f"{pointer_label(pointer[:LABEL_CHARS])}… ({len(pointer):,} characters)"
    if not pointer:
        return WHOLE_STATE
    if not pointer.startswith("/"):
        return pointer
    return "".join("/" + key_label(token) for token in pointer.split("/")[1:])
