"""The ingest pipeline shared by every transport: decode -> extract -> durable write.

Transports (gRPC, HTTP) call `Ingestor.ingest` from their worker threads. The
decoding happens on the caller's thread; the writes go to one writer thread that
commits whatever has queued up in a single transaction (group commit), so many
concurrent exporters share one fsync instead of each paying for its own. A call
returns only after its data is committed, which is the moment a transport may
acknowledge the export.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass

from collector.decode import ExportRequestPB2, RejectedSpan, SpanRecord, iter_spans
from collector.foreground import Foreground
from collector.junjo import extract
from collector.store import IngestBatch, Store, StoreError, WriteResult

logger = logging.getLogger(__name__)

# Enough to amortize a commit across every exporter that is likely to be waiting,
# small enough that one transaction stays well under the WAL checkpoint threshold.
MAX_BATCHES_PER_COMMIT = 64


@dataclass(frozen=True, slots=True)
class IngestOutcome:
    accepted_spans: int
    rejected_spans: int
    error_message: str


class IngestorClosed(RuntimeError):
    """The server is shutting down and takes no new exports."""


class Ingestor:
    """Owns the writer thread; safe to call from any number of threads."""

    def __init__(
        self,
        store: Store,
        on_commit: Callable[[WriteResult], None] | None = None,
        foreground: Foreground | None = None,
    ) -> None:
        self._store = store
        self._on_commit = on_commit
        self._foreground = foreground or Foreground()
        self._queue: queue.Queue[tuple[IngestBatch, Future[WriteResult]] | None] = queue.Queue()
        self._closed = False
        self._close_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="statetrail-writer", daemon=True)
        self._thread.start()

    def ingest(self, request: ExportRequestPB2) -> IngestOutcome:
        """Decode, extract and durably store one request.

        Raises StoreError when the write failed (nothing of it was stored) and
        IngestorClosed during shutdown; both mean "do not acknowledge, retry".
        """
        # Decoding and extraction hold the interpreter lock for tens of ms per
        # request, so both give way to studio requests between spans.
        spans: list[SpanRecord] = []
        rejected: list[RejectedSpan] = []
        for record in iter_spans(request):
            self._foreground.give_way()
            if isinstance(record, SpanRecord):
                spans.append(record)
            else:
                rejected.append(record)
        if spans:
            batch = IngestBatch(spans=spans, evidence=extract(self._paced(spans)))
            self._submit(batch).result()
        return IngestOutcome(
            accepted_spans=len(spans),
            rejected_spans=len(rejected),
            error_message=_rejection_message(rejected),
        )

    def _paced(self, spans: list[SpanRecord]) -> Iterator[SpanRecord]:
        for span in spans:
            self._foreground.give_way()
            yield span

    def _submit(self, batch: IngestBatch) -> Future[WriteResult]:
        future: Future[WriteResult] = Future()
        with self._close_lock:
            if self._closed:
                raise IngestorClosed("statetrail is shutting down; retry shortly")
            self._queue.put((batch, future))
        return future

    def close(self) -> None:
        """Stop taking exports, finish everything already queued, stop the writer."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        stopping = False
        while not stopping:
            item = self._queue.get()
            if item is None:
                break
            pending = [item]
            while len(pending) < MAX_BATCHES_PER_COMMIT:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stopping = True
                    break
                pending.append(more)
            self._commit(pending)

    def _commit(self, pending: list[tuple[IngestBatch, Future[WriteResult]]]) -> None:
        # Building the commit's Arrow tables holds the interpreter lock too.
        self._foreground.give_way()
        try:
            result = self._store.write([batch for batch, _ in pending])
        except Exception as exc:
            # Catching more than StoreError is deliberate: a batch the store
            # cannot represent (a bug upstream) must not end this thread, or no
            # export would ever be acknowledged again. And one export the store
            # refuses must not fail the others grouped with it, so a failed
            # group is retried one export at a time.
            if len(pending) > 1:
                for item in pending:
                    self._commit([item])
                return
            if isinstance(exc, StoreError):
                logger.error("write failed: %s", exc)
            else:
                logger.exception("could not store an export")
                exc = StoreError(f"could not store the export: {exc}")
            pending[0][1].set_exception(exc)
            return
        for _, future in pending:
            future.set_result(result)
        if self._on_commit is not None:
            self._on_commit(result)


def _rejection_message(rejected: list[RejectedSpan]) -> str:
    if not rejected:
        return ""
    first = rejected[0]
    more = f" (and {len(rejected) - 1} more)" if len(rejected) > 1 else ""
    return f"rejected {len(rejected)} span(s): span {first.name!r}: {first.reason}{more}"
