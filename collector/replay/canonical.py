"""Canonical JSON (RFC 8785, JCS) and the state digests of the state-evidence convention.

Pure. A convention producer sends, with every state it records, the lowercase hex
SHA-256 of the UTF-8 bytes of the state's canonical JSON (docs/convention.md section 4);
replay recomputes it on the state it rebuilt, so every step is checked, not only the end.
The text is JCS: no whitespace, object members sorted by their keys' UTF-16 code units,
JSON's minimal string escapes with lowercase `\\u00xx`, numbers as ECMAScript writes a
double. The collector does not import the producer library; this is its own copy of the
same rules (tests/test_canonical_replay.py checks the two agree).
"""

from __future__ import annotations

import hashlib
import json
from typing import Final

from collector.replay.jsondoc import JsonValue

EMPTY_STATE_DIGEST: Final = "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"


def state_digest(value: JsonValue) -> str:
    """The convention's digest of a state: SHA-256 of its canonical JSON, lowercase hex."""
    text = canonical_json(value)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def canonical_json(value: JsonValue) -> str:
    """RFC 8785 text of a JSON value (no NaN or infinities: JSON has none)."""
    if _plain(value):
        # No floats, BMP-only keys: json.dumps writes the JCS bytes, in C (recursively,
        # so a very deep state takes the iterative path below instead).
        try:
            return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        except RecursionError:
            pass
    parts: list[str] = []
    _encode(value, parts)
    return "".join(parts)


def es_number(number: float) -> str:
    """A finite double as ECMAScript's Number.prototype.toString writes it (RFC 8785 3.2.2.3)."""
    if number == 0:
        return "0"
    sign = "-" if number < 0 else ""
    mantissa, _, exponent_text = repr(abs(number)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    exponent = int(exponent_text or "0") - len(fraction)
    stripped = digits.rstrip("0")
    exponent += len(digits) - len(stripped)
    digits = stripped
    count = len(digits)
    point = exponent + count
    if count <= point <= 21:
        body = digits + "0" * (point - count)
    elif 0 < point <= 21:
        body = f"{digits[:point]}.{digits[point:]}"
    elif -6 < point <= 0:
        body = "0." + "0" * -point + digits
    else:
        shown = point - 1
        head = digits[0] + (f".{digits[1:]}" if count > 1 else "")
        body = f"{head}e{'+' if shown >= 0 else '-'}{abs(shown)}"
    return sign + body


def _plain(value: JsonValue) -> bool:
    """Whether no float and no key outside the BMP sits anywhere in `value` (iteratively)."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, float):
            return False
        if isinstance(item, dict):
            for key in item:
                if not key.isascii() and max(key) > "\uffff":
                    return False
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return True


def _encode(value: JsonValue, parts: list[str]) -> None:
    # Iterative: a replayed state may nest as deep as --max-state-depth allows.
    stack: list[JsonValue | _Literal] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Literal):
            parts.append(item.text)
        elif item is None:
            parts.append("null")
        elif item is True:
            parts.append("true")
        elif item is False:
            parts.append("false")
        elif isinstance(item, str):
            parts.append(json.dumps(item, ensure_ascii=False))
        elif isinstance(item, int):
            parts.append(str(item))
        elif isinstance(item, float):
            parts.append(es_number(item))
        elif isinstance(item, list):
            pushed: list[JsonValue | _Literal] = [_OPEN_ARRAY]
            for index, element in enumerate(item):
                if index:
                    pushed.append(_COMMA)
                pushed.append(element)
            pushed.append(_CLOSE_ARRAY)
            stack.extend(reversed(pushed))
        else:
            pushed = [_OPEN_OBJECT]
            for index, key in enumerate(sorted(item, key=_utf16)):
                if index:
                    pushed.append(_COMMA)
                pushed.append(_Literal(json.dumps(key, ensure_ascii=False) + ":"))
                pushed.append(item[key])
            pushed.append(_CLOSE_OBJECT)
            stack.extend(reversed(pushed))


class _Literal:
    """Text written as it is between the values `_encode` is still to write."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


_OPEN_ARRAY: Final = _Literal("[")
_CLOSE_ARRAY: Final = _Literal("]")
_OPEN_OBJECT: Final = _Literal("{")
_CLOSE_OBJECT: Final = _Literal("}")
_COMMA: Final = _Literal(",")


def _utf16(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")
