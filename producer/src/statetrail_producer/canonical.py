"""Projection of application values to JSON, and the canonical JSON the digests hash.

`Projector` turns any Python value into the JSON value the convention records (section 6 of
docs/convention.md): non-JSON values get a fixed representation, strings over the policy's
length and containers over its depth are cut, redacted paths are replaced, and the flags
say which of those happened. `canonical_json` writes a projected value as RFC 8785 (JCS)
text and `digest` hashes it; a projected value is all they accept.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal
import enum
import hashlib
import json
import math
import pathlib
import uuid
from collections.abc import Mapping, Sequence, Set
from typing import Any, Final, TypeAlias, cast

from statetrail_producer.pointer import parse

JSON: TypeAlias = "bool | int | float | str | list[JSON] | dict[str, JSON] | None"

MAX_SAFE_INTEGER: Final = 2**53 - 1
DEFAULT_MAX_DEPTH: Final = 128
REDACTED: Final = "[redacted]"
DEPTH_TRUNCATED: Final = "[truncated: depth]"

# hashlib keeps the GIL for updates below 2048 bytes.
_HASH_PIECE: Final = 2047
_GIL_FREE_HASH_BYTES: Final = 256 * 1024
_NON_FINITE: Final = {math.inf: "Infinity", -math.inf: "-Infinity"}


@dataclasses.dataclass(frozen=True)
class Policy:
    """What the projection may cut or hide.

    `max_string_length` (code points, `None` for no limit) truncates long strings;
    `max_depth` bounds nesting (the state object is depth 1); `redact` lists JSON
    Pointers into the state whose values are replaced, `*` matching any one segment.
    """

    max_string_length: int | None = None
    max_depth: int = DEFAULT_MAX_DEPTH
    redact: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.max_string_length is not None and self.max_string_length < 0:
            raise ValueError("max_string_length must be >= 0 or None")
        if self.max_depth < 1:
            raise ValueError("max_depth must be >= 1")
        for pattern in self.redact:
            if not pattern.startswith("/"):
                raise ValueError(f"redact entries are JSON Pointers starting with '/': {pattern!r}")

    def to_json(self) -> str:
        return compact_json({
            "max_depth": self.max_depth,
            "max_string_length": self.max_string_length,
            "redact": list(self.redact),
        })


class Projector:
    """Projects values under one policy and remembers whether it truncated or redacted."""

    __slots__ = ("_max_depth", "_max_string", "_patterns", "redacted", "special", "truncated")

    def __init__(self, policy: Policy) -> None:
        self._max_string = policy.max_string_length
        self._max_depth = policy.max_depth
        self._patterns = tuple(_pattern_segments(p) for p in policy.redact)
        self.truncated = False
        self.redacted = False
        # A float or a key outside the BMP: the fast canonical encoder would differ from JCS.
        self.special = False

    def project(self, value: object, path: tuple[str, ...] = ()) -> JSON:
        """The projection of `value` found at `path` (the segments below the state root)."""
        return self._value(value, len(path) + 1, path)

    def _value(self, value: object, depth: int, path: tuple[str, ...]) -> JSON:
        if self._patterns and _matches(self._patterns, path):
            self.redacted = True
            return REDACTED
        kind = type(value)
        if kind is str:
            return self._string(value)  # type: ignore[arg-type]
        if value is None or kind is bool:
            return value  # type: ignore[return-value]
        if kind is int:
            return value if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER else str(value)  # type: ignore[operator, return-value]
        if kind is float:
            return self._float(value)  # type: ignore[arg-type]
        if kind is dict or isinstance(value, Mapping):
            return self._mapping(cast(Mapping[Any, object], value), depth, path)
        if kind is list or kind is tuple:
            return self._sequence(value, depth, path)  # type: ignore[arg-type]
        return self._other(value, depth, path)

    def _string(self, text: str) -> str:
        if not text.isascii() and _has_surrogate(text):
            text = "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)
        limit = self._max_string
        if limit is not None and len(text) > limit:
            self.truncated = True
            return f"{text[:limit]}...[truncated {len(text)} chars]"
        return text

    def _float(self, number: float) -> JSON:
        if math.isnan(number):
            return "NaN"
        if math.isinf(number):
            return _NON_FINITE[number]
        self.special = True
        return number

    def _too_deep(self, depth: int) -> bool:
        if depth > self._max_depth:
            self.truncated = True
            return True
        return False

    def _mapping(self, mapping: Mapping[Any, object], depth: int, path: tuple[str, ...]) -> JSON:
        if self._too_deep(depth):
            return DEPTH_TRUNCATED
        out: dict[str, JSON] = {}
        tracked = bool(self._patterns)
        for key, item in mapping.items():
            name = key if type(key) is str else _key_text(key)
            if not name.isascii() and max(name) > "\uffff":
                self.special = True
            out[name] = self._value(item, depth + 1, (*path, name) if tracked else path)
        return out

    def _sequence(self, items: Sequence[object], depth: int, path: tuple[str, ...]) -> JSON:
        if self._too_deep(depth):
            return DEPTH_TRUNCATED
        if self._patterns:
            return [self._value(item, depth + 1, (*path, str(i))) for i, item in enumerate(items)]
        return [self._value(item, depth + 1, path) for item in items]

    def _other(self, value: object, depth: int, path: tuple[str, ...]) -> JSON:
        if isinstance(value, enum.Enum):
            return self._value(value.value, depth, path)
        if isinstance(value, bool):
            return bool(value)
        if isinstance(value, int):
            return self._value(int(value), depth, path)
        if isinstance(value, float):
            return self._float(float(value))
        if isinstance(value, str):
            return self._string(str(value))
        if isinstance(value, (bytes, bytearray, memoryview)):
            return base64.b64encode(bytes(value)).decode("ascii")
        if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
            return value.isoformat()
        if isinstance(value, datetime.timedelta):
            return self._float(value.total_seconds())
        if isinstance(value, (uuid.UUID, decimal.Decimal, pathlib.PurePath)):
            return str(value)
        dump = getattr(value, "model_dump", None)
        if callable(dump) and not isinstance(value, type):
            return self._value(dump(mode="json"), depth, path)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
            return self._mapping(fields, depth, path)
        if isinstance(value, Set):
            if self._too_deep(depth):
                return DEPTH_TRUNCATED
            projected = [self._value(item, depth + 1, path) for item in value]
            return sorted(projected, key=canonical_json)
        if isinstance(value, Sequence):
            return self._sequence(value, depth, path)
        return self._string(_safe_repr(value))


def project(value: object, policy: Policy, path: tuple[str, ...] = ()) -> tuple[JSON, Projector]:
    """Project one value; the projector returned carries the flags."""
    projector = Projector(policy)
    return projector.project(value, path), projector


def mode_of(truncated: bool, redacted: bool) -> str:
    """A payload's mode attribute: `full`, or the tokens of the rules that applied."""
    tokens = [name for name, hit in (("truncated", truncated), ("redacted", redacted)) if hit]
    return ",".join(tokens) if tokens else "full"


def load_json(text: str) -> JSON:
    """Parse JSON this library wrote (a fresh, independent value)."""
    return cast(JSON, json.loads(text))


def compact_json(value: object) -> str:
    """Any payload's JSON text: sorted keys, no whitespace, raw UTF-8 (projected values only)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def canonical_json(value: JSON, special: bool = True) -> str:
    """RFC 8785 (JCS) text of a projected value.

    `special=False` promises the value has no floats and no keys outside the Basic
    Multilingual Plane (a Projector's `special` flag), where `json.dumps` writes the same
    bytes much faster.
    """
    if not special:
        return compact_json(value)
    parts: list[str] = []
    _encode(value, parts)
    return "".join(parts)


def digest(canonical: str) -> str:
    """The convention's digest: lowercase hex SHA-256 of the canonical text's UTF-8 bytes."""
    data = canonical.encode("utf-8")
    if len(data) > _GIL_FREE_HASH_BYTES:
        return hashlib.sha256(data).hexdigest()
    # hashlib lets go of the GIL for inputs over 2 KB; for a small state, winning it back
    # from the framework's threads costs far more than the hash, so feed it in pieces.
    hasher = hashlib.sha256()
    for start in range(0, len(data), _HASH_PIECE):
        hasher.update(data[start:start + _HASH_PIECE])
    return hasher.hexdigest()


def es_number(number: float) -> str:
    """A finite double as ECMAScript's Number.prototype.toString writes it (RFC 8785 3.2.2.3)."""
    if number == 0:
        return "0"
    sign = "-" if number < 0 else ""
    text = repr(abs(number))
    mantissa, _, exponent_text = text.partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    exponent = int(exponent_text or "0") - len(fraction)
    stripped = digits.rstrip("0")
    exponent += len(digits) - len(stripped)
    digits = stripped
    k = len(digits)
    n = exponent + k
    if k <= n <= 21:
        body = digits + "0" * (n - k)
    elif 0 < n <= 21:
        body = f"{digits[:n]}.{digits[n:]}"
    elif -6 < n <= 0:
        body = "0." + "0" * -n + digits
    else:
        e = n - 1
        head = digits[0] + (f".{digits[1:]}" if k > 1 else "")
        body = f"{head}e{'+' if e >= 0 else '-'}{abs(e)}"
    return sign + body


def _encode(value: JSON, parts: list[str]) -> None:
    if value is None:
        parts.append("null")
    elif value is True:
        parts.append("true")
    elif value is False:
        parts.append("false")
    elif isinstance(value, str):
        parts.append(json_string(value))
    elif isinstance(value, int):
        parts.append(str(value))
    elif isinstance(value, float):
        parts.append(es_number(value))
    elif isinstance(value, list):
        parts.append("[")
        for i, item in enumerate(value):
            if i:
                parts.append(",")
            _encode(item, parts)
        parts.append("]")
    else:
        parts.append("{")
        for i, key in enumerate(sorted(value, key=utf16_key)):
            if i:
                parts.append(",")
            parts.append(json_string(key))
            parts.append(":")
            _encode(value[key], parts)
        parts.append("}")


def json_string(text: str) -> str:
    # json.dumps escapes exactly what JCS escapes, with lowercase \u00xx.
    return json.dumps(text, ensure_ascii=False)


def utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _key_text(key: object) -> str:
    if key is None or isinstance(key, (bool, int, float)):
        return json.dumps(key)
    return str(key)


def _safe_repr(value: object) -> str:
    try:
        return repr(value)
    except Exception as error:  # any repr may raise; the state must still be recorded
        return f"<unrepresentable {type(value).__qualname__}: {type(error).__name__}>"


def _pattern_segments(pattern: str) -> tuple[str, ...]:
    return tuple(parse(pattern))


def _matches(patterns: tuple[tuple[str, ...], ...], path: tuple[str, ...]) -> bool:
    return any(
        len(pattern) == len(path)
        and all(p in ("*", s) for p, s in zip(pattern, path, strict=True))
        for pattern in patterns
    )


__all__ = [
    "DEFAULT_MAX_DEPTH",
    "JSON",
    "Policy",
    "Projector",
    "canonical_json",
    "compact_json",
    "digest",
    "es_number",
    "json_string",
    "mode_of",
    "project",
    "utf16_key",
]
