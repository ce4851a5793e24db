"""DuckDB's memory limit over time: the configured one, a burst's lower one, and raises.

The lower limit during a burst only saves memory and must never be why work fails: a
read or replay save that runs out at it is tried once more with the configured limit
raised for it alone (`at_any_limit`), and an export's write that runs out gives the
lowered limit up for the rest of the burst. The lock keeps DuckDB's limit,
`lowered_to` and the raises in step for a reopen within a burst.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from collector.store.errors import StoreOutOfMemory

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


class MemoryLimit:
    """The limit a store's connection should have now, and the calls raised above it."""

    def __init__(self, configured: str | None, apply: Callable[[str], bool]) -> None:
        # None: DuckDB's own default, never set by us.
        self.configured = configured
        # Sets DuckDB's limit on the store's connection; False if DuckDB refused.
        self._apply = apply
        # The limit `lower` set, until `limit(None)` restores the configured one.
        self.lowered_to: str | None = None
        # Calls running at the configured limit within a burst (`at_any_limit`).
        self._raised = 0
        self.lock = threading.Lock()

    @property
    def raised(self) -> bool:
        """Whether a call runs at the configured limit within a burst now."""
        return bool(self._raised)

    def limit(self, limit: str | None = None) -> bool:
        """Set DuckDB's limit; None restores the configured one (and ends a burst's).

        Returns False, changing nothing, if DuckDB cannot free that much.
        """
        with self.lock:
            if not self._set(limit if limit is not None else self.configured):
                return False
            if limit is None:
                self.lowered_to = None
        return True

    def lower(self, limit: str) -> bool:
        """A burst's lower limit, until `limit()` restores the configured one."""
        with self.lock:
            lowered = self._set(limit)
            if lowered:
                self.lowered_to = limit
        return lowered

    def at_any_limit(self, operation: Callable[[], _T], what: str) -> _T:
        """`operation`, once more at the configured limit if it ran out of memory at a
        burst's lowered one (logged as `what`). For reads and replay saves, whose
        need passes."""
        try:
            return operation()
        except StoreOutOfMemory as exc:
            if self.lowered_to is None:
                raise
            logger.info("%s ran out of memory at the lowered limit; trying again at the "
                        "configured one: %s", what, exc)
        with self.configured_for_a_call():
            return operation()

    @contextmanager
    def configured_for_a_call(self) -> Iterator[None]:
        """The configured limit while the block runs, then the burst's again
        (unless the burst ended, or an export's write gave its limit up, meanwhile)."""
        with self.lock:
            lowered_to = self.lowered_to
            raised = bool(self._raised) or self._set(self.configured)
            if raised:
                self._raised += 1
            else:
                # The try again runs at the limit there is: by now the other work
                # that filled the pool may have let go of it.
                logger.warning("could not raise DuckDB's memory limit to %s for a "
                               "try again", self.configured)
        try:
            yield
        finally:
            if raised:
                with self.lock:
                    self._raised -= 1
                    burst_goes_on = lowered_to is not None and self.lowered_to == lowered_to
                    if not self._raised and burst_goes_on:
                        self._set(lowered_to)

    def _set(self, target: str | None) -> bool:
        return True if target is None else self._apply(target)
