"""Durations written as a whole number and a unit letter ('30d', '10m') -> integer nanoseconds.

Pure. Shared by the server's flags (`--retain`, `--prune-every`), `statetrail
prune --older-than` and its admin route, and the studio's relative times
(`since=15m`), so the same text means the same length of time everywhere.
Integer math only: a duration never passes through a float.
"""

from __future__ import annotations

import re
from typing import Final

_NANOS_PER_SECOND: Final = 1_000_000_000
_UNIT_SECONDS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
ALL_UNITS: Final = "smhdw"
# Retention takes no minutes: "6m" could be read as six months, and guessing
# wrong would delete nearly everything.
RETENTION_UNITS: Final = "hdw"

_DURATION = re.compile(r"\s*(\d+)\s*([a-z])\s*")


class DurationError(ValueError):
    """Text is not a duration in the accepted units; the message shows how to write one."""


def parse_duration(
    text: str,
    units: str = ALL_UNITS,
    *,
    allow_zero: bool = False,
    ignore_case: bool = True,
) -> int:
    """'30d' -> nanoseconds. `units` lists the accepted unit letters.

    Zero is refused unless `allow_zero` (a zero retention is a mistake; an age of zero
    is "now").
    """
    match = _DURATION.fullmatch(text.lower() if ignore_case else text)
    if (
        match is None
        or match.group(2) not in units
        or (int(match.group(1)) == 0 and not allow_zero)
    ):
        number = "whole number" if allow_zero else "positive whole number"
        raise DurationError(
            f"{text!r} is not a duration: write a {number} and one of the "
            f"units {', '.join(units)}, e.g. 30d"
        )
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2)] * _NANOS_PER_SECOND
