"""The ingest pipeline shared by every transport: screen -> spool -> extract -> store.

`Ingestor.ingest` screens a parsed request's spans, then one writer thread appends
whatever has queued to the spool with one fdatasync (group commit); once synced the
export is durable and the extractor stores it in arrival order. When nothing is queued
ahead, the call also waits briefly for the commit, so an exporter that then queries
sees its data; otherwise a burst waits in the spool rather than in exporters' queues,
up to a bounded backlog past which exports are refused with a retry delay.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Final

from collector.decode.otlp import ExportRequestPB2, RejectedSpan, screen
from collector.foreground import Foreground
from collector.intake.extractor import ExportQuarantined, Extractor
from collector.intake.sink import IngestOutcome, RetryLater
from collector.intake.spool import Packed, Position, Spool, SpoolError, pack
from collector.intake.worker import ExtractionWorker
from collector.store import Store, StoreError, WriteResult

logger = logging.getLogger(__name__)

# Enough to amortize an fdatasync across every exporter that is likely to be
# waiting; bounded so one group never holds much memory.
MAX_EXPORTS_PER_APPEND: Final = 64
MAX_BYTES_PER_APPEND: Final = 64 * 1024 * 1024
# An acknowledgement waits at most this long for rows; the export is durable anyway.
VISIBLE_WAIT_SECONDS: Final = 5.0
DEFAULT_MAX_BACKLOG_BYTES: Final = 1024 * 1024 * 1024
# On shutdown the extractor stores what it can in this time; the rest waits
# in the spool for the next start.
DRAIN_SECONDS: Final = 20.0


class IngestorClosed(RetryLater):
    """The server is shutting down and takes no new exports."""


class IngestorBusy(RetryLater):
    """The spooled backlog is at its bound; exports wait until it shrinks."""


class Ingestor:
    """Owns the spool, its writer thread and the extractor; safe from any thread."""

    def __init__(
        self,
        store: Store,
        spool_directory: Path,
        *,
        on_commit: Callable[[WriteResult, bool], None] | None = None,
        foreground: Foreground | None = None,
        max_backlog_bytes: int = DEFAULT_MAX_BACKLOG_BYTES,
        extraction_worker: bool = False,
    ) -> None:
        resume_at = Position(*store.stored_spool_position())
        self._spool = Spool(spool_directory, resume_at)
        self._foreground = foreground or Foreground()
        self._worker = ExtractionWorker() if extraction_worker else None
        self._extractor = Extractor(
            store,
            self._spool,
            resume_at,
            on_commit,
            self._foreground,
            preparer=self._worker,
        )
        self._max_backlog_bytes = max_backlog_bytes
        self._queue: queue.Queue[tuple[Packed, Future[tuple[Position, int]]] | None] = (
            queue.Queue()
        )
        self._closed = False
        self._close_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="statetrail-spool", daemon=True)
        self._thread.start()

    def ingest(self, request: ExportRequestPB2, body: bytes | None = None) -> IngestOutcome:
        """Screen and durably spool one request; `body` is its protobuf bytes if at hand.

        Raises RetryLater when the export must not be acknowledged: the spool
        or the database failed, the backlog is full, or the server is stopping.
        """
        accepted, rejected = screen(request)
        if accepted:
            self.check_backlog()
            # Rejected spans stay in the bytes: extraction skips them by the same checks.
            # Packed here, in the receiver's thread, so that exporters compress at once.
            spooled = self._submit(pack(request.SerializeToString() if body is None else body))
            try:
                end, queued_ahead = spooled.result()
            except SpoolError as exc:
                raise RetryLater(f"not stored, retry: {exc}") from exc
            if not queued_ahead:
                try:
                    self._extractor.wait_stored(end, VISIBLE_WAIT_SECONDS)
                except ExportQuarantined as exc:
                    # Kept for a person to look at, never to be stored: say so per span
                    # rather than "retry", which would only queue the same export again.
                    return IngestOutcome(0, accepted + len(rejected), str(exc))
                except StoreError as exc:
                    raise RetryLater(f"not stored, retry: {exc}") from exc
        return IngestOutcome(
            accepted_spans=accepted,
            rejected_spans=len(rejected),
            error_message=_rejection_message(rejected),
        )

    def check_backlog(self) -> None:
        """Raise IngestorBusy while the backlog is past its bound.

        Receivers call it before decoding: screening exports only to refuse them
        would take the interpreter lock from storing.
        """
        backlog = self.backlog_bytes()
        if backlog > self._max_backlog_bytes:
            raise IngestorBusy(
                f"statetrail has {backlog // 2**20} MiB of exports still to "
                "store; retry after the delay"
            )

    def give_way(self) -> None:
        """Wait (bounded) while studio requests are served; receivers call it before
        decoding, which holds the interpreter lock for milliseconds in C."""
        self._foreground.give_way()

    def backlog_bytes(self) -> int:
        """Spooled export bytes the extractor has not stored yet."""
        return self._extractor.backlog_bytes()

    def _submit(self, export: Packed) -> Future[tuple[Position, int]]:
        future: Future[tuple[Position, int]] = Future()
        with self._close_lock:
            if self._closed:
                raise IngestorClosed("statetrail is shutting down; retry shortly")
            self._queue.put((export, future))
        return future

    def close(self, drain_seconds: float = DRAIN_SECONDS) -> None:
        """Take no more exports, spool what is queued, store what time allows, stop."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(None)
        self._thread.join()
        self._extractor.close(drain_seconds)
        if self._worker is not None:
            self._worker.close()
        self._spool.close()

    def _run(self) -> None:
        stopping = False
        while not stopping:
            item = self._queue.get()
            if item is None:
                break
            pending = [item]
            size = len(item[0].frame)
            while len(pending) < MAX_EXPORTS_PER_APPEND and size < MAX_BYTES_PER_APPEND:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stopping = True
                    break
                pending.append(more)
                size += len(more[0].frame)
            self._append(pending)

    def _append(self, pending: list[tuple[Packed, Future[tuple[Position, int]]]]) -> None:
        queued_ahead = self._extractor.backlog_bytes()
        try:
            ends = self._spool.append([export for export, _ in pending], time.time_ns())
        except Exception as exc:
            # Anything else is a bug, and must not end this thread: no export
            # would ever be acknowledged again.
            if not isinstance(exc, SpoolError):
                logger.exception("could not spool exports")
                exc = SpoolError(f"could not spool the export: {exc}")
            logger.error("%s", exc)
            for _, future in pending:
                future.set_exception(exc)
            return
        self._extractor.notify()
        for (export, future), end in zip(pending, ends, strict=True):
            future.set_result((end, queued_ahead))
            queued_ahead += len(export.frame)


def _rejection_message(rejected: list[RejectedSpan]) -> str:
    if not rejected:
        return ""
    first = rejected[0]
    more = f" (and {len(rejected) - 1} more)" if len(rejected) > 1 else ""
    return f"rejected {len(rejected)} span(s): span {first.name!r}: {first.reason}{more}"
