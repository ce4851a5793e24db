"""`wait_until`: the one way the tests wait for something another thread or process does.

A condition is polled until it holds, and its value is returned; on timeout the test
fails with what it waited for and the last value seen. Timeouts are sized for a busy
2-core CI machine: a passing run rarely waits more than a fraction of them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T],
    *,
    timeout: float,
    interval: float = 0.05,
    what: str,
    until: Callable[[T], object] = bool,
) -> T:
    """Call `condition` every `interval` seconds until `until(value)` is true (by default
    the value itself); return that value.

    It is called once more after the deadline, so a slow last sleep cannot fail a
    condition that has become true meanwhile.
    """
    deadline = time.monotonic() + timeout
    while True:
        expired = time.monotonic() >= deadline
        value = condition()
        if until(value):
            return value
        if expired:
            raise AssertionError(
                f"timed out after {timeout:g} s waiting for {what}; last seen: {value!r}"
            )
        time.sleep(interval)
