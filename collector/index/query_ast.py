"""The field-filter language's AST, and printing it back as query text.

Stage: pure. collector/index/query.py parses text into these nodes; the store
compiles them into SQL (collector/store/filters.py) and the studio names the
paths they test. Printing lives here, beside the nodes, because it must
agree with the parser's lexical rules (`IDENTIFIER`, `INDEX`, `KEYWORDS`),
which live here too: `format_query` output parses back to an equal AST.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Final, Literal, TypeAlias

from collector.replay.jsondoc import escape_token, unescape_token

Scope: TypeAlias = Literal["final", "ever"]
CompareOp: TypeAlias = Literal["=", "!=", "<", "<=", ">", ">=", "contains"]
Scalar: TypeAlias = bool | int | float | str | None
"""A JSON literal. Note `bool` before `int` when switching: `True` is an `int`."""

KEYWORDS: Final[frozenset[str]] = frozenset(
    {"and", "or", "not", "final", "ever", "contains", "exists", "missing", "true", "false", "null"}
)
IDENTIFIER: Final = re.compile(r"[^\W\d][\w-]*")
INDEX: Final = re.compile(r"0|[1-9][0-9]*")
# DEL and C1 controls: the tokenizer rejects them raw, so literals escape them.
C1_CONTROLS: Final = re.compile("[\x7f-\x9f]")


class Wildcard(Enum):
    """A path step that names no one element: `[*]` any element, `[-1]` the last.

    In a pointer they are written `~*` and `~-1`: RFC 6901 lets `~` stand only
    before `0` or `1`, so no escaped member name is spelled like them. The
    field index stores each array's last element a second time under `~-1`
    (collector/index/fields.py), so `[-1]` names rows as a key does.
    """

    ANY = "~*"
    LAST = "~-1"


PathToken: TypeAlias = str | Wildcard
ANY: Final = Wildcard.ANY
LAST: Final = Wildcard.LAST


@dataclass(frozen=True, slots=True)
class Path:
    """A location in a JSON document as RFC 6901 reference tokens (unescaped), or a
    pattern of them when a token is a `Wildcard`."""

    tokens: tuple[PathToken, ...]

    @property
    def pointer(self) -> str:
        """The RFC 6901 pointer, e.g. `("a/b", "0")` -> `/a~1b/0`; wildcards as `~*`, `~-1`."""
        return "".join(
            "/" + (token.value if isinstance(token, Wildcard) else escape_token(token))
            for token in self.tokens
        )

    @property
    def parent(self) -> Path:
        return Path(self.tokens[:-1])

    @property
    def is_pattern(self) -> bool:
        """Whether the path has an `[*]`, so it may name many nodes of one state."""
        return ANY in self.tokens

    @property
    def concrete_prefix(self) -> Path:
        """The longest leading part naming one real node: no wildcard of either kind."""
        for position, token in enumerate(self.tokens):
            if isinstance(token, Wildcard):
                return Path(self.tokens[:position])
        return self

    def __str__(self) -> str:
        return format_path(self)


@dataclass(frozen=True, slots=True)
class Compare:
    """`[scope] path op value`: some row at `path` (in scope) satisfies `op value`."""

    scope: Scope
    path: Path
    op: CompareOp
    value: Scalar


@dataclass(frozen=True, slots=True)
class Presence:
    """`[scope] path exists` (present=True) or `... missing` (present=False)."""

    scope: Scope
    path: Path
    present: bool


@dataclass(frozen=True, slots=True)
class Not:
    operand: Expr


@dataclass(frozen=True, slots=True)
class And:
    """Two or more operands; chains like `a and b and c` stay flat."""

    operands: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class Or:
    """Two or more operands; chains like `a or b or c` stay flat."""

    operands: tuple[Expr, ...]


Expr: TypeAlias = Compare | Presence | Not | And | Or


def format_query(expr: Expr) -> str:
    """Print an AST as query text that parses back to an equal AST.

    `final` is left implicit; operands of the same or lower precedence are
    parenthesised so `And((a, And((b, c))))` survives the round trip.
    """
    match expr:
        case Compare(scope=scope, path=path, op=op, value=value):
            return f"{_scope_prefix(scope)}{format_path(path)} {op} {_format_scalar(value)}"
        case Presence(scope=scope, path=path, present=present):
            word = "exists" if present else "missing"
            return f"{_scope_prefix(scope)}{format_path(path)} {word}"
        case Not(operand=operand):
            inner = format_query(operand)
            return f"not ({inner})" if isinstance(operand, And | Or) else f"not {inner}"
        case And(operands=operands):
            return " and ".join(_operand(o, isinstance(o, And | Or)) for o in operands)
        case Or(operands=operands):
            return " or ".join(_operand(o, isinstance(o, Or)) for o in operands)


def _operand(expr: Expr, parenthesise: bool) -> str:
    text = format_query(expr)
    return f"({text})" if parenthesise else text


def _scope_prefix(scope: Scope) -> str:
    return "ever " if scope == "ever" else ""


def comparisons(expr: Expr) -> Iterator[Compare | Presence]:
    """The comparisons and presence tests of a query, in the order they are written."""
    pending: list[Expr] = [expr]
    while pending:
        node = pending.pop()
        if isinstance(node, Compare | Presence):
            yield node
        elif isinstance(node, Not):
            pending.append(node.operand)
        else:
            pending.extend(reversed(node.operands))


def paths_of(expr: Expr) -> tuple[Path, ...]:
    """The distinct paths a query tests, in the order they are written."""
    return tuple(dict.fromkeys(node.path for node in comparisons(expr)))


def format_path(path: Path) -> str:
    """Dotted form: identifiers bare, indices as `[n]`, anything else quoted."""
    parts: list[str] = []
    for position, token in enumerate(path.tokens):
        if isinstance(token, Wildcard):
            parts.append("[*]" if token is ANY else "[-1]")
        elif INDEX.fullmatch(token):
            parts.append(f"[{token}]")
        elif IDENTIFIER.fullmatch(token) and (position > 0 or token not in KEYWORDS):
            parts.append(token if position == 0 else f".{token}")
        else:
            quoted = literal(token)
            parts.append(quoted if position == 0 else f".{quoted}")
    return "".join(parts)


def pattern_path(pointer: str) -> Path:
    """The path a pointer names, with `~*` and `~-1` read as wildcards (see `Wildcard`).

    The inverse of `Path.pointer`; ValueError for a malformed pointer.
    """
    if pointer == "":
        return Path(())
    if not pointer.startswith("/"):
        raise ValueError(f"JSON pointer {pointer!r} must be empty or start with '/'")
    tokens: list[PathToken] = []
    for token in pointer[1:].split("/"):
        if token in _WILDCARDS:
            tokens.append(_WILDCARDS[token])
        elif "~" in token.replace("~0", "").replace("~1", ""):
            raise ValueError(f"JSON pointer {pointer!r} has an invalid '~' escape")
        else:
            tokens.append(unescape_token(token))
    return Path(tuple(tokens))


_WILDCARDS: Final[dict[str, Wildcard]] = {w.value: w for w in Wildcard}
_INDEX_TOKEN: Final = re.compile(r"(?<=/)(?:0|[1-9][0-9]*)(?=/|$)")


def shape_of(pointer: str) -> str:
    """`pointer` with every index token written `~*`: the pattern of its `[*]` paths.

    A token spelled like an index is one whether its container is an array or
    an object (the index does not record which), as `x[0]` and `x."0"` match alike.
    """
    return _INDEX_TOKEN.sub(ANY.value, pointer)


def _format_scalar(value: Scalar) -> str:
    if isinstance(value, float):
        return repr(value)
    return literal(value)


def literal(value: Scalar) -> str:
    """JSON text for a literal; DEL and C1 controls escaped too, as the tokenizer rejects them."""
    text = json.dumps(value, ensure_ascii=False)
    return C1_CONTROLS.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
