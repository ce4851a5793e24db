"""Turns spool records into DuckDB rows, in arrival order, on one background thread.

Each round reads a run of records from the spool, decodes, extracts and encodes them
(in the extraction worker's process when there is one, collector/intake/worker.py),
and writes the rows in one transaction that also records the spool position after
them: after a crash the extractor resumes from the last committed position, so a
record is never half-stored nor stored twice. With a worker, the next run is prepared
while this one commits (not before a commit that will likely checkpoint).

Failures:
- The store refused the write (disk, lock): the records stay spooled and are retried
  after a growing pause; waiting receivers answer "retry".
- One run keeps running out of memory: after POISON_ATTEMPTS it is stored a record at
  a time, a record failing alone gets one try at ISOLATED_MEMORY_LIMIT, then goes to
  quarantine, so one huge export cannot stop all storing behind it.
- Anything else is a bug meeting hostile input: retried record by record, and a record
  that still fails is quarantined with its reason.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from collector.decode.otlp import DecodedSpan, DecodeError
from collector.encode.exports import batch_from_export
from collector.foreground import Foreground
from collector.intake.spool import Export, Position, Spool, SpoolRecord, export_bytes
from collector.store import (
    IngestBatch,
    PreparedWrite,
    Store,
    StoreError,
    StoreOutOfMemory,
    WriteResult,
    prepare_write,
)

logger = logging.getLogger(__name__)

# One transaction's worth of records: large enough to amortize a commit and DuckDB's
# per-statement costs, small enough that the decoded batch stays a few tens of MB.
BATCH_BYTES: Final = 4 * 1024 * 1024
FIRST_RETRY_SECONDS: Final = 0.25
MAX_RETRY_SECONDS: Final = 5.0
# How many refused records' reasons are kept for waiting receivers.
MAX_REFUSALS_KEPT: Final = 1024
# Consecutive refusals of one run before its records are tried one by one.
POISON_ATTEMPTS: Final = 3
# DuckDB's memory limit for the last try of a record the store refused alone:
# enough for strings near the 64 MiB receive limit, held only for that commit.
ISOLATED_MEMORY_LIMIT: Final = "1GB"
# A commit within this many runs' WAL growth of DuckDB's threshold will likely
# checkpoint, where serve's memory peaks: no run is read ahead for it, and the worker,
# whose memory would add to the peak even idle, is stopped until it ends
# (docs/memory.md, "The extraction worker and threads").
CHECKPOINT_MARGIN_RUNS: Final = 1.5
# The preparer rests once the spool has held nothing new for this long, since an idle
# worker still holds memory; a steady trickle keeps it.
PREPARER_IDLE_SECONDS: Final = 30.0


class Preparer(Protocol):
    """Prepares runs of export bodies in another process, one run at a time."""

    def submit(self, exports: Sequence[Export]) -> bool:
        """Start preparing; False if the caller must prepare these itself."""
        ...

    def collect(self) -> PreparedWrite | None:
        """The last submitted run's rows, or None if the caller must prepare them."""
        ...

    def rest(self) -> None:
        """Nothing is left to prepare for now: let go of what preparing holds."""
        ...


@dataclass(frozen=True)
class _RunAhead:
    """A run handed to the preparer before its turn: where it starts, and its records."""

    start: Position
    records: list[SpoolRecord]
    end: Position


class ExportQuarantined(StoreError):
    """The export was set aside in the spool's quarantine: it will never be stored."""


class Extractor:
    """The one thread that moves records from the spool into the store."""

    def __init__(
        self,
        store: Store,
        spool: Spool,
        resume_at: Position,
        on_commit: Callable[[WriteResult, bool], None] | None = None,
        foreground: Foreground | None = None,
        preparer: Preparer | None = None,
    ) -> None:
        self._store = store
        # The worker, or None; when it answers None, the run is prepared here.
        self._preparer = preparer
        self._ahead: _RunAhead | None = None
        self._wal_growth = 0
        self._spool = spool
        self._on_commit = on_commit
        self._foreground = foreground or Foreground()
        self._position = resume_at
        # (end of the failed run, the refusal) while the store refuses writes.
        self._failure: tuple[Position, StoreError] | None = None
        self._refused: dict[Position, str] = {}
        self._stopping = False
        self._drain_deadline = 0.0
        self._changed = threading.Condition()
        self._thread = threading.Thread(
            target=self._run, name="statetrail-extractor", daemon=True
        )
        self._thread.start()

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

        Raises StoreError while the store refuses it (it stays spooled), and
        ExportQuarantined if it was set aside. An out-of-memory refusal is waited
        through: the extractor soon stores this export alone or sets it aside.
        """
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                # A quarantined record also moves the position past it.
                refused = self._refused.get(end)
                if refused is not None:
                    raise ExportQuarantined(refused)
                if self._position >= end:
                    return True
                failure = self._failure
                if (
                    failure is not None
                    and end <= failure[0]
                    and not isinstance(failure[1], StoreOutOfMemory)
                ):
                    raise StoreError(str(failure[1]))
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
        self._thread.join()

    # -- the thread ----------------------------------------------------------------

    def _run(self) -> None:
        retry_after = FIRST_RETRY_SECONDS
        refusals = 0
        while True:
            self._wait_for_work()
            with self._changed:
                if self._must_stop():
                    return
                position = self._position
            records, after = self._run_from(position)
            try:
                if refusals >= POISON_ATTEMPTS:
                    self._store_isolated(records, after)
                else:
                    self._store_records(records, after, read_ahead=True)
            except StoreError as exc:
                # Only running out of memory may be the export's own fault; a full
                # disk or a lock is the store's, and every record waits for it.
                refusals = refusals + 1 if isinstance(exc, StoreOutOfMemory) else 0
                logger.error("could not store spooled exports, retrying: %s", exc)
                with self._changed:
                    self._failure = (after, exc)
                    self._changed.notify_all()
                    self._changed.wait_for(self._must_stop, retry_after)
                retry_after = min(retry_after * 2, MAX_RETRY_SECONDS)
                continue
            refusals = 0
            retry_after = FIRST_RETRY_SECONDS
            self._spool.release(after)

    def _wait_for_work(self) -> None:
        """Wait until records are spooled (or it is time to stop), resting the
        preparer if none come for PREPARER_IDLE_SECONDS."""
        with self._changed:
            if self._changed.wait_for(self._has_work_or_must_stop, PREPARER_IDLE_SECONDS):
                return
        # Outside the lock: stopping a child may take a moment, and the spool's
        # writer must be able to say that records arrived meanwhile.
        if self._preparer is not None and self._ahead is None:
            self._preparer.rest()
        with self._changed:
            self._changed.wait_for(self._has_work_or_must_stop)

    def _has_work_or_must_stop(self) -> bool:
        return self._spool.durable_end > self._position or self._must_stop()

    def _must_stop(self) -> bool:
        if not self._stopping:
            return False
        caught_up = self._spool.durable_end <= self._position
        return caught_up or time.monotonic() >= self._drain_deadline

    def _run_from(self, position: Position) -> tuple[list[SpoolRecord], Position]:
        ahead = self._ahead
        if ahead is not None and ahead.start == position:
            return ahead.records, ahead.end
        return self._spool.read(position, BATCH_BYTES)

    def _store_records(
        self, records: list[SpoolRecord], after: Position, *, read_ahead: bool = False
    ) -> None:
        """Store a run of records and the position after it; on a bug, one by one.

        With `read_ahead`, the next run goes to the preparer before this one
        commits, so that the two overlap (the next round picks it up).
        """
        try:
            # The decoded batches are let go once their rows are built, not held
            # through the commit, where DuckDB's memory peaks.
            rows = self._prepared(records)
            if self._checkpoint_comes_next():
                self._rest_preparer()
            elif read_ahead:
                self._submit_ahead(after)
            # The worker's preparing and this commit would keep both cores
            # busy while a studio page is served (collector/foreground.py).
            self._foreground.give_way()
            result = self._committed(rows, after)
        except StoreError:
            raise
        except Exception:
            if len(records) > 1:
                for record in records:
                    self._store_records([record], record.end)
                self._advance_past_skipped(records, after)
                return
            self._refuse(records[0])
            return
        self._advance(result, after)

    def _rest_preparer(self) -> None:
        """Stop the worker, idle until this commit ends, for its checkpoint's sake
        (CHECKPOINT_MARGIN_RUNS); the next run starts another."""
        if self._preparer is not None and self._ahead is None:
            self._preparer.rest()

    def _checkpoint_comes_next(self) -> bool:
        """Whether the next commit will likely checkpoint (CHECKPOINT_MARGIN_RUNS)."""
        room = self._store.wal_room()
        return room is not None and room <= self._wal_growth * CHECKPOINT_MARGIN_RUNS

    def _committed(self, rows: PreparedWrite, after: Position) -> WriteResult:
        """Commit a run's rows, noting how much WAL a run adds.

        A commit that checkpointed shrank the WAL instead: it added at least the
        room there was, which is all it tells.
        """
        before, room = self._store.wal_bytes(), self._store.wal_room()
        result = self._store.commit(rows, progress=after)
        grown = self._store.wal_bytes() - before
        if grown > 0:
            self._wal_growth = grown
        elif room is not None:
            self._wal_growth = max(self._wal_growth, room)
        return result

    def _prepared(self, records: list[SpoolRecord]) -> PreparedWrite:
        if self._preparer is not None:
            rows = self._prepared_elsewhere(self._preparer, records)
            if rows is not None:
                return rows
        return prepare_write([self._batch(record) for record in records])

    def _prepared_elsewhere(
        self, preparer: Preparer, records: list[SpoolRecord]
    ) -> PreparedWrite | None:
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            rows = preparer.collect()
            if ahead.records is records:
                return rows
            # A retry, or a run stored record by record, wants other records:
            # the rows prepared ahead are dropped (their records stay spooled).
        if not self._submit(preparer, records):
            return None
        return preparer.collect()

    def _submit_ahead(self, start: Position) -> None:
        """Give the preparer the run after `start`, if one is spooled."""
        if self._preparer is None or self._spool.durable_end <= start:
            return
        try:
            records, end = self._spool.read(start, BATCH_BYTES)
        except OSError:
            # Reading ahead is only a head start: the next round reads it again
            # and meets the failure there, where it is handled.
            logger.debug("could not read the next run ahead", exc_info=True)
            return
        if records and self._submit(self._preparer, records):
            self._ahead = _RunAhead(start, records, end)

    def _submit(self, preparer: Preparer, records: list[SpoolRecord]) -> bool:
        # The worker's preparing takes a core from a studio page being served.
        self._foreground.give_way()
        # As spooled: compressed, they cross the pipe at a fraction of their size.
        return preparer.submit([record.export for record in records])

    def _store_isolated(self, records: list[SpoolRecord], after: Position) -> None:
        """Store a run that keeps running out of memory a record at a time, setting
        aside one too big even at ISOLATED_MEMORY_LIMIT. Other StoreErrors propagate:
        a record is never set aside for the store's own failure."""
        for record in records:
            try:
                self._store_records([record], record.end)
                continue
            except StoreOutOfMemory as refused:
                reason = str(refused)
            logger.warning("the store ran out of memory on one export alone (%s); trying "
                           "with %s", reason, ISOLATED_MEMORY_LIMIT)
            with self._store.memory_raised(ISOLATED_MEMORY_LIMIT):
                try:
                    self._store_records([record], record.end)
                except StoreOutOfMemory as exc:
                    self._refuse(record, f"the database could not store this export: {exc}")
        self._advance_past_skipped(records, after)

    def _advance_past_skipped(self, records: list[SpoolRecord], after: Position) -> None:
        """Store the position `after` a run stored record by record, if the records end
        before it: a run that ended in a skipped, corrupt stretch has nothing else to store."""
        if not records or records[-1].end < after:
            self._advance(self._store.write([], progress=after), after)

    def _advance(self, result: WriteResult, after: Position) -> None:
        # The replayer hears first, so no moment shows "nothing pending" between this
        # commit and its replays.
        if self._on_commit is not None:
            self._on_commit(result, self._spool.durable_end > after)
        with self._changed:
            self._position = after
            self._failure = None
            self._changed.notify_all()

    def _refuse(self, record: SpoolRecord, cause: str | None = None) -> None:
        logger.error("could not store an export (%s); it is kept in the spool's quarantine",
                     cause or "a bug met this input, traceback above", exc_info=cause is None)
        reason = "statetrail could not store this export (kept for inspection); " + (
            cause or "see the log"
        )
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
            return batch_from_export(export_bytes(record.export), self._paced)
        except DecodeError as exc:
            raise ValueError(f"spooled export no longer decodes: {exc}") from exc

    def _paced(self, spans: list[DecodedSpan]) -> Iterator[DecodedSpan]:
        # Extraction holds the interpreter lock for tens of ms per export; it
        # gives way to studio requests between spans.
        for span in spans:
            self._foreground.give_way()
            yield span
