"""DuckDB's cache held smaller while a burst of exports is stored and replayed.

One memory limit has to serve two uses that peak at different times, measured
with bench/bench_ingest.py and bench/bench_filter_store.py:

- Storing and replaying a burst fills DuckDB's buffer pool to its limit with
  rows not yet checkpointed, on top of the receivers' buffers and the replay
  batches: the server's peak RSS came there, 403-430 MB at a 128 MB limit and
  364-410 MB at 96 MB, storing and replaying as fast.
- Studio field filters over a large store want the cache: the `final`
  equality p50 over 1M executions was 39-43 ms at 128 MB and 48-70 ms at 96 MB
  (target 50 ms).

So the limit is lowered while the replayer is catching up after a burst and
restored once everything received is stored and replayed. bench_ingest's peak
RSS with this: 365-369 MB in three runs, against 404 and 417 MB in the same
session at 128 MB throughout. Catching up took ~15% longer there; in process,
storing and replaying 200 exports took as long at either limit, within the
noise (6.9-10.6 s and 31-47 s). The burst's WAL is
folded in at the lower limit before the restore: otherwise the next checkpoint,
often the closing one, folds a whole WAL on top of a full cache, which added
15-35 MB at shutdown.

The field index's rewrite, which follows a burst once the server is idle, runs
at the lower limit too (`held`): each of its pieces is a sort that takes what
the limit allows. Stopped 120 s after catching up (`bench_ingest --idle-after
120`), serve had peaked at 369 MB while it stored and replayed a burst at the
lower limit, and then at 411 MB in the rewrite at 128 MB (415 MB with pieces
half as big). At the lower limit, with pieces of 100,000 rows
(field_layout.CHUNK_ROWS), three runs peaked at 387-401 MB in the rewrite, and
a fourth at 402 MB while replaying, before the rewrite began: after the burst
~50 MB of the pool stayed pinned, the version information of the 60M rows it
appended (Store.release_memory), and 3-442 of a rewrite's pieces ran out of
memory at 80 MB and were copied again at 128 MB. So `leave` now opens the file
again, which lets go of it (~300 ms): no piece ran out in five runs, which
peaked at 370-387 MB, all while replaying, before the rewrite. The lower limit
went from 80 to 64 MB in December 2026, when the peak had moved to storing
(collector/config.py has those runs).
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
        limit, and open the file again to let go of what the burst pinned
        (Store.release_memory: ~50 MB after bench_ingest's burst)."""
        if self._restore():
            self._store.release_memory()

    def _restore(self) -> bool:
        """Fold the WAL and restore the configured limit; whether the limit was
        lowered and is restored now."""
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
        """The lower limit for the block, then the configured one again: for the
        field index's rewrite, whose sorts fill whatever pool they are given.

        Without a reopen after it: the rewrite's pieces, each one large
        transaction, pin next to nothing, and the rewrite pauses for every
        export (a reopen each time would empty the cache for nothing).
        """
        self.enter()
        try:
            yield
        finally:
            self._restore()
