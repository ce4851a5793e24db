"""Turns spool records into DuckDB rows, in arrival order, on two background threads.

Each round reads a run of records from the spool (collector/spool.py), decodes
and extracts them (collector/decode.py, collector/junjo.py), and writes the
spans, executions and transitions in one transaction that also records the
spool position after them. That position is what makes processing exactly
once: after a crash the extractor resumes from the last committed position, so
a record is never half-stored and never stored twice (and a redelivered export
is deduplicated by the store's keys anyway).

Two stages, so that they overlap: one thread reads and prepares each run
(decoding, extraction and the Arrow rows: Python, under the interpreter lock)
while the other commits the run before it (mostly DuckDB, without the lock).
Under bench_ingest's load the single thread that did both held the lock ~51%
of the time and spent most of the rest in DuckDB. One prepared run waits at
most, so read-ahead costs one run's rows (a few MB).

Failures:
- The store refused the write (StoreError: disk, lock, WAL): nothing was
  stored, the records stay in the spool, and the extractor retries after a
  growing pause. Exports waiting to become visible are told, so a receiver
  that is still holding the call answers "retry" rather than success.
- Anything else is a bug meeting hostile input. A failed run of records is
  retried one record at a time; a single record that still fails is copied to
  the spool's quarantine folder with the reason, logged, and passed over, so
  one bad export never stops ingestion.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Final, NamedTuple

from collector.decode import DecodedSpan, DecodeError, iter_spans
from collector.foreground import Foreground
from collector.junjo import extract
from collector.spool import Position, Spool, SpoolRecord
from collector.store import (
    IngestBatch,
    PreparedWrite,
    Store,
    StoreError,
    WriteResult,
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


def batch_from_export(
    body: bytes, paced: Callable[[list[DecodedSpan]], Iterable[DecodedSpan]] = iter
) -> IngestBatch:
    """An export request's bytes as the rows they add. Raises DecodeError.

    `paced` wraps the spans on their way into extraction (the extractor gives
    way to studio requests between spans). The spans' parsed views, several
    times the size of their bytes, are let go on return: four exports' views
    held at once until their run was written cost ~16 MB at peak.
    """
    decoded = [span for span in iter_spans(body) if isinstance(span, DecodedSpan)]
    evidence = extract(paced(decoded))
    return IngestBatch([span.record for span in decoded], evidence)


class _PreparedRun(NamedTuple):
    """A run of records read from the spool, and its rows if preparing them worked."""

    records: list[SpoolRecord]
    after: Position
    # None: preparing the run failed (a bug meeting hostile input); the
    # committer then stores it record by record.
    rows: PreparedWrite | None


class Extractor:
    """The two threads that move records from the spool into the store."""

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
        # Stored up to here (committed); the preparer reads ahead from `_read_at`.
        self._position = resume_at
        self._read_at = resume_at
        # The one run prepared and not yet taken by the committer.
        self._prepared: _PreparedRun | None = None
        self._preparer_done = False
        # (end of the failed run, reason) while the store refuses writes.
        self._failure: tuple[Position, str] | None = None
        self._refused: dict[Position, str] = {}
        self._stopping = False
        self._drain_deadline = 0.0
        self._changed = threading.Condition()
        self._preparer = threading.Thread(
            target=self._prepare_runs, name="statetrail-extractor", daemon=True
        )
        self._committer = threading.Thread(
            target=self._commit_runs, name="statetrail-committer", daemon=True
        )
        self._preparer.start()
        self._committer.start()

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
        self._committer.join()

    # -- the preparer --------------------------------------------------------------

    def _prepare_runs(self) -> None:
        try:
            while True:
                with self._changed:
                    self._changed.wait_for(self._has_unread_or_must_stop)
                    if self._must_stop(self._read_at):
                        return
                    read_at = self._read_at
                records, after = self._spool.read(read_at, BATCH_BYTES)
                run = _PreparedRun(records, after, self._rows_or_none(records))
                with self._changed:
                    # Wait for the committer to take the run before; past the
                    # drain deadline it takes no more, and this one stays spooled.
                    self._changed.wait_for(lambda: self._prepared is None or self._past_deadline())
                    if self._prepared is not None:
                        return
                    self._prepared = run
                    self._read_at = after
                    self._changed.notify_all()
        finally:
            with self._changed:
                self._preparer_done = True
                self._changed.notify_all()

    def _has_unread_or_must_stop(self) -> bool:
        return self._spool.durable_end > self._read_at or self._must_stop(self._read_at)

    def _must_stop(self, position: Position) -> bool:
        if not self._stopping:
            return False
        return self._spool.durable_end <= position or self._past_deadline()

    def _past_deadline(self) -> bool:
        return self._stopping and time.monotonic() >= self._drain_deadline

    def _rows_or_none(self, records: list[SpoolRecord]) -> PreparedWrite | None:
        # The decoded batches (~11 MB for a 4 MB run) are let go once their
        # rows are built, not held through the commit, where DuckDB's own
        # memory peaks.
        try:
            return prepare_write([self._batch(record) for record in records])
        except Exception:
            return None

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

    # -- the committer -------------------------------------------------------------

    def _commit_runs(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._prepared is not None or self._preparer_done)
                run = self._prepared
                if run is None or self._past_deadline():
                    return
            if not self._commit_until_stored(run):
                return
            with self._changed:
                self._prepared = None
                self._changed.notify_all()
            self._spool.release(run.after)

    def _commit_until_stored(self, run: _PreparedRun) -> bool:
        """Store a run, retrying while the store refuses; False if stopped first."""
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
                    if self._changed.wait_for(self._past_deadline, retry_after):
                        return False
                retry_after = min(retry_after * 2, MAX_RETRY_SECONDS)

    def _store_run(self, run: _PreparedRun) -> None:
        """Store a prepared run and the position after it; on a bug, one by one."""
        # A retry after the store failed part way through storing one by one
        # goes on from the first record not stored.
        stored_to = self.position
        unstored = [record for record in run.records if record.end > stored_to]
        if run.rows is not None and len(unstored) == len(run.records):
            try:
                self._advance(self._store.commit(run.rows, progress=run.after), run.after)
                return
            except StoreError:
                raise
            except Exception:
                if len(run.records) == 1:
                    self._refuse(run.records[0])
                    return
        self._store_one_by_one(unstored, run.after)

    def _store_one_by_one(self, records: list[SpoolRecord], after: Position) -> None:
        for record in records:
            try:
                rows = prepare_write([self._batch(record)])
                result = self._store.commit(rows, progress=record.end)
            except StoreError:
                raise
            except Exception:
                self._refuse(record)
                continue
            self._advance(result, record.end)
        # A run that ended in a skipped, corrupt stretch has nothing to store
        # but its position.
        if self.position < after:
            self._advance(self._store.write([], progress=after), after)

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
