"""Counting the cursors a store has handed out, so that its database can be
opened again (Store.release_memory) with none of them in use.

No SQL here. Every cursor of a Store comes from Store._cursor, which passes
through `admit` while the cursor is open. `drained` shuts the gate: cursors
asked for meanwhile wait, and once the ones already open are closed the block
runs, alone. It waits only so long: a thread that holds a cursor and asks for
another would otherwise wait for itself.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class CursorGate:
    """Cursors in use, and a gate that a reopen shuts until they are all closed."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._open = 0
        self._shut = False

    @contextmanager
    def admit(self) -> Iterator[None]:
        """Hold the gate open for one cursor while the block runs (waits while it is shut)."""
        with self._changed:
            self._changed.wait_for(lambda: not self._shut)
            self._open += 1
        try:
            yield
        finally:
            with self._changed:
                self._open -= 1
                self._changed.notify_all()

    @contextmanager
    def drained(self, timeout: float) -> Iterator[bool]:
        """Shut the gate and wait up to `timeout` s for the open cursors to close.

        Yields whether they all did; the gate stays shut through the block
        either way, and opens again after it.
        """
        with self._changed:
            self._shut = True
            idle = self._changed.wait_for(lambda: self._open == 0, timeout)
        try:
            yield idle
        finally:
            with self._changed:
                self._shut = False
                self._changed.notify_all()
