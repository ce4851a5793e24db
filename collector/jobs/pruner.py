"""Retention: delete traces older than the configured limit, a bounded batch at a time.

`prune_older_than` is the one loop, used by the background `Pruner` thread of
`statetrail serve --retain`, by the admin route behind `statetrail prune` while
a server holds the file, and by `statetrail prune` directly when it does not.
Each batch is its own short transaction (collector/store/retention.py), and the
loop yields between batches, so exporters keep being acknowledged while
millions of old rows go.
"""

from __future__ import annotations

import logging
import threading
import time

from collector.store import Store, StoreError
from collector.store.retention import DEFAULT_BATCH_SPANS, PruneCounts

logger = logging.getLogger(__name__)

# A pause between batches hands the write lock to waiting exports.
PAUSE_BETWEEN_BATCHES_SECONDS = 0.01


def prune_older_than(
    store: Store,
    age_nanos: int,
    *,
    now_unix_nano: int | None = None,
    batch_spans: int = DEFAULT_BATCH_SPANS,
    stop: threading.Event | None = None,
) -> PruneCounts:
    """Delete every trace whose newest span ended more than `age_nanos` ago; return counts.

    Raises StoreError if a batch fails; batches committed before it stay deleted.
    Setting `stop` ends the loop after the batch in progress (shutdown).
    """
    now = time.time_ns() if now_unix_nano is None else now_unix_nano
    cutoff = now - age_nanos
    total = PruneCounts()
    while True:
        counts = store.prune_batch(cutoff, batch_spans)
        total += counts
        if counts.traces == 0 or (stop is not None and stop.is_set()):
            break
        time.sleep(PAUSE_BETWEEN_BATCHES_SECONDS)
    return total + store.prune_orphans()


class Pruner:
    """A daemon thread running `prune_older_than` shortly after start, then periodically."""

    def __init__(
        self, store: Store, age_nanos: int, *, interval_seconds: float, first_delay_seconds: float
    ) -> None:
        self._store = store
        self._age_nanos = age_nanos
        self._interval = interval_seconds
        self._first_delay = first_delay_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="statetrail-pruner", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop after the batch in progress (never mid-transaction)."""
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        delay = self._first_delay
        while not self._stop.wait(delay):
            delay = self._interval
            try:
                counts = prune_older_than(self._store, self._age_nanos, stop=self._stop)
            except StoreError as exc:
                # Nothing is lost by waiting: the same rows are due next time.
                logger.error("retention prune failed, retrying in %.0f s: %s", delay, exc)
                continue
            if counts.traces:
                logger.info("retention pruned %s", counts.as_dict())
