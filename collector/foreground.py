"""Interactive requests first: background work gives way while a page is served.

The studio, the receivers and the replayer share one interpreter lock, and under
full-rate ingest a studio page waited behind decoding and extraction
(bench/bench_studio_load.py). So studio requests mark themselves as foreground, and
CPU-heavy background steps wait while any is in progress, long loops checking again
between items. The wait is bounded: a busy studio slows ingest but never stops it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

# Long enough to cover a typical page; short enough that an exporter's RPC
# latency stays far below its timeout however busy the studio is.
MAX_YIELD_SECONDS = 0.25


class Foreground:
    """Counts interactive requests in progress; background work waits for none."""

    def __init__(self, max_yield_seconds: float = MAX_YIELD_SECONDS) -> None:
        self._max_yield = max_yield_seconds
        self._active = 0
        self._changed = threading.Condition()

    @contextmanager
    def serving(self) -> Iterator[None]:
        """Mark one interactive request as in progress for the duration."""
        with self._changed:
            self._active += 1
        try:
            yield
        finally:
            with self._changed:
                self._active -= 1
                if not self._active:
                    self._changed.notify_all()

    def give_way(self) -> float:
        """Wait (bounded) until no interactive request is in progress; seconds waited.

        Cheap when nothing is in progress (one attribute read, no lock), so
        background loops may call it per item.
        """
        if not self._active:
            return 0.0
        with self._changed:
            if not self._active:
                return 0.0
            began = time.monotonic()
            self._changed.wait_for(lambda: not self._active, self._max_yield)
            return time.monotonic() - began
