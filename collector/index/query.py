"""The field-filter language: query text -> a typed, immutable AST (collector/index/query_ast.py).

Stage: pure parsing. No SQL and no I/O live here; `collector.store.filters`
compiles the AST into a parameterised SQL expression.

Invariant: `parse_query` either returns an AST or raises `QueryError` carrying
a 0-based character offset into the text. Any input, however hostile (huge,
deeply nested, control characters, SQL fragments), ends in one of the two;
string values stay plain Python values in the AST and are only ever bound as
SQL parameters downstream.

Grammar (lowest precedence first)::

    query      := or EOF
    or         := and ("or" and)*
    and        := not ("and" not)*
    not        := "not" not | primary
    primary    := "(" or ")" | comparison
    comparison := ["final" | "ever"] path (OP value | "contains" value | "exists" | "missing")
    path       := pointer | head tail*
    head       := identifier | string | "[" step "]"
    tail       := "." (identifier | keyword | string) | "[" step "]"
    step       := index | "*" | "-1"
    OP         := "=" | "!=" | "<" | "<=" | ">" | ">="
    value      := JSON literal: true | false | null | number | "string"

`final` (the default) looks at the end state; `ever` at every state the
execution's history passed through. `a.b[0]`, `a."b.c"` and `/a/b~1c/0` are
all paths; each becomes a tuple of RFC 6901 reference tokens. `[*]` (any
element) and `[-1]` (the last) become `Wildcard` tokens, and so do `~*` and
`~-1` in a pointer (which RFC 6901 leaves unused).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

from collector.index.query_ast import (
    ANY,
    IDENTIFIER,
    INDEX,
    KEYWORDS,
    LAST,
    And,
    Compare,
    CompareOp,
    Expr,
    Not,
    Or,
    Path,
    PathToken,
    Presence,
    Scalar,
    Scope,
    literal,
    pattern_path,
)

MAX_QUERY_LENGTH: Final = 4096
"""Longest accepted query text, in characters."""

MAX_DEPTH: Final = 32
"""Deepest nesting of parentheses and `not`; keeps recursion far from Python's limit."""

MAX_COMPARISONS: Final = 64
"""Most comparisons in one query; each compiles to a subquery."""


TokenKind: TypeAlias = Literal[
    "(", ")", "[", "]", ".", "*", "op", "word", "string", "number", "pointer", "eof"
]


ORDERING_OPS: Final[frozenset[str]] = frozenset({"<", "<=", ">", ">="})

_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_WORD = re.compile(r"[\w-]+")
_POINTER = re.compile(r"/[^\s()=!<>\"']*")
_BAD_POINTER_ESCAPE = re.compile(r"~(?![01]|\*(?:/|$)|-1(?:/|$))")
_WHITESPACE = frozenset(" \t\r\n")
_STRING_ESCAPES = frozenset('"\\/bfnrtu')
_PUNCTUATION: Final[dict[str, TokenKind]] = {
    "(": "(", ")": ")", "[": "[", "]": "]", ".": ".", "*": "*"
}


class QueryError(ValueError):
    """A query the user must fix; `position` is a 0-based offset into the text.

    Views answer these with HTTP 400 and `render(text)` so the user sees where.
    """

    def __init__(self, message: str, position: int) -> None:
        super().__init__(message, position)
        self.message = message
        self.position = position

    def __str__(self) -> str:
        return f"{self.message} (at character {self.position})"

    def render(self, text: str) -> str:
        """Return the offending line, a caret under `position`, then the message.

        Tabs before the caret are copied so the caret lines up in a terminal
        or a `<pre>` block; multi-line queries show only the offending line.
        """
        position = min(max(self.position, 0), len(text))
        line_start = text.rfind("\n", 0, position) + 1
        line_end = text.find("\n", position)
        line = text[line_start : len(text) if line_end == -1 else line_end]
        padding = "".join("\t" if c == "\t" else " " for c in text[line_start:position])
        return f"{line}\n{padding}^\n{self.message}"


@dataclass(frozen=True, slots=True)
class Token:
    kind: TokenKind
    text: str
    """The source text of the token (for strings, including the quotes)."""
    position: int
    value: str = ""
    """The decoded value of string tokens; empty otherwise."""


def parse_query(text: str) -> Expr:
    """Parse filter text into an AST, or raise `QueryError` pointing at the problem.

    Blank text is an error (there is nothing to filter on); callers that treat
    an empty box as "no filter" should check for that before calling.
    """
    return _Parser(tokenize(text)).parse()


def parse_path(text: str) -> Path:
    """Parse a lone path (dotted, quoted or JSON pointer), e.g. for a `?path=` parameter.

    Keywords are accepted as the first name here, since no comparison follows.
    """
    parser = _Parser(tokenize(text))
    path = parser.path(allow_keyword=True)
    parser.expect_end()
    return path


# --- tokenizer ---------------------------------------------------------------


def tokenize(text: str) -> list[Token]:
    """Split query text into tokens ending with an `eof` token.

    Raises `QueryError` for over-long text, control characters, unpaired
    surrogates (they cannot be encoded for the database), and malformed strings,
    numbers or pointers.
    """
    if len(text) > MAX_QUERY_LENGTH:
        raise QueryError(
            f"query is too long ({len(text)} characters; the limit is {MAX_QUERY_LENGTH})",
            MAX_QUERY_LENGTH,
        )
    _reject_unprintable(text)
    tokens: list[Token] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c in _WHITESPACE:
            i += 1
            continue
        token = _next_token(text, i)
        tokens.append(token)
        i += len(token.text)
    tokens.append(Token("eof", "", len(text)))
    return tokens


def _reject_unprintable(text: str) -> None:
    for i, c in enumerate(text):
        code = ord(c)
        if (code < 0x20 and c not in _WHITESPACE) or code == 0x7F or 0x80 <= code < 0xA0:
            raise QueryError(f"control character U+{code:04X} is not allowed", i)
        if 0xD800 <= code <= 0xDFFF:
            raise QueryError(f"unpaired surrogate U+{code:04X} is not allowed", i)


def _next_token(text: str, i: int) -> Token:
    c = text[i]
    punctuation = _PUNCTUATION.get(c)
    if punctuation is not None:
        return Token(punctuation, c, i)
    if c in "=!<>":
        return _operator(text, i)
    if c == '"':
        return _string(text, i)
    if c == "'":
        raise QueryError('strings use double quotes, e.g. "done"', i)
    if c in "-0123456789":
        return _number(text, i)
    if c == "/":
        if i and text[i - 1] not in _WHITESPACE and text[i - 1] != "(":
            raise _slash_inside_path(text, i)
        return _pointer(text, i)
    match = _WORD.match(text, i)
    if match is not None:
        return Token("word", match.group(), i)
    if c == "{":
        raise QueryError(_NOT_COMPARED_WHOLE, i)
    raise QueryError(f"unexpected character {c!r}", i)


def _operator(text: str, i: int) -> Token:
    two = text[i : i + 2]
    if two == "==":
        raise QueryError("use '=' for equality", i)
    if two in ("!=", "<=", ">="):
        return Token("op", two, i)
    if text[i] == "!":
        raise QueryError("expected '!='; use 'not' to negate a comparison", i)
    return Token("op", text[i], i)


def _string(text: str, start: int) -> Token:
    """Scan a JSON string literal; `json.loads` then decodes the escapes."""
    i = start + 1
    while i < len(text):
        c = text[i]
        if c == '"':
            raw = text[start : i + 1]
            return Token("string", raw, start, _decode_string(raw, start))
        if c == "\\":
            escape = text[i + 1 : i + 2]
            if escape not in _STRING_ESCAPES or escape == "":
                raise QueryError(
                    'invalid escape in string; JSON escapes are \\" \\\\ \\/ '
                    "\\b \\f \\n \\r \\t \\uXXXX",
                    i,
                )
            if escape == "u" and not re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2 : i + 6]):
                raise QueryError("\\u must be followed by four hex digits", i)
            i += 2
            continue
        if c in "\r\n\t":
            raise QueryError("line breaks and tabs inside strings must be escaped", i)
        i += 1
    raise QueryError("unterminated string; add a closing '\"'", start)


def _decode_string(raw: str, start: int) -> str:
    value: str = json.loads(raw)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise QueryError("string contains an unpaired \\u surrogate escape", start) from exc
    return value


def _number(text: str, i: int) -> Token:
    match = _NUMBER.match(text, i)
    end = match.end() if match else i
    if match is None or (end < len(text) and (text[end].isalnum() or text[end] in "._")):
        tail = _WORD.match(text, end)
        bad = text[i : tail.end() if tail else end + 1]
        raise QueryError(f"invalid number {bad!r}; numbers are JSON numbers like 3, -1.5, 2e3", i)
    return Token("number", match.group(), i)


_NOT_COMPARED_WHOLE: Final = (
    "values are true, false, null, numbers or strings: an array or object is not compared "
    "whole (test an element, a[0] = 1, or use contains)"
)


def _slash_inside_path(text: str, i: int) -> QueryError:
    """A '/' straight after a dotted path: a key holding '/', which needs quotes.

    Read as the start of a JSON pointer, `meta.extra/key~` was refused for its
    '~', which the user never meant as a pointer escape.
    """
    start = i
    while start and _WORD.fullmatch(text[start - 1]):
        start -= 1
    end = i
    while end < len(text) and text[end] not in _WHITESPACE and text[end] not in "=!<>()":
        end += 1
    key = text[start:end]
    if start == i:  # after ']' or a quoted key: no bare key to quote
        return QueryError(
            "a JSON pointer (/a/b) is a whole path; it cannot continue a dotted one", i
        )
    return QueryError(
        f"a key holding '/' must be quoted in a dotted path: {json.dumps(key)}", start
    )


def _pointer(text: str, i: int) -> Token:
    match = _POINTER.match(text, i)
    assert match is not None  # text[i] == "/" always matches
    bad = _BAD_POINTER_ESCAPE.search(match.group())
    if bad is not None:
        raise QueryError(
            "in a JSON pointer '~' must be written '~0' and '/' as '~1' ('~*' is any "
            "element, '~-1' the last)",
            i + bad.start(),
        )
    return Token("pointer", match.group(), i)


# --- parser ------------------------------------------------------------------


class _Parser:
    """Recursive descent over a token list; one instance parses one query."""

    def __init__(self, tokens: list[Token]) -> None:
        self._tokens = tokens
        self._index = 0
        self._comparisons = 0

    def parse(self) -> Expr:
        expr = self._or(depth=0)
        self.expect_end()
        return expr

    def expect_end(self) -> None:
        token = self._peek()
        if token.kind == ")":
            raise QueryError("unbalanced ')'", token.position)
        if token.kind != "eof":
            raise QueryError(
                f"unexpected {_describe(token)}; join comparisons with 'and' or 'or'",
                token.position,
            )

    def _peek(self) -> Token:
        return self._tokens[self._index]

    def _advance(self) -> Token:
        token = self._tokens[self._index]
        if token.kind != "eof":
            self._index += 1
        return token

    def _at_word(self, *words: str) -> bool:
        token = self._peek()
        return token.kind == "word" and token.text in words

    def _or(self, depth: int) -> Expr:
        operands = [self._and(depth)]
        while self._at_word("or"):
            self._advance()
            operands.append(self._and(depth))
        return operands[0] if len(operands) == 1 else Or(tuple(operands))

    def _and(self, depth: int) -> Expr:
        operands = [self._not(depth)]
        while self._at_word("and"):
            self._advance()
            operands.append(self._not(depth))
        return operands[0] if len(operands) == 1 else And(tuple(operands))

    def _not(self, depth: int) -> Expr:
        if self._at_word("not"):
            token = self._advance()
            _check_depth(depth + 1, token)
            return Not(self._not(depth + 1))
        return self._primary(depth)

    def _primary(self, depth: int) -> Expr:
        token = self._peek()
        if token.kind != "(":
            return self._comparison()
        self._advance()
        _check_depth(depth + 1, token)
        expr = self._or(depth + 1)
        closing = self._peek()
        if closing.kind != ")":
            if closing.kind == "eof":
                raise QueryError("unclosed '('", token.position)
            raise QueryError(f"expected ')' but found {_describe(closing)}", closing.position)
        self._advance()
        return expr

    def _comparison(self) -> Expr:
        start = self._peek()
        self._comparisons += 1
        if self._comparisons > MAX_COMPARISONS:
            raise QueryError(
                f"too many comparisons (the limit is {MAX_COMPARISONS})", start.position
            )
        scope: Scope = "final"
        if self._at_word("final", "ever"):
            scope_token = self._advance()
            scope = "ever" if scope_token.text == "ever" else "final"
            following = self._peek()
            if following.kind == "op" or following.text in ("contains", "exists", "missing"):
                raise QueryError(
                    f"'{scope_token.text}' is a keyword; to use it as a field name quote it: "
                    f'"{scope_token.text}"',
                    scope_token.position,
                )
        path = self.path()
        token = self._advance()
        if token.kind == "word" and token.text in ("exists", "missing"):
            return Presence(scope, path, token.text == "exists")
        if token.kind == "op" or (token.kind == "word" and token.text == "contains"):
            op: CompareOp = _as_op(token.text)
            value = self._value(token)
            if op in ORDERING_OPS and (value is None or isinstance(value, bool)):
                raise QueryError(
                    f"'{op}' compares numbers or strings, not {literal(value)}",
                    self._tokens[self._index - 1].position,
                )
            return Compare(scope, path, op, value)
        raise QueryError(
            f"expected an operator (= != < <= > >= contains exists missing) after the path "
            f"'{path}', found {_describe(token)}",
            token.position,
        )

    def path(self, *, allow_keyword: bool = False) -> Path:
        token = self._advance()
        if token.kind == "pointer":
            # The lexer has checked its escapes, so this cannot fail.
            return pattern_path(token.text)
        if token.kind == "word" and token.text in KEYWORDS and not allow_keyword:
            raise QueryError(
                f"expected a field path, found the keyword '{token.text}'; to use it as a "
                f'field name quote it: "{token.text}"',
                token.position,
            )
        if token.kind == "eof":
            raise QueryError("expected a field path, e.g. refund.eligible", token.position)
        tokens: list[PathToken] = [self._segment(token, after_dot=False)]
        while self._peek().kind in (".", "["):
            separator = self._advance()
            if separator.kind == "[":
                tokens.append(self._index_segment())
            else:
                tokens.append(self._segment(self._advance(), after_dot=True))
        return Path(tuple(tokens))

    def _segment(self, token: Token, *, after_dot: bool) -> PathToken:
        if token.kind == "string":
            return token.value
        if token.kind == "[" and not after_dot:
            return self._index_segment()
        if token.kind == "word" and IDENTIFIER.fullmatch(token.text):
            return token.text
        if token.kind == "*":
            raise QueryError(
                "any element is written in brackets: [*], e.g. items[*].sku", token.position
            )
        where = " after '.'" if after_dot else ""
        raise QueryError(
            f"expected a field name{where}, found {_describe(token)}; quote names that are "
            'not identifiers, e.g. metadata."extra/key"',
            token.position,
        )

    def _index_segment(self) -> PathToken:
        """An index after its '[' (already read): digits, `*` or `-1`, and the closing ']'."""
        token = self._advance()
        step: PathToken
        if token.kind == "*":
            step = ANY
        elif token.text == "-1":
            step = LAST
        elif token.kind == "number" and token.text.startswith("-") and INDEX.fullmatch(
            token.text[1:]
        ):
            raise QueryError(
                f"only [-1] (the last element) counts from the end; did you mean [-1] or "
                f"[*]? ([{token.text}] is not supported)",
                token.position,
            )
        elif token.kind != "number" or not INDEX.fullmatch(token.text):
            raise QueryError(
                "expected an array index inside '[ ]': 0, 1, 2, ..., * (any element) or "
                "-1 (the last)",
                token.position,
            )
        else:
            step = token.text
        closing = self._advance()
        if closing.kind != "]":
            raise QueryError("expected ']'", closing.position)
        return step

    def _value(self, op: Token) -> Scalar:
        token = self._advance()
        if token.kind == "string":
            return token.value
        if token.kind == "number":
            return _number_value(token)
        if token.kind == "word":
            return _word_value(token)
        if token.kind == "[":
            raise QueryError(_NOT_COMPARED_WHOLE, token.position)
        raise QueryError(
            f"expected a JSON value after '{op.text}', found {_describe(token)}", token.position
        )


def _check_depth(depth: int, token: Token) -> None:
    if depth > MAX_DEPTH:
        raise QueryError(f"nesting is too deep (the limit is {MAX_DEPTH} levels)", token.position)


def _as_op(text: str) -> CompareOp:
    ops: dict[str, CompareOp] = {
        "=": "=",
        "!=": "!=",
        "<": "<",
        "<=": "<=",
        ">": ">",
        ">=": ">=",
        "contains": "contains",
    }
    return ops[text]


def _number_value(token: Token) -> int | float:
    value: int | float = json.loads(token.text)
    # Floats are what the index stores; refuse what would overflow to infinity.
    try:
        as_float = float(value)
    except OverflowError:
        as_float = float("inf")
    if as_float in (float("inf"), float("-inf")):
        raise QueryError(f"number {token.text} is out of range", token.position)
    return value


def _word_value(token: Token) -> Scalar:
    literals: dict[str, Scalar] = {"true": True, "false": False, "null": None}
    if token.text in literals:
        return literals[token.text]
    if token.text.lower() in literals:
        raise QueryError(
            f"JSON literals are lowercase: did you mean {token.text.lower()}?", token.position
        )
    raise QueryError(
        f'expected a JSON value; write strings in double quotes: "{token.text}"',
        token.position,
    )


def _describe(token: Token) -> str:
    if token.kind == "eof":
        return "the end of the query"
    return f"'{token.text}'" if len(token.text) <= 40 else f"'{token.text[:37]}...'"


