"""The compare page and its JSON twin: two runs side by side.

Thin handlers: pick the two run ids from the query string, inspect both, and
render what studio/render/compare.py (pure) builds from them. The page takes
`?a=RUN&b=RUN`, or `?run=X&run=Y` from the executions list's checkboxes.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from collector.replay.jsondoc import JsonValue, Missing
from studio.json_errors import json_error
from studio.render.bounded import json_preview
from studio.render.compare import Comparison, compare, comparison_json
from studio.render.text import DIFF_VALUE_CHARS
from studio.services import inspector_of
from studio.templating import templates


def compare_page(request: Request) -> Response:
    """Two runs side by side: `?a=RUN&b=RUN`, or `?run=X&run=Y` from the list's checkboxes."""
    a, b = _compare_ids(request)
    context: dict[str, object] = {"a": a, "b": b, "comparison": None, "json_text": json_text}
    if not a and not b:
        return _render(request, context, error=None)
    if not a or not b:
        message = "pick two runs to compare (tick two rows of the executions list)"
        return _render(request, context, error=message, status_code=400)
    comparison, missing = _load_comparison(request, a, b)
    if comparison is None:
        return _render(request, context, error=missing, status_code=404)
    return _render(request, {**context, "comparison": comparison}, error=None)


def compare_json(request: Request) -> Response:
    """The compare page's JSON twin: `/api/compare?a=RUN&b=RUN`."""
    a, b = _compare_ids(request)
    if not a or not b:
        return json_error(400, "give two run ids as ?a=RUN&b=RUN", parameter="a" if not a else "b")
    comparison, missing = _load_comparison(request, a, b)
    if comparison is None:
        return json_error(404, missing)
    return JSONResponse(comparison_json(comparison))


def json_text(value: JsonValue | Missing) -> str | None:
    """Compact JSON for a diff cell, cut at DIFF_VALUE_CHARS; None for a value absent there."""
    if isinstance(value, Missing):
        return None
    return json_preview(value, DIFF_VALUE_CHARS, sort_keys=True)


def _compare_ids(request: Request) -> tuple[str, str]:
    """The two run ids asked for; empty strings for those not given."""
    params = request.query_params
    picked = [run for run in params.getlist("run") if run]
    a = params.get("a", "").strip() or (picked[0] if picked else "")
    b = params.get("b", "").strip() or (picked[1] if len(picked) > 1 else "")
    return a, b


def _load_comparison(request: Request, a: str, b: str) -> tuple[Comparison | None, str]:
    """The comparison, or None and what is unknown (both ids when neither exists)."""
    inspector = inspector_of(request)
    first = inspector.inspect(a)
    second = inspector.inspect(b) if b != a else first
    unknown = [repr(run) for run, found in ((a, first), (b, second)) if found is None]
    if first is None or second is None:
        return None, f"no execution with id {' or '.join(dict.fromkeys(unknown))}"
    return compare(first, second), ""


def _render(
    request: Request, context: dict[str, object], *, error: str | None, status_code: int = 200
) -> Response:
    return templates.TemplateResponse(
        request, "compare.html", {**context, "error": error}, status_code=status_code
    )
