"""The execution page's state tree: one state of the run as tokens for nested <details>.

Pure: a `History` in, frozen dataclasses out; every field links to its provenance, so
the tree works with JavaScript off. Bounded whatever the state's size or depth:
TREE_CHILDREN_SHOWN children a container (plus those on a changed or selected path),
about TREE_TOKENS tokens and MAX_RENDER_DEPTH levels, leaves cut at STRING_PREVIEW_CHARS.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

from collector.replay.history import History, StateUnavailableError
from collector.replay.jsondoc import (
    MISSING,
    JsonValue,
    Missing,
    json_equal,
    list_index,
    pointer_text,
    resolve,
    unescape_token,
)
from studio.inspect import Inspection
from studio.links import Links
from studio.render.bounded import MAX_RENDER_DEPTH
from studio.render.text import LINK_POINTER_CHARS, href, keys_text, leaf_text

TREE_CHILDREN_SHOWN: Final = 100
# Tokens past which only children on a changed or selected path are drawn.
TREE_TOKENS: Final = 3000

TokenKind: TypeAlias = Literal["open", "close", "leaf", "more", "deep"]


@dataclass(frozen=True, slots=True)
class Token:
    """One piece of the flattened JSON tree; the template turns these into nested <details>."""

    kind: TokenKind
    key: str
    pointer: str
    href: str
    summary: str
    value: str
    full: str | None
    value_type: str
    changed: bool
    expanded: bool


@dataclass(frozen=True, slots=True)
class StateView:
    available: bool
    reason: str
    sequence: int
    verified: bool
    recorded: bool
    tokens: tuple[Token, ...]
    json_href: str
    recorded_href: str | None
    replayed_href: str | None


def state_view(
    inspection: Inspection,
    links: Links,
    base: str,
    sequence: int,
    pointer: str | None,
    *,
    recorded: bool,
) -> StateView:
    """The state tree after `sequence`, or the producer's recorded end state when `recorded`.

    `recorded` falls back to the replayed state when no end state was recorded;
    `pointer` is the field whose path should start open.
    """
    history = inspection.history
    json_href = href(links.execution_api(inspection.run_id, "state"), sequence=sequence)
    recorded_end = history.recorded_end
    has_recorded = not isinstance(recorded_end, Missing)
    if recorded and not isinstance(recorded_end, Missing):
        changed = _changed_at(history, sequence)
        field_href = _field_href(links, inspection.run_id, sequence, state="recorded")
        tokens = tree_tokens(recorded_end, field_href, changed, pointer)
        return StateView(
            available=True, reason="", sequence=sequence, verified=False, recorded=True,
            tokens=tokens,
            # The recorded end state is served as `end` of the timeline JSON.
            json_href=links.execution_api(inspection.run_id, "timeline"),
            recorded_href=None, replayed_href=href(base, step=sequence, state="replayed"),
        )
    recorded_href = href(base, step=sequence, state="recorded") if has_recorded else None
    if not history.has_states:
        reason = (
            "States will be rebuilt when the workflow span arrives."
            if inspection.execution is None
            else "No state can be rebuilt: the start state is missing, withheld or unreadable."
        )
        return _unavailable(reason, sequence, json_href, recorded_href)
    try:
        state = history.state_at(sequence)
        verified = history.verified_at(sequence)
    except StateUnavailableError as exc:
        return _unavailable(str(exc), sequence, json_href, recorded_href=None)
    changed = _changed_at(history, sequence, state)
    return StateView(
        available=True, reason="", sequence=sequence, verified=verified, recorded=False,
        tokens=tree_tokens(
            state, _field_href(links, inspection.run_id, sequence), changed, pointer
        ),
        json_href=json_href, recorded_href=recorded_href, replayed_href=None,
    )


def _unavailable(
    reason: str, sequence: int, json_href: str, recorded_href: str | None
) -> StateView:
    return StateView(
        available=False, reason=reason, sequence=sequence, verified=False, recorded=False,
        tokens=(), json_href=json_href, recorded_href=recorded_href, replayed_href=None,
    )


def _changed_at(
    history: History, sequence: int, state: JsonValue | Missing = MISSING
) -> frozenset[str]:
    """The paths step `sequence` wrote; given its `state`, only those it left changed.

    JSON Patch's list diffs can write an index and put its value back in one
    step (add at 0, move the shifted element on), and a highlight there would
    contradict the field's provenance, which names no writer.
    """
    step = history.find_step(sequence)
    if step is None:
        return frozenset()
    if state is MISSING or not step.applied:
        return frozenset(step.changed_paths)
    before = history.peek_at(step.sequence - 1)
    return frozenset(
        path for path in step.changed_paths
        if not json_equal(_at(before, path), _at(state, path))
    )


def _at(doc: JsonValue, pointer: str) -> JsonValue | Missing:
    try:
        return resolve(doc, pointer)
    except ValueError:  # a path this step wrote that no document holds now
        return MISSING


def _field_href(
    links: Links, run_id: str, sequence: int, *, state: str | None = None
) -> Callable[[str], str]:
    """Where a field of the state after `sequence` links to: its provenance panel."""
    return lambda pointer: links.provenance(run_id, pointer, step=sequence, state=state)


def tree_tokens(
    value: JsonValue,
    field_href: Callable[[str], str],
    changed: frozenset[str],
    selected: str | None,
) -> tuple[Token, ...]:
    """The JSON value flattened into open/leaf/close tokens for nested <details>.

    `field_href` gives each field's link from its pointer.
    Containers along a changed or selected path start open (so the change is in
    view); others below the first level start closed. A container shows its
    first TREE_CHILDREN_SHOWN children plus any on a changed or selected path,
    with a "more" token for each run of children left out. The walk keeps its own
    stack: a container MAX_RENDER_DEPTH levels down is a "deep" token, and once
    TREE_TOKENS tokens are out only children on a changed or selected path are
    drawn, so any value costs a bounded page.
    """
    focus = {*changed, *([selected] if selected else [])}
    ctx = _Context(field_href, changed, focus)
    tokens: list[Token] = []
    pending: list[_Pending] = [("state", (), value)]
    while pending:
        item = pending.pop()
        if isinstance(item, Token):
            tokens.append(item)
            continue
        key, parts, node = item
        pending += reversed(_expand(tokens, key, parts, node, ctx))
    return tuple(tokens)


@dataclass(frozen=True, slots=True)
class _Context:
    field_href: Callable[[str], str]
    changed: frozenset[str]
    focus: set[str]


# A child still to walk (key, its path, its value), or a token ready to go out.
_Pending: TypeAlias = "tuple[str, tuple[str, ...], JsonValue] | Token"


def _expand(
    tokens: list[Token], key: str, parts: tuple[str, ...], value: JsonValue, ctx: _Context
) -> list[_Pending]:
    """Put out `value`'s own token; return what follows it in order (children, gaps, close)."""
    pointer = pointer_text(parts)
    link = ctx.field_href(pointer) if len(pointer) <= LINK_POINTER_CHARS else "#state"
    changed = pointer in ctx.changed
    if not isinstance(value, dict | list):
        text, full = leaf_text(value)
        tokens.append(
            Token("leaf", key, pointer, link, "", text, full, _type(value), changed, False)
        )
        return []
    summary = keys_text(len(value)) if isinstance(value, dict) else f"[{len(value):,}]"
    if len(parts) >= MAX_RENDER_DEPTH:
        tokens.append(
            Token("deep", key, pointer, link, summary, "", None, _type(value), changed, False)
        )
        return []
    on_focus = any(f == pointer or f.startswith(pointer + "/") for f in ctx.focus)
    expanded = len(parts) < 1 or on_focus
    tokens.append(
        Token("open", key, pointer, link, summary, "", None, _type(value), changed, expanded)
    )
    # Keys, not (key, child) pairs: a container of a million items is read only where drawn.
    keys: list[str] | range = list(value) if isinstance(value, dict) else range(len(value))
    budget_left = len(tokens) < TREE_TOKENS
    shown = _shown_children(keys, pointer, ctx.focus, TREE_CHILDREN_SHOWN if budget_left else 0)
    following: list[_Pending] = []
    previous = -1
    for position in shown:
        if position > previous + 1:
            following.append(_more(position - previous - 1))
        child_key = str(keys[position])
        child = value[child_key] if isinstance(value, dict) else value[position]
        following.append((child_key, (*parts, child_key), child))
        previous = position
    if previous < len(keys) - 1:
        following.append(_more(len(keys) - previous - 1))
    following.append(Token("close", key, pointer, "", "", "", None, "", False, False))
    return following


def _shown_children(
    keys: Sequence[str] | range, pointer: str, focus: Iterable[str], first: int
) -> list[int]:
    """The positions drawn: the `first` few, and any on a path in `focus`."""
    if len(keys) <= first:
        return list(range(len(keys)))
    wanted = set(range(first))
    prefix = pointer + "/"
    for target in focus:
        if target.startswith(prefix):
            position = _position(keys, unescape_token(target[len(prefix) :].split("/", 1)[0]))
            if position is not None:
                wanted.add(position)
    return sorted(wanted)


def _position(keys: Sequence[str] | range, head: str) -> int | None:
    """Where the child named `head` (an array index, or a member name) sits, if anywhere."""
    if isinstance(keys, range):
        index = list_index(head)
        return index if index is not None and index < len(keys) else None
    try:
        return keys.index(head)
    except ValueError:
        return None


def _more(count: int) -> Token:
    return Token("more", "", "", "", f"{count:,} more", "", None, "", False, False)


def _type(value: JsonValue) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "object" if isinstance(value, dict) else "array"


