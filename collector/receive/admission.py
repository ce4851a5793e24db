"""Bounded admission shared by the transports: how many exports, and how many bytes, at once.

Invariant: past either bound a new export is refused with a retry delay instead of
queueing, so exports in progress hold bounded memory (a lone request larger than the
byte budget is still admitted: the receive limit bounds one request). A slot is taken
only once a body has arrived, so a slow sender holds the bytes it really sent, never a
slot fast exporters are refused for; and no party (address, key: `Client`) may hold
more than `client_share` of the bytes.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import NamedTuple, TypeAlias

# The parties one holder counts against, e.g. ("address 10.0.0.5", "key 3f2a...").
Client: TypeAlias = tuple[str, ...]
NO_CLIENT: Client = ()


def client_of(address: str | None, key_digest: str | None) -> Client:
    """The parties a request from `address` with this key (its digest, if any) speaks for."""
    parties = []
    if address:
        parties.append(f"address {address}")
    if key_digest:
        parties.append(f"key {key_digest}")
    return tuple(parties)


class InFlight(NamedTuple):
    """What admission holds now: slots taken, bytes held, and who holds either."""

    requests: int
    bytes: int
    holders: int


@dataclass(slots=True)
class _Holding:
    requests: int = 0
    bytes: int = 0
    holders: int = 0

    def refuses(
        self, max_requests: int, max_bytes: float, *, extra: int, slot: bool, new_holder: bool
    ) -> bool:
        """Whether taking a slot (if `slot`) and `extra` more bytes would cross a bound.

        Past the byte bound only when others hold bytes too: a lone holder may
        grow to the receive limit.
        """
        others = self.holders - (0 if new_holder else 1)
        return (slot and self.requests >= max_requests) or (
            extra > 0 and self.bytes + extra > max_bytes and others > 0
        )

    def add(self, *, requests: int, size: int, holders: int) -> None:
        self.requests += requests
        self.bytes += size
        self.holders += holders


class Admission:
    """Counts the requests and bytes being processed; safe to share between threads."""

    def __init__(self, max_requests: int, max_bytes: int, client_share: float = 1.0) -> None:
        self._max_requests = max_requests
        self._max_bytes = max_bytes
        self._client_bytes = max_bytes * client_share
        self._total = _Holding()
        self._parties: dict[str, _Holding] = {}
        self._lock = threading.Lock()

    def try_enter(self, size: int, client: Client = NO_CLIENT) -> bool:
        """Take a slot and `size` bytes for a request whose body is here; `leave` after."""
        with self._lock:
            if self._refuses(client, extra=size, slot=True, new_holder=True):
                return False
            self._add(client, requests=1, size=size, holders=1)
            return True

    def open_upload(self, client: Client = NO_CLIENT) -> None:
        """Start holding bytes (none yet) for a body in transit; `leave` after, slot or not."""
        with self._lock:
            self._add(client, requests=0, size=0, holders=1)

    def try_grow(self, extra: int, client: Client = NO_CLIENT) -> bool:
        """Add `extra` bytes to a holder's share, as its body arrives or inflates.

        The caller must already hold (`try_enter` or `open_upload`) and must
        later `leave` with its whole share, grown parts included.
        """
        with self._lock:
            if self._refuses(client, extra=extra, slot=False, new_holder=False):
                return False
            self._add(client, requests=0, size=extra, holders=0)
            return True

    def try_take_slot(self, client: Client = NO_CLIENT) -> bool:
        """Take a slot for an upload (`open_upload`) whose body has arrived."""
        with self._lock:
            if self._refuses(client, extra=0, slot=True, new_holder=False):
                return False
            self._add(client, requests=1, size=0, holders=0)
            return True

    def leave(self, size: int, client: Client = NO_CLIENT, *, slot: bool = True) -> None:
        """Give back `size` bytes, and the slot if one was taken."""
        with self._lock:
            self._add(client, requests=-1 if slot else 0, size=-size, holders=-1)
            for party in client:
                if not self._parties[party].holders:
                    del self._parties[party]

    def in_flight(self) -> InFlight:
        with self._lock:
            return InFlight(self._total.requests, self._total.bytes, self._total.holders)

    def _refuses(self, client: Client, *, extra: int, slot: bool, new_holder: bool) -> bool:
        if self._total.refuses(
            self._max_requests, self._max_bytes, extra=extra, slot=slot, new_holder=new_holder
        ):
            return True
        return any(
            self._parties[party].refuses(
                self._max_requests, self._client_bytes,
                extra=extra, slot=False, new_holder=new_holder,
            )
            for party in client
            if party in self._parties
        )  # fmt: skip

    def _add(self, client: Client, *, requests: int, size: int, holders: int) -> None:
        self._total.add(requests=requests, size=size, holders=holders)
        for party in client:
            self._parties.setdefault(party, _Holding()).add(
                requests=requests, size=size, holders=holders
            )
