"""The sign-in throttle: how many wrong passwords the studio listens to, and from whom.

One throttle counts every check of the studio password, form or Bearer, so neither
way is cheaper. Two budgets: per address (a lockout growing from a sixteenth of the
window, doubling up to it) and global (past it, only addresses that signed in before
may try), the latter against an attacker rotating addresses. While refused, a password
is not checked at all, the right one included: a lockout that still answered would be
no lockout. Every lockout ends within one window; at most `MAX_ADDRESSES` addresses
are remembered. The rules, for operators: docs/security.md, "The sign-in throttle".
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

MAX_ADDRESSES: Final = 10_000
MAX_KNOWN_ADDRESSES: Final = 1_000
# How long a right password vouches for its address (as long as a session lasts).
KNOWN_ADDRESS_SECONDS: Final = 12 * 3600.0
# The first lockout is this fraction of the window; each further one doubles it.
FIRST_LOCKOUT_FRACTION: Final = 1 / 16


@dataclass(slots=True)
class _Address:
    failures: int
    last_failure: float
    locked_until: float


@dataclass(frozen=True, slots=True)
class Refusal:
    """A sign-in refused without checking the password, and for how long."""

    retry_after_seconds: int
    reason: str


class LoginThrottle:
    """Counts wrong passwords per client address and overall; says when to refuse."""

    def __init__(
        self,
        *,
        address_failures: int,
        global_failures: int,
        window_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._address_failures = address_failures
        self._window = window_seconds
        self._clock = clock
        self._addresses: OrderedDict[str, _Address] = OrderedDict()
        # The times of the last `global_failures` wrong passwords, from anywhere.
        self._recent: deque[float] = deque(maxlen=global_failures)
        # Addresses that gave the right password, with when they last did.
        self._known: OrderedDict[str, float] = OrderedDict()

    def refusal(self, address: str) -> Refusal | None:
        """Why a password from `address` must not be checked now, or None if it may be."""
        now = self._clock()
        entry = self._addresses.get(address)
        if entry is not None and entry.locked_until > now:
            return Refusal(_whole_seconds(entry.locked_until - now),
                           "too many wrong passwords from this address")
        if self._global_budget_spent(now) and not self._is_known(address, now):
            return Refusal(_whole_seconds(self._recent[0] + self._window - now),
                           "too many wrong passwords from everywhere")
        return None

    def failed(self, address: str) -> None:
        """Count a wrong password from `address`."""
        now = self._clock()
        self._recent.append(now)
        self._forget_quiet(now)
        entry = self._addresses.pop(address, None)
        if entry is None or self._quiet(entry, now):
            entry = _Address(0, now, 0.0)
        entry.failures += 1
        entry.last_failure = now
        beyond = entry.failures - self._address_failures
        if beyond >= 0:
            entry.locked_until = now + self._lockout_seconds(beyond)
        self._addresses[address] = entry
        while len(self._addresses) > MAX_ADDRESSES:
            self._addresses.popitem(last=False)

    def succeeded(self, address: str) -> None:
        """The right password came from `address`: clear its count and remember it."""
        now = self._clock()
        self._addresses.pop(address, None)
        self._known.pop(address, None)
        self._known[address] = now
        while len(self._known) > MAX_KNOWN_ADDRESSES:
            self._known.popitem(last=False)

    @property
    def addresses_remembered(self) -> int:
        """How many addresses the throttle holds a count for (bounded by MAX_ADDRESSES)."""
        return len(self._addresses)

    def _lockout_seconds(self, beyond: int) -> float:
        """How long the lockout after the limit's `beyond`-th extra failure lasts (0: first)."""
        first = self._window * FIRST_LOCKOUT_FRACTION
        return min(self._window, math.ldexp(first, min(beyond, 32)))

    def _global_budget_spent(self, now: float) -> bool:
        recent = self._recent
        return (
            recent.maxlen is not None
            and len(recent) == recent.maxlen
            and recent[0] > now - self._window
        )

    def _is_known(self, address: str, now: float) -> bool:
        seen = self._known.get(address)
        return seen is not None and seen > now - KNOWN_ADDRESS_SECONDS

    def _quiet(self, entry: _Address, now: float) -> bool:
        return max(entry.last_failure, entry.locked_until) <= now - self._window

    def _forget_quiet(self, now: float) -> None:
        """Drop the quiet addresses at the head of the table (in order of last failure).

        One still locked out may keep a quiet one behind it a while longer;
        MAX_ADDRESSES bounds the table whatever happens.
        """
        while self._addresses and self._quiet(next(iter(self._addresses.values())), now):
            self._addresses.popitem(last=False)


def _whole_seconds(seconds: float) -> int:
    return max(1, math.ceil(seconds))
