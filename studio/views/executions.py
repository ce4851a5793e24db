"""The executions list: thin handlers that parse the request, ask the store, render.

The page keeps every filter in the URL and builds every link from the current
query string, so a view can be shared by copying its address and works without
JavaScript. With htmx present, the filter form and facet links ask for the
`#results` partial only (`HX-Target: results`); the server answers with the
same data rendered without the layout. (The compare page is
studio/views/compare.py; the execution page studio/views/execution.py.)
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Final, Literal
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from collector.index.query import QueryError
from collector.producers.junjo import APPLICATION_RUN_SUFFIX
from collector.store import Store
from collector.store.in_flight import InFlightRow
from collector.store.listing import (
    SORT_COLUMNS,
    ExecutionQuery,
    ExecutionRow,
    FacetName,
    SortKey,
)
from studio.links import Links
from studio.params import (
    DEFAULT_SORT,
    BadParameter,
    execution_query,
    is_filter,
    next_cursor,
)
from studio.render.field_columns import (
    Cell,
    Hint,
    ValueColumn,
    empty_hints,
    value_cells,
    value_columns,
)
from studio.render.list_return import remember_list
from studio.render.suggestions import NO_HELP, FieldHelp
from studio.services import services_of, store_of, suggestions_of
from studio.templating import templates

FACETS: Final[tuple[FacetName, ...]] = ("workflow", "service", "status", "verdict", "kind")
TIME_PRESETS: Final = ("15m", "1h", "24h", "7d")
# Exact-match filters that come from links (a run's correlation id, trace or store).
LINK_FILTERS: Final = ("correlation", "trace", "store")
# Order of the parameters in the links we build, so equal views get equal URLs.
FILTER_KEYS: Final = ("where", "q", *FACETS, *LINK_FILTERS, "since", "until", "limit", "sort")
# The filters the form carries as hidden fields (it has inputs for the others).
HIDDEN_FILTER_KEYS: Final = ("q", *FACETS, *LINK_FILTERS, "limit", "sort")
RESULTS_TARGET: Final = "results"
IN_FLIGHT_SHOWN: Final = 20
# A trace id as OTLP tools print it; run ids are looked up as typed.
TRACE_ID: Final = re.compile(r"[0-9a-fA-F]{32}")
MAX_ID_LENGTH: Final = 256
# A shorter start of a run id is too likely to name several runs, or a word.
MIN_ID_PREFIX: Final = 6


@dataclass(frozen=True, slots=True)
class FacetValue:
    value: str
    count: int
    selected: bool
    href: str


@dataclass(frozen=True, slots=True)
class Facet:
    name: str
    values: tuple[FacetValue, ...]


@dataclass(frozen=True, slots=True)
class Link:
    label: str
    href: str
    selected: bool = False


@dataclass(frozen=True, slots=True)
class SortLink:
    """A sortable column's header: where a click goes, and how it sorts now (or None)."""

    href: str
    order: Literal["ascending", "descending"] | None


@dataclass(frozen=True, slots=True)
class Order:
    """How the list is ordered, in words: "newest" first, then "older" on the next page."""

    first: str
    next: str


ORDERS: Final[dict[tuple[SortKey, bool], Order]] = {
    ("started", True): Order("newest", "older"),
    ("started", False): Order("oldest", "newer"),
    ("duration", True): Order("longest", "shorter"),
    ("duration", False): Order("shortest", "longer"),
    ("transitions", True): Order("most transitions", "fewer"),
    ("transitions", False): Order("fewest transitions", "more"),
}


@dataclass(frozen=True, slots=True)
class FilterError:
    """A parameter the user must fix; `caret` marks the spot in a `where` query."""

    parameter: str
    message: str
    caret: str | None


@dataclass(frozen=True, slots=True)
class ExecutionsView:
    """What the executions page and its partial render."""

    filters: dict[str, str]
    # The list's address, which the filter chips and time presets change a filter of.
    base_href: str
    api_href: str
    rows: tuple[ExecutionRow, ...] = ()
    in_flight: tuple[InFlightRow, ...] = ()
    facets: tuple[Facet, ...] = ()
    older_href: str | None = None
    newest_href: str | None = None
    error: FilterError | None = None
    onboarding: bool = False
    # For a `where` filter: each run's end value of the paths it tests, and the
    # link from a run to the first path's provenance; hints when nothing matched.
    columns: tuple[ValueColumn, ...] = ()
    cells: dict[str, tuple[Cell, ...]] = field(default_factory=dict)
    hints: tuple[Hint, ...] = ()
    # Runs in scope whose field index is truncated: the `where` answer may be wrong for them.
    partly_indexed: int = 0
    # How many runs match in all (every page), when known.
    total: int | None = None
    sorts: dict[str, SortLink] = field(default_factory=dict)
    order: Order = ORDERS[("started", True)]
    # The paths the newest runs have, for the filter box's help and suggestions.
    field_help: FieldHelp = NO_HELP
    # When the page was made, for telling which in-flight runs went quiet.
    now_unix_nano: int = field(default_factory=time.time_ns)

    @property
    def active(self) -> tuple[Link, ...]:
        """One removable chip per filter in effect (Datasette's "x" links)."""
        base, filters = self.base_href, self.filters
        return tuple(
            Link(f"{key}: {filters[key]}", link(base, filters, **{key: ""}), True)
            for key in ("where", "q", *FACETS, *LINK_FILTERS, "since", "until")
            if filters.get(key)
        )

    @property
    def presets(self) -> tuple[Link, ...]:
        """The time range's shortcuts: the last 15 minutes ... all time."""
        base, filters = self.base_href, self.filters
        since, until = filters.get("since", ""), filters.get("until", "")
        presets = [
            Link(f"last {age}", link(base, filters, since=age, until=""),
                 since == age and not until)
            for age in TIME_PRESETS
        ]
        everything = link(base, filters, since="", until="")
        presets.append(Link("all time", everything, not since and not until))
        return tuple(presets)


def executions_page(request: Request) -> Response:
    filters = current_filters(request.query_params)
    links = Links.of(request)
    store = store_of(request)
    text = filters["where"].strip()
    if text and not is_filter(text):
        # Not a filter, but maybe an id pasted into the box (Jaeger's trace look-up);
        # else a search.
        destination = _id_lookup(store, links, text)
        if destination is not None:
            return _go_to(request, destination)
    try:
        query = execution_query(request.query_params, search_where=True)
    except BadParameter as exc:
        view = _empty_view(
            request, links, filters, error=filter_error(exc, filters),
            field_help=suggestions_of(request).help(store, filters["workflow"] or None),
        )
        return _render_executions(request, view, status_code=400)
    return _render_executions(request, _executions_view(request, links, store, filters, query))


# --- the executions view model ---------------------------------------------------------


def current_filters(params: Mapping[str, str]) -> dict[str, str]:
    """The filters in the URL, as given (so the form shows what the user typed)."""
    return {key: params.get(key, "") for key in FILTER_KEYS}


def link(base: str, filters: Mapping[str, str], **changes: str) -> str:
    """`base` with the filters plus `changes`; an empty value drops a parameter."""
    merged = {**filters, **changes}
    pairs = [(key, merged[key]) for key in (*FILTER_KEYS, "cursor") if merged.get(key)]
    return f"{base}?{urlencode(pairs)}" if pairs else base


def facet(
    name: FacetName, counts: list[tuple[str, int]], filters: Mapping[str, str], base: str
) -> Facet:
    """A facet's values as links that add the filter, or remove it when it is on."""
    chosen = filters.get(name, "")
    values = tuple(
        FacetValue(
            value,
            count,
            value == chosen,
            link(base, filters, **{name: "" if value == chosen else value}),
        )
        for value, count in counts
    )
    return Facet(name, values)


def filter_error(exc: BadParameter, filters: Mapping[str, str]) -> FilterError:
    caret = None
    if exc.name in ("where", "q") and exc.position is not None:
        text = filters.get(exc.name, "").strip()
        # render() ends with the message, which the page shows on its own line.
        caret = QueryError(exc.message, exc.position).render(text).rsplit("\n", 1)[0]
    return FilterError(exc.name, exc.message, caret)


def _executions_view(
    request: Request, links: Links, store: Store, filters: dict[str, str], query: ExecutionQuery
) -> ExecutionsView:
    """One page of runs with its facets, sort links and paging links."""
    base = links.executions()
    found = store.search(query)
    rows = tuple(found[: query.limit])
    first_page = query.after is None
    in_flight = (
        tuple(store.in_flight(limit=IN_FLIGHT_SHOWN, matching=query)) if first_page else ()
    )
    if not rows and not in_flight and not any(filters.values()) and first_page:
        return _empty_view(request, links, filters, onboarding=store.counts()["executions"] == 0)
    facet_counts = store.facets(query, FACETS)
    columns = value_columns(query.where)
    hints = empty_hints(store, query.where, filters["where"].strip()) if not rows else ()
    cursor = next_cursor(found, query)
    return ExecutionsView(
        filters=filters,
        base_href=base,
        api_href=_api_href(request, filters),
        rows=rows,
        in_flight=in_flight,
        facets=tuple(facet(name, counts, filters, base) for name, counts in facet_counts.items()),
        older_href=link(base, filters, cursor=cursor) if cursor else None,
        newest_href=None if first_page else link(base, filters),
        # Every run has exactly one kind, so the kind facet's counts add up to the total.
        total=sum(count for _, count in facet_counts["kind"]),
        sorts=_sort_links(base, filters, query),
        order=ORDERS[(query.sort, query.descending)],
        columns=columns,
        cells=value_cells(store, rows, columns),
        hints=tuple(
            replace(hint, href=link(base, filters, where=hint.replacement))
            if hint.replacement
            else hint
            for hint in hints
        ),
        partly_indexed=store.partly_indexed(query) if query.where is not None else 0,
        field_help=suggestions_of(request).help(store, query.workflow),
    )


def _empty_view(
    request: Request,
    links: Links,
    filters: dict[str, str],
    *,
    error: FilterError | None = None,
    onboarding: bool = False,
    field_help: FieldHelp = NO_HELP,
) -> ExecutionsView:
    """The page without results: a filter to fix, or a store with nothing to list yet."""
    return ExecutionsView(
        filters=filters,
        base_href=links.executions(),
        api_href=_api_href(request, filters),
        error=error,
        onboarding=onboarding,
        field_help=field_help,
    )


def _api_href(request: Request, filters: Mapping[str, str]) -> str:
    """This page's JSON twin: the same filters and cursor.

    The API's `where` is the filter language only, so a search typed in the box goes as `q`.
    """
    api = request.url_for("api_executions").path
    where = filters.get("where", "").strip()
    if where and not is_filter(where):
        typed = " ".join(filter(None, (filters.get("q", ""), where)))
        filters = {**filters, "where": "", "q": typed}
    return link(api, filters, cursor=request.query_params.get("cursor", ""))


def _sort_links(
    base: str, filters: Mapping[str, str], query: ExecutionQuery
) -> dict[str, SortLink]:
    """Each sortable column's header link: highest first, or reversed when already so."""
    links: dict[str, SortLink] = {}
    for key in SORT_COLUMNS:
        current = query.sort == key
        wanted = key if current and query.descending else f"-{key}"
        order: Literal["ascending", "descending"] | None = None
        if current:
            order = "descending" if query.descending else "ascending"
        # A new order starts at its first page; the default order has no parameter.
        href = link(base, filters, sort="" if wanted == DEFAULT_SORT else wanted, cursor="")
        links[key] = SortLink(href, order)
    return links


def _is_partial(request: Request) -> bool:
    headers = request.headers
    return (
        headers.get("hx-request") == "true"
        and headers.get("hx-target") == RESULTS_TARGET
        # htmx restoring history after a cache miss needs the whole page.
        and headers.get("hx-history-restore-request") != "true"
    )


def _id_lookup(store: Store, links: Links, text: str) -> str | None:
    """Where a run id or a trace id typed in the filter box leads, if it names stored runs.

    A run in flight (its owner span not arrived) has a page too. The first
    MIN_ID_PREFIX or more characters of one stored run's id lead to it as well.
    """
    if not text or len(text) > MAX_ID_LENGTH:
        return None
    if store.execution_row(text) is not None or store.in_flight(limit=1, run_id=text):
        return links.execution(text)
    if TRACE_ID.fullmatch(text):
        trace_id = text.lower()
        if store.search(ExecutionQuery(trace_id=trace_id, limit=1)):
            return links.executions(trace=trace_id)
    if len(text) >= MIN_ID_PREFIX:
        # The start of a run id (as the list shows it cut short): only if it names one run.
        found = store.run_ids_starting(text, limit=4)
        # An agent's id starts its application-store run's too: the agent is meant.
        suffix = APPLICATION_RUN_SUFFIX
        named = [i for i in found if not (i.endswith(suffix) and i.removesuffix(suffix) in found)]
        # Four found may mean more not read: then it is not known to name one run.
        if len(named) == 1 and len(found) < 4:
            return links.execution(named[0])
    return None


def _go_to(request: Request, location: str) -> Response:
    """Navigate the browser: htmx would swap a redirect's page into #results instead."""
    if request.headers.get("hx-request") == "true":
        return Response(status_code=200, headers={"HX-Redirect": location})
    return RedirectResponse(location, status_code=303)


def _render_executions(
    request: Request, view: ExecutionsView, *, status_code: int = 200
) -> Response:
    services = services_of(request)
    partial = _is_partial(request)
    response = templates.TemplateResponse(
        request,
        "_executions_table.html" if partial else "executions.html",
        {
            "view": view,
            "partial": partial,
            "hidden_filter_keys": HIDDEN_FILTER_KEYS,
            "grpc_address": f"{services.config.host}:{services.config.grpc_port}",
            "keys_required": services.write_side.keys_required,
        },
        status_code=status_code,
    )
    # The same URL answers with a page or a fragment; caches must keep them apart.
    response.headers["vary"] = "HX-Request, HX-Target"
    if status_code == 200:
        remember_list(request, response)
    return response
