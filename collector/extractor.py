"""Turns spool records into DuckDB rows, in arrival order, on two background threads.

Each round reads a run of records from the spool (collector/spool.py), decodes
and extracts them (collector/decode.py, collector/junjo.py), and writes the
spans, executions and transitions in one transaction that also records the
spool position after them. That position is what makes processing exactly
once: after a crash the extractor resumes from the last committed position, so
a record is never half-stored and never stored twice (and a redelivered export
is deduplicated by the store's keys anyway).

A round has a Python half (decode, extract, build the Arrow rows: the
"preparer" thread) and a database half (insert, commit, and now and then a
checkpoint: the "writer" thread), and DuckDB does its half without the
interpreter lock. So the preparer works on the next run while the writer
commits the previous one, one run ahead at most; only the writer moves the
stored position, in order.

Failures:
- The store refused the write (StoreError: disk, lock, WAL): nothing was
  stored, the records stay in the spool, and the writer retries the same
  rows after a growing pause. Exports waiting to become visible are told, so a receiver
  that is still holding the call answers "retry" rather than success.
- Anything else is a bug meeting hostile input. A failed run of records is
  stored again one record at a time, by the writer; a single record that
  still fails is copied to the spool's quarantine folder with the reason,
  logged, and passed over, so one bad export never stops ingestion.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Final, NamedTuple

from collector.decode import DecodedSpan, DecodeError
from collector.foreground import Foreground
from collector.spool import Position, Spool, SpoolRecord
from collector.store import (
    IngestBatch,
    PreparedWrite,
    Store,
    StoreError,
    WriteResult,
    batch_from_export,
    prepare_write,
)

logger = logging.getLogger(__name__)

# One transaction's worth of records: large enough to amortize a commit and
# DuckDB's per-statement costs (four ~1 MB exports per transaction store a
# span in half the time one does), small enough that the decoded batch stays
# a few tens of MB.
BATCH_BYTES: Final = 4 * 1024 * 1024
FIRST_RETRY_SECONDS: Final = 0.25
MAX_RETRY_SECONDS: Final = 5.0
# How many refused records' reasons are kept for waiting receivers.
MAX_REFUSALS_KEPT: Final = 1024
# How often a thread waiting for the other checks whether the drain deadline passed.
STOP_POLL_SECONDS: Final = 0.1


class _Run(NamedTuple):
    """The spool records up to `after`, prepared; `write` is None if preparing failed."""

    after: Position
    write: PreparedWrite | None


class _Handoff:
    """Passes prepared runs from the preparer to the writer, one at a time.

    `give` returns only once the writer has taken the run, so the preparer
    starts on the next run while the writer commits this one, and no more
    than two runs are in memory. (A queue of one let the preparer hold a
    third: bench_ingest's peak RSS went from ~400 to 424 MB.)
    """

    def __init__(self, past_deadline: Callable[[], bool]) -> None:
        self._past_deadline = past_deadline
        self._changed = threading.Condition()
        self._run: _Run | None = None
        self._given = False

    def give(self, run: _Run | None) -> bool:
        """Hand over a run (None: no more); False if the drain deadline passed first."""
        with self._changed:
            self._run, self._given = run, True
            self._changed.notify_all()
            while self._given:
                if self._past_deadline():
                    return False
                self._changed.wait(STOP_POLL_SECONDS)
        return True

    def take(self) -> _Run | None:
        """The next run; None once there are no more or the drain deadline passed."""
        with self._changed:
            while not self._given:
                if self._past_deadline():
                    return None
                self._changed.wait(STOP_POLL_SECONDS)
            run, self._run, self._given = self._run, None, False
            self._changed.notify_all()
            return run


class Extractor:
    """Moves records from the spool into the store: a preparer thread and a writer thread."""

    def __init__(
        self,
        store: Store,
        spool: Spool,
        resume_at: Position,
        on_commit: Callable[[WriteResult, bool], None] | None = None,
        foreground: Foreground | None = None,
    ) -> None:
        self._store = store
        self._spool = spool
        self._on_commit = on_commit
        self._foreground = foreground or Foreground()
        self._position = resume_at
        # (end of the failed run, reason) while the store refuses writes.
        self._failure: tuple[Position, str] | None = None
        self._refused: dict[Position, str] = {}
        self._stopping = False
        self._drain_deadline = 0.0
        self._changed = threading.Condition()
        self._handoff = _Handoff(self._past_deadline)
        self._preparer = threading.Thread(
            target=self._prepare_runs, args=(resume_at,), name="statetrail-extractor", daemon=True
        )
        self._writer = threading.Thread(
            target=self._write_runs, name="statetrail-store-writer", daemon=True
        )
        self._preparer.start()
        self._writer.start()

    # -- what other threads ask ------------------------------------------------

    @property
    def position(self) -> Position:
        with self._changed:
            return self._position

    def backlog_bytes(self) -> int:
        """Spooled bytes not yet in the store."""
        return self._spool.backlog_bytes(self.position)

    def notify(self) -> None:
        """New records are durable in the spool."""
        with self._changed:
            self._changed.notify_all()

    def wait_stored(self, end: Position, timeout: float) -> bool:
        """Wait until the record ending at `end` is in the store; False on timeout.

        Raises StoreError if the store refused it (the record stays spooled and
        is retried, but the caller should not report success yet).
        """
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                # A quarantined record also moves the position past it.
                refused = self._refused.get(end)
                if refused is not None:
                    raise StoreError(refused)
                if self._position >= end:
                    return True
                if self._failure is not None and end <= self._failure[0]:
                    raise StoreError(self._failure[1])
                left = deadline - time.monotonic()
                if left <= 0 or self._stopping:
                    return False
                self._changed.wait(left)

    def close(self, drain_seconds: float) -> None:
        """Stop after storing what is spooled, or after `drain_seconds`.

        Whatever is left stays in the spool and is stored after the next start.
        """
        with self._changed:
            self._stopping = True
            self._drain_deadline = time.monotonic() + drain_seconds
            self._changed.notify_all()
        self._preparer.join()
        self._writer.join()

    # -- the preparer thread: read, decode, extract, build rows -----------------------

    def _prepare_runs(self, position: Position) -> None:
        while self._wait_for_records_after(position):
            run = self._prepare_run(position)
            if not self._handoff.give(run):
                return
            position = run.after
        self._handoff.give(None)

    def _prepare_run(self, position: Position) -> _Run:
        # The records' bytes are let go here, before the run waits to be taken.
        records, after = self._spool.read(position, BATCH_BYTES)
        return _Run(after, self._prepare(records))

    def _wait_for_records_after(self, position: Position) -> bool:
        """True when there are records to prepare; False when it is time to stop."""
        with self._changed:
            self._changed.wait_for(lambda: self._spool.durable_end > position or self._stopping)
            return self._spool.durable_end > position and not self._past_deadline()

    def _prepare(self, records: list[SpoolRecord]) -> PreparedWrite | None:
        try:
            return prepare_write([self._batch(record) for record in records])
        except Exception:
            # The writer finds the record at fault, one at a time (see _store_records).
            return None

    # -- the writer thread: commit, in order ------------------------------------------

    def _write_runs(self) -> None:
        while (run := self._handoff.take()) is not None:
            if not self._store_run_until_stored(run):
                return
            self._spool.release(run.after)
            # Not kept while waiting for the next run: its rows are tens of MB.
            del run

    def _store_run_until_stored(self, run: _Run) -> bool:
        """Store a run, retrying while the store refuses; False if the deadline passed."""
        retry_after = FIRST_RETRY_SECONDS
        while True:
            try:
                self._store_run(run)
                return True
            except StoreError as exc:
                logger.error("could not store spooled exports, retrying: %s", exc)
                with self._changed:
                    self._failure = (run.after, str(exc))
                    self._changed.notify_all()
                    self._changed.wait_for(self._past_deadline, retry_after)
                if self._past_deadline():
                    return False
                retry_after = min(retry_after * 2, MAX_RETRY_SECONDS)

    def _past_deadline(self) -> bool:
        return self._stopping and time.monotonic() >= self._drain_deadline

    def _store_run(self, run: _Run) -> None:
        if run.write is not None:
            try:
                result = self._store.commit(run.write, progress=run.after)
            except StoreError:
                raise
            except Exception:
                logger.exception("could not store a run of exports; storing them one by one")
            else:
                self._advance(result, run.after)
                return
        # Resume where storing stopped: an earlier try may have stored part of the run.
        records, _ = self._spool.read(self.position, BATCH_BYTES)
        self._store_records([r for r in records if r.end <= run.after], run.after)

    def _store_records(self, records: list[SpoolRecord], after: Position) -> None:
        """Store a run of records and the position after it; on a bug, one by one."""
        try:
            result = self._store.write([self._batch(r) for r in records], progress=after)
        except StoreError:
            raise
        except Exception:
            if len(records) > 1:
                for record in records:
                    self._store_records([record], record.end)
                # A run that ended in a skipped, corrupt stretch has nothing to
                # store but its position.
                if records[-1].end < after:
                    self._advance(self._store.write([], progress=after), after)
                return
            self._refuse(records[0])
            return
        self._advance(result, after)

    def _advance(self, result: WriteResult, after: Position) -> None:
        # The replayer hears first, so that no moment shows "nothing pending"
        # between this commit and its replays. It is also told whether more
        # is spooled behind this commit: replays wait for storing to catch up.
        if self._on_commit is not None:
            self._on_commit(result, self._spool.durable_end > after)
        with self._changed:
            self._position = after
            self._failure = None
            self._changed.notify_all()

    def _refuse(self, record: SpoolRecord) -> None:
        logger.exception("could not store an export; it is kept in the spool's quarantine")
        reason = "statetrail could not store this export (kept for inspection); see the log"
        try:
            kept = self._spool.quarantine(record, reason)
            logger.error("quarantined export: %s", kept)
        except OSError:
            logger.exception("could not quarantine the export")
        result = self._store.write([], progress=record.end)
        with self._changed:
            if len(self._refused) >= MAX_REFUSALS_KEPT:
                self._refused.pop(next(iter(self._refused)))
            self._refused[record.end] = reason
        self._advance(result, record.end)

    def _batch(self, record: SpoolRecord) -> IngestBatch:
        # Receivers parsed this body before spooling it: a failure here is a
        # bug or a damaged disk, and goes to quarantine like any other.
        try:
            return batch_from_export(record.body, self._paced)
        except DecodeError as exc:
            raise ValueError(f"spooled export no longer decodes: {exc}") from exc

    def _paced(self, spans: list[DecodedSpan]) -> Iterator[DecodedSpan]:
        # Extraction holds the interpreter lock for tens of ms per export; it
        # gives way to studio requests between spans.
        for span in spans:
            self._foreground.give_way()
            yield span
