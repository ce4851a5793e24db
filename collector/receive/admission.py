"""Bounded admission shared by the transports: how many exports, and how many bytes, at once.

Invariant: past either bound a new export is refused (the transport answers
"retry after a delay") instead of queueing without limit, so the memory held by
exports in progress stays bounded whatever the exporters do. A single request
larger than the byte budget is still admitted when nothing else is in flight:
the receive limit, not this, bounds one request.
"""

from __future__ import annotations

import threading


class Admission:
    """Counts the requests and bytes being processed; safe to share between threads."""

    def __init__(self, max_requests: int, max_bytes: int) -> None:
        self._max_requests = max_requests
        self._max_bytes = max_bytes
        self._requests = 0
        self._bytes = 0
        self._lock = threading.Lock()

    def try_enter(self, size: int) -> bool:
        with self._lock:
            too_many_bytes = self._bytes + size > self._max_bytes and self._requests > 0
            if self._requests >= self._max_requests or too_many_bytes:
                return False
            self._requests += 1
            self._bytes += size
            return True

    def try_grow(self, extra: int) -> bool:
        """Add `extra` bytes to an admitted request's share, e.g. as a body inflates.

        The caller must already be inside (`try_enter` returned True) and must
        later `leave` with its whole share, grown parts included.
        """
        with self._lock:
            # Alone in flight, a request may grow up to the receive limit, as in try_enter.
            if self._bytes + extra > self._max_bytes and self._requests > 1:
                return False
            self._bytes += extra
            return True

    def leave(self, size: int) -> None:
        with self._lock:
            self._requests -= 1
            self._bytes -= size
