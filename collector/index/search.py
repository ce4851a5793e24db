"""Free-text search: the filter box's other language, for what users know of a run.

Text that is not a filter (collector/index/query.py) may be a search: terms split on
whitespace, `"quoted phrases"` kept whole, and `key:value` terms. A key is one of
SEARCH_KEYS (`status:failed`, `node:check_eligibility`, `error:"timed out"`) or else a
dotted state path (`customer.name:ada`: a string at that path of the end state contains
the value, or a number or boolean equals it). A bare term matches anything a run is
known by (collector/store/text_search.py says what). Every term must match. Text
with `=`, `<` or `>` outside quotes is a filter to fix, never a search.
This module only parses: it reads no store.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from collector.index.query import QueryError, parse_path

# Keys with a meaning of their own; any other key is a state path.
SEARCH_KEYS: Final = (
    "id", "trace", "workflow", "service", "status", "verdict", "kind", "node", "error",
    "correlation",
)  # fmt: skip
MAX_TERMS: Final = 16
# A key is a dotted name; anything else before a colon (`12:30`) is text.
_KEY: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True, slots=True)
class SearchTerm:
    """One term: `key` None for free text, a SEARCH_KEYS name, or `pointer` for a path."""

    value: str
    key: str | None = None
    # For a state path key: its JSON pointer (`customer.name` is `/customer/name`).
    pointer: str | None = None


@dataclass(frozen=True, slots=True)
class Search:
    terms: tuple[SearchTerm, ...]


def parse_search(text: str) -> Search:
    """Parse search text, or raise QueryError saying why it is not a search."""
    _reject_comparisons(text)
    terms: list[SearchTerm] = []
    i = 0
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        term, i = _term(text, i)
        terms.append(term)
    if not terms:
        raise QueryError("nothing to search for", 0)
    if len(terms) > MAX_TERMS:
        raise QueryError(f"at most {MAX_TERMS} terms", 0)
    return Search(tuple(terms))


def _reject_comparisons(text: str) -> None:
    """A comparison outside quotes means a filter was meant: its error is the one to fix.

    (`title == "x"` searched for would find nothing and hide the filter's "did you mean".)
    """
    quoted = False
    for i, char in enumerate(text):
        if char == '"':
            quoted = not quoted
        elif char in "=<>" and not quoted:
            raise QueryError(
                f"{char!r} outside quotes is a comparison; quote it to search for it", i
            )


def _term(text: str, start: int) -> tuple[SearchTerm, int]:
    """The term at `start` and where the next one may begin."""
    if text[start] == '"':
        value, end = _phrase(text, start)
        return SearchTerm(value), end
    end = start
    while end < len(text) and not text[end].isspace() and text[end] != '"':
        end += 1
    word = text[start:end]
    key, colon, rest = word.partition(":")
    # `https://...` is an address, not a key.
    if not colon or not _KEY.fullmatch(key) or rest.startswith("//"):
        if end < len(text) and text[end] == '"':
            raise QueryError("a quote inside a word; put a space before the phrase", end)
        return SearchTerm(word), end
    if rest == "" and end < len(text) and text[end] == '"':
        rest, end = _phrase(text, end)
    elif end < len(text) and text[end] == '"':
        raise QueryError("a quote inside a word; put a space before the phrase", end)
    if rest == "":
        raise QueryError(f'"{key}:" needs a value, e.g. {key}:x or {key}:"two words"', end)
    if key.lower() in SEARCH_KEYS:
        return SearchTerm(rest, key.lower()), end
    try:
        pointer = parse_path(key).pointer
    except QueryError:
        return SearchTerm(word), end
    return SearchTerm(rest, key, pointer), end


def _phrase(text: str, start: int) -> tuple[str, int]:
    """A quoted phrase's text (no escapes: search text is typed, not generated)."""
    close = text.find('"', start + 1)
    if close == -1:
        raise QueryError("this quote is never closed", start)
    if close == start + 1:
        raise QueryError("an empty phrase matches everything; remove it", start)
    return text[start + 1 : close], close + 1
