"""The way back from a run to the executions list the user was reading, filter and all.

Each time the list renders it remembers its query string in a cookie, and the run
page's breadcrumb links back to it. A cookie, not a `from=` parameter: a run's page
has dozens of links that would each have to carry it, and a shared run address would
carry the sharer's filter. Where JavaScript runs, static/app.js keeps each tab's own
list in sessionStorage instead.

Invariant: the cookie is only a hint, parsed and re-encoded under the list's address,
so the breadcrumb can only name a page of the executions list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qsl, urlencode

from starlette.requests import Request
from starlette.responses import Response

from studio.links import Links

LIST_COOKIE: Final = "statetrail_list"
# A query longer than this (a long filter) is not remembered: the way back is then
# the whole list, as it is without a cookie. Browsers keep cookies up to ~4 KB.
MAX_QUERY_CHARS: Final = 2_000


@dataclass(frozen=True, slots=True)
class ListReturn:
    """The breadcrumb's way back: the list's address, and what it carries, in words."""

    href: str
    # "where: refund.eligible = true; status: error", or "" for the whole list.
    label: str


def remember_list(request: Request, response: Response) -> None:
    """Remember the list this request rendered, for the way back from a run's page."""
    links = Links.of(request)
    query = urlencode(parse_qsl(request.url.query))
    path = links.path("/")
    if not query or len(query) > MAX_QUERY_CHARS:
        if LIST_COOKIE in request.cookies:
            response.delete_cookie(LIST_COOKIE, path=path)
        return
    response.set_cookie(
        LIST_COOKIE, query, path=path, httponly=True, samesite="lax",
        secure=request.url.scheme == "https",
    )


def list_return(request: Request) -> ListReturn:
    """The list the user last read (the whole list if none, or the cookie is unusable)."""
    links = Links.of(request)
    pairs = parse_qsl(request.cookies.get(LIST_COOKIE, "")[:MAX_QUERY_CHARS])
    if not pairs:
        return ListReturn(links.executions(), "")
    label = "; ".join(f"{key}: {value}" for key, value in pairs)
    return ListReturn(f"{links.executions()}?{urlencode(pairs)}", label)
