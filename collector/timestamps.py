"""Integer-nanosecond times written as RFC 3339 text, for JSON documents and pages.

Pure. Times travel as integer nanoseconds since the Unix epoch end to end;
this is where one becomes text, with integer math only, so no float ever
rounds a time away.
"""

from __future__ import annotations

from datetime import UTC, datetime


def rfc3339(unix_nano: int | None) -> str:
    """Nanoseconds as RFC 3339 UTC with microseconds; "" for None or 0 (not recorded)."""
    if not unix_nano:
        return ""
    seconds, nanos = divmod(unix_nano, 1_000_000_000)
    moment = datetime.fromtimestamp(seconds, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos // 1000:06d}Z"
