"""Bounded admission shared by the transports: how many exports, and how many bytes, at once.

Invariant: past either bound a new export is refused (the transport answers
"retry after a delay") instead of queueing without limit, so the memory held by
exports in progress stays bounded whatever the exporters do. A single request
larger than the byte budget is still admitted when nothing else holds any:
the receive limit, not this, bounds one request.

A slot is taken only once a request's body has arrived: gRPC hands over whole
messages, and an OTLP/HTTP body in transit holds only the bytes it has sent
(`open_upload`, `try_grow`) until it is complete (`try_take_slot`). A client
sending slowly then holds memory it really filled, never a slot that
exporters sending at full speed are refused for.
"""

from __future__ import annotations

import threading
from typing import NamedTuple


class InFlight(NamedTuple):
    """What admission holds now: slots taken, bytes held, and who holds either."""

    requests: int
    bytes: int
    holders: int


class Admission:
    """Counts the requests and bytes being processed; safe to share between threads."""

    def __init__(self, max_requests: int, max_bytes: int) -> None:
        self._max_requests = max_requests
        self._max_bytes = max_bytes
        self._requests = 0
        self._bytes = 0
        self._holders = 0
        self._lock = threading.Lock()

    def try_enter(self, size: int) -> bool:
        """Take a slot and `size` bytes for a request whose body is here; `leave` after."""
        with self._lock:
            too_many_bytes = self._bytes + size > self._max_bytes and self._holders > 0
            if self._requests >= self._max_requests or too_many_bytes:
                return False
            self._requests += 1
            self._holders += 1
            self._bytes += size
            return True

    def open_upload(self) -> None:
        """Start holding bytes (none yet) for a body in transit; `leave` after, slot or not."""
        with self._lock:
            self._holders += 1

    def try_grow(self, extra: int) -> bool:
        """Add `extra` bytes to a holder's share, as its body arrives or inflates.

        The caller must already hold (`try_enter` or `open_upload`) and must
        later `leave` with its whole share, grown parts included.
        """
        with self._lock:
            # Alone, a request may grow up to the receive limit, as in try_enter.
            if self._bytes + extra > self._max_bytes and self._holders > 1:
                return False
            self._bytes += extra
            return True

    def try_take_slot(self) -> bool:
        """Take a slot for an upload (`open_upload`) whose body has arrived."""
        with self._lock:
            if self._requests >= self._max_requests:
                return False
            self._requests += 1
            return True

    def leave(self, size: int, *, slot: bool = True) -> None:
        """Give back `size` bytes, and the slot if one was taken."""
        with self._lock:
            self._requests -= 1 if slot else 0
            self._holders -= 1
            self._bytes -= size

    def in_flight(self) -> InFlight:
        with self._lock:
            return InFlight(self._requests, self._bytes, self._holders)
