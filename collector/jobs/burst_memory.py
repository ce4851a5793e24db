"""DuckDB's cache held smaller while a burst of exports is stored and replayed.

Storing and replaying a burst fill DuckDB's pool with rows not yet checkpointed, on
top of the receivers' buffers, while the studio's field filters want a large cache;
so the limit is lowered while a burst is caught up with (and for the field index's
rewrite that follows it), and restored once everything received is stored and
replayed, after folding the WAL in at the lower limit so the next checkpoint does
not fold it on top of a full cache. Design and measurements: docs/memory.md,
"Two DuckDB limits".
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from collector.store import Store, StoreError

logger = logging.getLogger(__name__)

# Below DuckDB's automatic threshold a settled burst's WAL is left for later:
# checkpointing it costs a rewrite of the tables' last row groups for little.
MIN_SETTLE_CHECKPOINT_BYTES = 16 * 1024 * 1024


class BurstMemory:
    """Lowers DuckDB's memory limit for a burst, restores it when the burst is done."""

    def __init__(self, store: Store, burst_limit: str | None) -> None:
        self._store = store
        self._burst_limit = burst_limit
        self._lowered = False
        self._lock = threading.Lock()

    @property
    def lowered(self) -> bool:
        return self._lowered

    def enter(self) -> None:
        """A burst is being caught up with: lower the limit (once)."""
        with self._lock:
            if self._lowered or self._burst_limit is None:
                return
            # DuckDB refuses when it cannot evict enough; the burst then runs
            # at the configured limit, as it would without this.
            self._lowered = self._store.lower_memory(self._burst_limit)

    def leave(self) -> None:
        """Everything received is stored and replayed: fold the WAL, restore the
        limit, and open the file again to let go of what the burst pinned."""
        if self._restore():
            self._store.release_memory()

    def _restore(self) -> bool:
        """Fold the WAL and restore the configured limit; whether it was lowered and now is."""
        with self._lock:
            if not self._lowered:
                return False
            try:
                if self._store.wal_bytes() >= MIN_SETTLE_CHECKPOINT_BYTES:
                    self._store.checkpoint()
            except StoreError as exc:
                # What was committed is in the WAL; DuckDB checkpoints it later.
                logger.warning("checkpoint after a burst failed: %s", exc)
            self._lowered = not self._store.limit_memory()
            return not self._lowered

    @contextmanager
    def held(self) -> Iterator[None]:
        """The lower limit for the block (the field index's rewrite, whose sorts fill
        whatever pool they get), then the configured one, with no reopen: large
        transactions pin next to nothing."""
        self.enter()
        try:
            yield
        finally:
            self._restore()
