"""Turning a request's query string into an ExecutionQuery, with errors users can fix.

Shared by the HTML pages and their JSON twins, so a URL means the same thing
in both. Every filter lives in the URL, so a view can be shared by copying it.
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Final

from collector.durations import DurationError, parse_duration
from collector.index.query import QueryError, parse_path, parse_query
from collector.index.query_ast import And, Expr
from collector.index.search import Search, parse_search
from collector.store.listing import (
    SORT_COLUMNS,
    ExecutionQuery,
    ExecutionRow,
    SortKey,
    sort_value,
)

DEFAULT_LIMIT: Final = 50
MAX_LIMIT: Final = 500
NANOS: Final = 1_000_000_000


class BadParameter(ValueError):
    """A query-string parameter is malformed; `name` says which."""

    def __init__(self, name: str, message: str, position: int | None = None) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message
        self.position = position


def execution_query(
    params: Mapping[str, str], *, now_unix_nano: int | None = None, search_where: bool = False
) -> ExecutionQuery:
    """Parse `where`, `q`, facets, time range, `limit` and `cursor`; raise BadParameter.

    `where` is the filter language only; `q` is a filter if it parses as one, else a
    search (`filter_or_search`). The studio's box sends `where`, and its page reads it
    as `q` (`search_where`), so what a user types is never refused for not being a filter.
    """
    now = time.time_ns() if now_unix_nano is None else now_unix_nano
    sort, descending = parse_sort(params.get("sort", ""))
    where: Expr | None = None
    text: Search | None = None
    where_text = params.get("where", "").strip()
    if where_text and search_where:
        where, text = filter_or_search("where", where_text)
    elif where_text:
        try:
            where = parse_query(where_text)
        except QueryError as exc:
            raise BadParameter("where", exc.message, exc.position) from exc
    q_text = params.get("q", "").strip()
    if q_text:
        q_where, q_search = filter_or_search("q", q_text)
        where = q_where if where is None or q_where is None else And((where, q_where))
        if q_search is not None:
            text = Search((*text.terms, *q_search.terms)) if text else q_search
    return ExecutionQuery(
        where=where,
        text=text,
        workflow=params.get("workflow") or None,
        service=params.get("service") or None,
        status=params.get("status") or None,
        verdict=params.get("verdict") or None,
        kind=params.get("kind") or None,
        # Matched whole, as stored: an id may begin or end with a space.
        correlation=params.get("correlation") or None,
        # Ids are stored as lowercase hex; a trace id pasted from elsewhere may not be.
        trace_id=params.get("trace", "").strip().lower() or None,
        store_id=params.get("store", "").strip() or None,
        since_unix_nano=parse_time("since", params.get("since", ""), now),
        until_unix_nano=parse_time("until", params.get("until", ""), now),
        limit=parse_limit(params.get("limit", "")),
        after=decode_cursor(params.get("cursor", ""), sort, descending),
        sort=sort,
        descending=descending,
    )


def filter_or_search(name: str, text: str) -> tuple[Expr | None, Search | None]:
    """`text` as a filter if it parses as one, else as a search; raise BadParameter
    saying what both tried (at the filter's error position)."""
    try:
        return parse_query(text), None
    except QueryError as not_filter:
        try:
            return None, parse_search(text)
        except QueryError as not_search:
            message = (
                f"not a filter: {not_filter}; not a search: {not_search}"
            )
            raise BadParameter(name, message, not_filter.position) from not_search


def is_filter(text: str) -> bool:
    """Whether `text` parses in the filter language."""
    try:
        parse_query(text)
    except QueryError:
        return False
    return True


DEFAULT_SORT: Final = "-started"


def parse_sort(text: str) -> tuple[SortKey, bool]:
    """(key, descending): `started`, `duration` or `transitions`; a leading `-` is highest first."""
    text = text.strip() or DEFAULT_SORT
    key = text.removeprefix("-")
    for sort in SORT_COLUMNS:
        if sort == key:
            return sort, text.startswith("-")
    choices = ", ".join(f"{name} or -{name}" for name in SORT_COLUMNS)
    raise BadParameter("sort", f"must be one of {choices}")


def parse_limit(text: str) -> int:
    if not text:
        return DEFAULT_LIMIT
    try:
        value = int(text)
    except ValueError as exc:
        raise BadParameter("limit", "must be a whole number") from exc
    if not 1 <= value <= MAX_LIMIT:
        raise BadParameter("limit", f"must be between 1 and {MAX_LIMIT}")
    return value


def parse_time(name: str, text: str, now_unix_nano: int) -> int | None:
    """RFC 3339 (`2026-11-30T10:00:00Z`), or an age such as `15m`, `24h`, `7d`."""
    text = text.strip()
    if not text:
        return None
    age = _age(text)
    if age is not None:
        return now_unix_nano - age
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise BadParameter(
            name, "use an RFC 3339 time (2026-11-30T10:00:00Z) or an age like 15m, 24h, 7d"
        ) from exc
    if moment.tzinfo is None:
        raise BadParameter(name, "give a time zone, e.g. a trailing Z for UTC")
    whole = int(moment.timestamp())
    return whole * NANOS + moment.microsecond * 1000


def _age(text: str) -> int | None:
    """An age such as `15m` in nanoseconds, or None when `text` is not one.

    Unlike the server's flags, an age may be zero (`0m` is now), and its unit
    is lower case only, as this parameter has always been written.
    """
    try:
        return parse_duration(text, allow_zero=True, ignore_case=False)
    except DurationError:
        return None


def next_cursor(found: Sequence[ExecutionRow], query: ExecutionQuery) -> str | None:
    """The cursor of the page after this one, or None on the last page.

    `found` is what the store answered: one row more than `query.limit` says
    there is a next page, which starts after the last row shown. The cursor
    carries that row's sort value and run id, and the order it was made for.
    """
    if len(found) <= query.limit:
        return None
    last = found[query.limit - 1]
    order = _order_text(query.sort, query.descending)
    raw = f"{order}:{sort_value(last, query.sort)}:{last.run_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(text: str, sort: SortKey, descending: bool) -> tuple[int, str] | None:
    """(sort value, run id) of the previous page's last row; raise BadParameter.

    A cursor holds a value of the order it was made for (a duration, say), so
    one made for another order is refused rather than misread as a start time.
    """
    if not text:
        return None
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
        order, value, run_id = raw.split(":", 2)
        after = int(value), run_id
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise BadParameter("cursor", "not a cursor this server gave out") from exc
    if order != _order_text(sort, descending):
        raise BadParameter(
            "cursor", f"made for sort={order}, not for this order; start again from the first page"
        )
    return after


def _order_text(sort: SortKey, descending: bool) -> str:
    """An order as `sort=` spells it: `-duration` is longest first."""
    return f"-{sort}" if descending else sort


def pointer_param(text: str) -> str:
    """A JSON pointer, or a dotted path like `refund.eligible` / `items[2]`, as a pointer.

    Raises QueryError for a dotted path that does not parse.
    """
    if text == "" or text.startswith("/"):
        return text
    return parse_path(text).pointer
