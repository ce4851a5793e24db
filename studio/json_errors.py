"""The one shape of a JSON error the studio answers: `{"error": message, ...}`.

The API, the admin routes and the access gate all answer errors this way, so a
client reads every refusal the same: `error` says what to fix, and extra fields
say where (`parameter`, `position` for a filter).
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.responses import JSONResponse


def json_error(
    status: int, message: str, *, headers: Mapping[str, str] | None = None, **fields: object
) -> JSONResponse:
    return JSONResponse({"error": message, **fields}, status_code=status, headers=headers)
