"""Storage stage: the `Store` facade, the one object that owns every read and write.

Every SQL statement lives in this package, one concern per submodule (the map is in
docs/architecture.md); this module opens the file, serialises writes under one lock,
gives each call a cursor of its own (a cursor is not safe to share between threads)
and turns DuckDB's failures into StoreError. Values are always bound parameters;
identifiers come only from allow-lists. A write returns only after COMMIT.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager, suppress
from pathlib import Path
from typing import TypeVar

import duckdb

from collector.encode import span_bytes
from collector.encode.rows import IngestBatch as IngestBatch
from collector.encode.rows import PreparedWrite as PreparedWrite
from collector.encode.rows import prepare_write as prepare_write
from collector.index.fields import FieldIndex
from collector.index.query_ast import Path as FieldPath
from collector.model import Execution, RunStart, Transition
from collector.producers import convention, junjo
from collector.replay.snapshot import Snapshot
from collector.store import (
    database,
    field_catalog,
    field_layout,
    filters,
    in_flight,
    keys,
    lineage,
    listing,
    prepared,
    replays,
    retention,
    rewrite,
    spool_position,
    writes,
)
from collector.store import spans as span_reads
from collector.store.cursor_gate import CursorGate
from collector.store.errors import StoreError as StoreError
from collector.store.errors import StoreLocked as StoreLocked
from collector.store.errors import StoreOutOfMemory as StoreOutOfMemory
from collector.store.keys import ApiKey as ApiKey
from collector.store.keys import KeyNameTaken as KeyNameTaken
from collector.store.memory import MemoryLimit
from collector.store.migrations import apply_migrations
from collector.store.prepared import WriteResult as WriteResult
from collector.store.transactions import failure_of, read_snapshot, transaction

logger = logging.getLogger(__name__)

# DuckDB's client tries `import pandas` and `import dateutil.relativedelta` on every
# bind, searching sys.path again each time; recording their absence makes that instant.
_OPTIONAL_IMPORTS = {"pandas": ("pandas",), "dateutil": ("dateutil", "dateutil.relativedelta")}
for _package, _modules in _OPTIONAL_IMPORTS.items():
    if importlib.util.find_spec(_package) is None:
        for _module in _modules:
            sys.modules.setdefault(_module, None)  # type: ignore[arg-type]


# DuckDB's first Arrow scan imports pyarrow.dataset (Parquet, Acero, cloud file
# systems...) only to tell datasets from tables; marked absent, it scans tables as before.
sys.modules.setdefault("pyarrow.dataset", None)  # type: ignore[arg-type]

_T = TypeVar("_T")
_Cursor = duckdb.DuckDBPyConnection

# Resource keys remembered as stored: an export names one or two.
MAX_REMEMBERED_RESOURCES = 4096
# How often an export waiting for the write lock interrupts a field-index rewrite's piece.
PREEMPT_POLL_SECONDS = 0.05
# How long `release_memory` waits for the maintenance lock, then for open cursors.
REOPEN_WAIT_SECONDS = 2.0
# Rows appended after which the file is opened again (docs/memory.md, "Opening the
# file again"): the pinned memory grows with them, and a reopen empties DuckDB's cache.
RELEASE_AFTER_ROWS = 5_000_000


class Store:
    """A DuckDB file opened by this process, with its schema migrated."""

    def __init__(
        self,
        path: Path | str,
        *,
        checkpoint_threshold: str = "128MB",
        memory_limit: str | None = None,
        threads: int | None = None,
        read_only: bool = False,
    ) -> None:
        self.path = Path(path)
        self._read_only = read_only
        self._memory = MemoryLimit(memory_limit, self._set_memory_limit)
        self._threads = threads
        self._checkpoint_threshold = checkpoint_threshold
        self._next_chunk_id = 1
        # Resource keys committed and not deleted since, whose INSERT a write skips;
        # emptied whenever that may no longer hold (a failure, a reopen, retention).
        self._stored_resources: set[str] = set()
        # Reentrant: a writer that finds the database invalidated reopens it under it.
        self._write_lock = threading.RLock()
        self._closed = False
        self._invalidated = False
        self._cursors = CursorGate()
        # Roughly: what DuckDB pins grows with them (`release_memory`).
        self._rows_since_open = 0
        self._connection = self._connect()
        self._checkpoint_at: int | None = None
        if not read_only:
            apply_migrations(self._connection)
            self._checkpoint_on_open()
            with self._cursor() as cursor:
                self._checkpoint_at = database.checkpoint_threshold_bytes(cursor)
        # Held through a field-index rewrite call, and by `close`, which drops its copy.
        self._maintenance_lock = threading.Lock()
        # Held by every writer of the field index (replays, prunes, the rewrite's swap),
        # which ingest does not write, so a swap never holds up storing. Lock order:
        # maintenance, field index, write.
        self._field_index_lock = threading.Lock()
        self._rewriter = rewrite.Rewriter()
        if not read_only:
            # The file's only writer hands out chunk ids. On a cursor of its own: a
            # result left open on the connection would block every checkpoint.
            with self._cursor() as cursor:
                self._next_chunk_id = span_reads.next_chunk_id(cursor)

    def _connect(self, memory_limit: str | None = None) -> duckdb.DuckDBPyConnection:
        """A connection with this store's settings (`memory_limit` over the configured one)."""
        try:
            return database.connect(
                str(self.path),
                read_only=self._read_only,
                memory_limit=memory_limit or self._memory.configured,
                threads=self._threads,
                checkpoint_threshold=None if self._read_only else self._checkpoint_threshold,
            )
        except duckdb.IOException as exc:
            raise StoreLocked(f"cannot open {self.path}: {exc}") from exc

    def _checkpoint_on_open(self) -> None:
        """Fold in what an earlier crash left in the WAL now, not on some later write.

        On a full disk the server still starts with the WAL kept: it answers, spools
        exports and stores them once there is room.
        """
        try:
            database.checkpoint(self._connection)
        except duckdb.Error as exc:
            logger.warning("could not checkpoint %s on open, keeping its WAL: %s", self.path, exc)
            self._note_failure(self._connection, exc)

    def close(self) -> None:
        """Checkpoint and close, so the next open does not replay a long WAL.

        A field-index rewrite in progress is cut short and its copy dropped.
        """
        self._rewriter.stop()
        with self._maintenance_lock, self._write_lock:
            if self._closed:
                return
            self._closed = True
            try:
                # At the configured limit: a checkpoint that runs out of memory is FATAL.
                if not self._read_only:
                    self.limit_memory()
                    if self._rewriter.in_progress:
                        field_layout.abandon(self._connection)
                    database.checkpoint(self._connection)
            except duckdb.Error as exc:
                # What was committed is in the WAL and is replayed on the next open.
                logger.warning("checkpoint on close failed: %s", exc)
            finally:
                self._connection.close()

    def limit_memory(self, limit: str | None = None) -> bool:
        """Set DuckDB's memory limit; None restores the configured one.

        Lowering it evicts cached blocks. Returns False, changing nothing, if
        DuckDB cannot free that much or the database is not available.
        """
        return self._memory.limit(limit)

    def _set_memory_limit(self, target: str) -> bool:
        try:
            with self._cursor() as cursor:
                database.set_memory_limit(cursor, target)
        except StoreError as exc:
            logger.debug("memory limit %s refused: %s", target, exc)
            return False
        return True

    def lower_memory(self, limit: str) -> bool:
        """`limit_memory` below the configured limit during a burst, until `limit_memory()`
        restores it (memory.py: how work that needs more still gets it)."""
        return self._memory.lower(limit)

    @contextmanager
    def memory_raised(self, limit: str) -> Iterator[None]:
        """DuckDB's memory limit at `limit` for the block, then back to what it was
        (read, not configured: a burst may have lowered it). Raises StoreError."""
        before = self.memory_limit()
        if not self.limit_memory(limit):
            raise StoreError(f"could not raise DuckDB's memory limit to {limit}")
        try:
            yield
        finally:
            if not self.limit_memory(before.replace(" ", "")):
                logger.warning("could not restore DuckDB's memory limit to %s", before)

    def memory_limit(self) -> str:
        """DuckDB's memory limit now, as DuckDB prints it ("122.0 MiB")."""
        return self._read(database.memory_limit)

    def wal_bytes(self) -> int:
        """Size of the write-ahead log not yet folded into the file."""
        try:
            return self.path.with_name(self.path.name + ".wal").stat().st_size
        except FileNotFoundError:
            return 0

    def wal_room(self) -> int | None:
        """How much more the WAL may grow before a commit makes DuckDB checkpoint
        (inside that commit); None when the threshold is unknown."""
        threshold = self._checkpoint_at
        return None if threshold is None else max(0, threshold - self.wal_bytes())

    def checkpoint(self) -> None:
        """Fold the WAL into the file now. Raises StoreError."""
        with self._write_lock, self._cursor() as cursor:
            database.checkpoint(cursor)

    def _read(self, statement: Callable[[_Cursor], _T]) -> _T:
        """`statement` on a cursor of its own (at any limit: collector/store/memory.py)."""
        def read() -> _T:
            with self._cursor() as cursor:
                return statement(cursor)

        return self._memory.at_any_limit(read, _name_of(statement))

    @contextmanager
    def _cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        if self._invalidated:
            # Before the gate: `release_memory` holds the write lock while it drains the gate.
            self._reopen_invalidated()
        with self._cursors.admit(), self._connection_cursor() as cursor:
            yield cursor

    @contextmanager
    def _connection_cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        # Every failure leaves as StoreError: callers answer "unavailable" without DuckDB.
        connection = self._connection
        try:
            cursor = connection.cursor()
        except duckdb.Error as exc:
            self._note_failure(connection, exc)
            raise StoreError(f"the database is not available: {exc}") from exc
        try:
            yield cursor
        except duckdb.Error as exc:
            self._note_failure(connection, exc)
            raise failure_of(exc, "the database could not answer") from exc
        except StoreError as exc:
            # transactions.transaction has turned DuckDB's error into a StoreError already.
            self._note_failure(connection, exc.__cause__)
            raise
        finally:
            cursor.close()

    def _note_failure(
        self, connection: duckdb.DuckDBPyConnection, error: BaseException | None
    ) -> None:
        """Mark the connection for reopening if DuckDB invalidated it: after a fatal
        error (a full disk) DuckDB refuses every query until the file is opened again."""
        self._stored_resources.clear()
        if isinstance(error, duckdb.FatalException) and connection is self._connection:
            self._invalidated = True

    def _reopen_invalidated(self) -> None:
        """Open the invalidated database again. Raises StoreError, staying marked for a retry."""
        with self._write_lock:
            if not self._invalidated or self._closed:
                return
            logger.warning("DuckDB invalidated %s after a fatal error; opening it again",
                           self.path)
            # DuckDB hands out the invalidated instance while a connection to it is open.
            with suppress(duckdb.Error):
                self._connection.close()
            try:
                self._connection = self._connect()
                if not self._read_only:
                    # A commit whose checkpoint failed raised but is durable: its chunk ids count.
                    with closing(self._connection.cursor()) as cursor:
                        self._next_chunk_id = span_reads.next_chunk_id(cursor)
            except duckdb.Error as exc:
                raise StoreError(f"could not open the database again: {exc}") from exc
            self._invalidated = False

    def release_memory(self) -> bool:
        """Close the file and open it again, to free the version information DuckDB
        pins for rows appended in small commits until the database is closed
        (docs/memory.md, "Opening the file again"). Within a burst it reopens at the
        burst's limit.

        Returns whether it reopened: not if cursors stayed open past
        REOPEN_WAIT_SECONDS, a raised call is running, or the checkpoint first failed
        (opening would then replay the WAL into memory).
        """
        if self._read_only or not self._maintenance_lock.acquire(timeout=REOPEN_WAIT_SECONDS):
            return False
        try:
            with self._write_lock:
                # With a timeout: its holder may be waiting for the write lock.
                if not self._memory.lock.acquire(timeout=REOPEN_WAIT_SECONDS):
                    return False
                try:
                    # Before the gate shuts; a raised call would lose its raise on reopening.
                    if self._closed or self._invalidated or self._memory.raised:
                        return False
                    with self._cursors.drained(REOPEN_WAIT_SECONDS) as idle:
                        return idle and self._open_again()
                finally:
                    self._memory.lock.release()
        finally:
            self._maintenance_lock.release()

    def _open_again(self) -> bool:
        """Checkpoint, close and connect (the caller holds every cursor back)."""
        started = time.monotonic()
        try:
            database.checkpoint(self._connection)
        except duckdb.Error as exc:
            self._note_failure(self._connection, exc)
            logger.warning("kept %s open: the checkpoint before reopening it failed: %s",
                           self.path, exc)
            return False
        self._connection.close()
        try:
            self._connection = self._connect(self._memory.lowered_to)
        except (duckdb.Error, StoreError) as exc:
            # Marked like a fatal error: the next cursor tries to open it again.
            self._invalidated = True
            logger.error("could not open %s again: %s", self.path, exc)
            return False
        logger.info("opened %s again to release DuckDB's pinned memory, %d rows after "
                    "opening it (%.0f ms)", self.path, self._rows_since_open,
                    1000 * (time.monotonic() - started))
        self._rows_since_open = 0
        return True

    def release_memory_if_grown(self) -> bool:
        """`release_memory` once RELEASE_AFTER_ROWS rows were appended: a steady trickle,
        which never settles a burst, would otherwise pin more the longer it ran."""
        return self._rows_since_open >= RELEASE_AFTER_ROWS and self.release_memory()

    # -- writes -------------------------------------------------------------

    def write(
        self, batches: Sequence[IngestBatch], progress: tuple[int, int] | None = None
    ) -> WriteResult:
        """Store several batches, and the spool position (`progress`) after them, in one
        transaction. Raises StoreError, and then nothing of them is stored."""
        return self.commit(prepare_write(batches), progress)

    def commit(self, write: PreparedWrite, progress: tuple[int, int] | None = None) -> WriteResult:
        """`write`'s second half, so the caller can drop the decoded batches before
        DuckDB's memory peaks. Out of memory at a lowered limit, it is tried again at
        the configured one, which then holds for the rest of the burst."""
        try:
            return self._commit(write, progress)
        except StoreOutOfMemory as exc:
            if self._memory.lowered_to is None or not self.limit_memory():
                raise
            logger.warning("a write ran out of memory at the lowered limit (%s); trying it "
                           "again at the configured %s", exc, self._memory.configured)
        return self._commit(write, progress)

    def _commit(self, write: PreparedWrite, progress: tuple[int, int] | None) -> WriteResult:
        failure = "could not store the export"
        with self._storing(), self._cursor() as cursor:
            chunks_used = prepared.chunk_count(write)
            write = prepared.numbered_from(write, self._next_chunk_id)
            with transaction(cursor, failure):
                write = writes.insert_write(cursor, write, progress, self._stored_resources)
            # Only after COMMIT; ids a redelivery dropped stay unused (gaps are harmless).
            self._next_chunk_id += chunks_used
            self._rows_since_open += prepared.row_count(write)
            self._remember_resources(writes.resource_keys(write))
        return prepared.result_of(write)

    def _remember_resources(self, keys: Iterable[str]) -> None:
        """Note resource keys as stored; bounded, since an exporter may send any number."""
        if len(self._stored_resources) >= MAX_REMEMBERED_RESOURCES:
            self._stored_resources.clear()
        self._stored_resources.update(keys)

    @contextmanager
    def _storing(self) -> Iterator[None]:
        """The write lock for an export, interrupting a rewrite's piece in the way
        (repeatedly: one sent just before the piece's statement began would be lost)."""
        if not self._write_lock.acquire(blocking=False):
            with self._rewriter.exports_first.serving():
                while True:
                    self._rewriter.preempt()
                    if self._write_lock.acquire(timeout=PREEMPT_POLL_SECONDS):
                        break
        try:
            yield
        finally:
            self._write_lock.release()

    # -- reads --------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        return self._read(database.counts)

    def stored_spool_position(self) -> tuple[int, int]:
        """(segment, byte offset) of the intake spool stored so far."""
        return self._read(spool_position.read)

    def get_execution(self, run_id: str) -> Execution | None:
        return self._read(lambda cursor: replays.execution(cursor, run_id))

    def replay_snapshot(self, run_id: str) -> Snapshot | None:
        """The snapshot the replayer saved of a long history (collector/replay/snapshot.py)."""
        return self._read(lambda cursor: replays.snapshot(cursor, run_id))

    def store_runs(self, store_id: str) -> list[replays.StoreRun]:
        """The convention runs of one store (a LangGraph thread), in sequence order."""
        return self._read(lambda cursor: replays.store_runs(cursor, store_id))

    def run_start(self, run_id: str) -> RunStart | None:
        """A convention run's start event, stored before (or without) its owner span."""
        return self._read(lambda cursor: replays.run_start(cursor, run_id))

    def transitions_for_store(self, store_id: str) -> list[Transition]:
        return self.transitions_for_stores([store_id])[store_id]

    # -- finding executions -------------------------------------------------------

    def search(self, query: listing.ExecutionQuery) -> list[listing.ExecutionRow]:
        return self._read(lambda cursor: listing.search(cursor, query))

    def facets(
        self, query: listing.ExecutionQuery, names: Sequence[listing.FacetName]
    ) -> dict[listing.FacetName, list[tuple[str, int]]]:
        return self._read(lambda cursor: listing.facets(cursor, query, names))

    def run_ids_starting(self, prefix: str, limit: int = 2) -> list[str]:
        return self._read(lambda cursor: listing.run_ids_starting(cursor, prefix, limit))

    def partly_indexed(self, query: listing.ExecutionQuery) -> int:
        return self._read(lambda cursor: listing.partly_indexed(cursor, query))

    def final_values(
        self, run_ids: Sequence[str], paths: Sequence[FieldPath]
    ) -> dict[tuple[str, str], filters.FieldValue]:
        return self._read(lambda cursor: filters.final_values(cursor, run_ids, paths))

    def final_matches(
        self, run_ids: Sequence[str], pattern: FieldPath, first: int
    ) -> dict[str, filters.Matches]:
        return self._read(lambda cursor: filters.final_matches(cursor, run_ids, pattern, first))

    def field_kinds(self, path: FieldPath) -> set[str]:
        return self._read(lambda cursor: filters.kinds_at(cursor, path))

    def field_children(self, parent: FieldPath, limit: int = 500) -> list[str]:
        return self._read(lambda cursor: filters.child_paths(cursor, parent, limit))

    def field_paths(
        self, workflow: str | None = None
    ) -> tuple[int, list[field_catalog.PathCount]]:
        """The end-state paths of the newest runs (of `workflow`): (runs sampled, paths)."""
        def statement(cursor: _Cursor) -> tuple[int, list[field_catalog.PathCount]]:
            keys = field_catalog.sample_run_keys(cursor, workflow)
            return len(keys), field_catalog.paths_in(cursor, keys, workflow=workflow)

        return self._read(statement)

    def field_examples(
        self, path: FieldPath, workflow: str | None = None
    ) -> tuple[int, list[field_catalog.ValueCount]]:
        """The commonest end values of `path` in the newest runs: (runs sampled, values)."""
        def statement(cursor: _Cursor) -> tuple[int, list[field_catalog.ValueCount]]:
            keys = field_catalog.sample_run_keys(cursor, workflow)
            return len(keys), field_catalog.values_at(cursor, path, keys)

        return self._read(statement)

    def execution_row(self, run_id: str) -> listing.ExecutionRow | None:
        return self._read(lambda cursor: listing.row(cursor, run_id))

    def child_executions(self, run_id: str) -> list[listing.ExecutionRow]:
        return self._read(lambda cursor: listing.children(cursor, run_id))

    def store_run_before(
        self, store_id: str, sequence: int, exclude: Sequence[str] = ()
    ) -> listing.StoreRun | None:
        """The earlier run on a shared store that reaches closest up to `sequence`."""
        return self._read(
            lambda cursor: listing.store_run_before(cursor, store_id, sequence, exclude)
        )

    def in_flight(
        self,
        limit: int = 50,
        run_id: str | None = None,
        matching: listing.ExecutionQuery | None = None,
    ) -> list[in_flight.InFlightRow]:
        """Runs in flight (in_flight.py); with `matching`, only those the query could list.

        One `run_id` is looked for among all spans if not among recent ones, so the
        page of a run whose process died long ago still opens.
        """
        if matching is not None and not in_flight.could_match(matching):
            return []
        find = functools.partial(
            in_flight.in_flight,
            in_run_types=junjo.IN_RUN_SPAN_TYPES + convention.IN_RUN_SPAN_TYPES,
            not_run_types=junjo.NOT_RUN_PARENT_SPAN_TYPES,
            limit=limit,
            run_id=run_id,
            matching=matching,
        )
        def statement(cursor: _Cursor) -> list[in_flight.InFlightRow]:
            found = find(cursor)
            if not found and run_id is not None:
                found = find(cursor, received_since=0)
            return found

        return self._read(statement)

    def evidence_version(self, store_id: str | None, trace_id: str) -> tuple[int, int]:
        """Changes whenever evidence for this store or trace arrives (a cache key)."""
        return self._read(lambda cursor: replays.evidence_version(cursor, store_id, trace_id))

    # -- replay inputs and outputs ----------------------------------------------

    def executions_for_stores(self, store_ids: Iterable[str]) -> list[Execution]:
        ids = list(store_ids)  # read twice if the first try runs out of memory
        return self._read(lambda cursor: replays.executions_for_stores(cursor, ids))

    def transitions_for_stores(self, store_ids: Sequence[str]) -> dict[str, list[Transition]]:
        return self._read(lambda cursor: replays.transitions_for_stores(cursor, store_ids))

    def store_transitions_between(
        self, store_id: str, after: int, through: int
    ) -> list[Transition]:
        return self._read(
            lambda cursor: replays.store_transitions_between(cursor, store_id, after, through)
        )

    def evidence_spans_for(
        self, trace_ids: Sequence[str], carriers: Iterable[tuple[str, str]]
    ) -> list[replays.SpanLink]:
        spans = list(carriers)  # read twice if the first try runs out of memory
        return self._read(lambda cursor: replays.evidence_spans_for(cursor, trace_ids, spans))

    def replay_batch(
        self, store_ids: Sequence[str], storeless_runs: Sequence[str] = ()
    ) -> replays.ReplayBatch:
        """The executions and all their evidence, read in one snapshot (replays.py)."""
        return self._read(lambda cursor: replays.replay_batch(cursor, store_ids, storeless_runs))

    def stale_store_ids(self) -> list[str]:
        return self._read(replays.stale_store_ids)

    def stale_storeless_run_ids(self) -> list[str]:
        return self._read(replays.stale_storeless_run_ids)

    def save_replays(
        self,
        records: Sequence[replays.ReplayRecord],
        indexes: Sequence[FieldIndex],
        snapshots: Sequence[Snapshot] = (),
        parents: Sequence[tuple[str, str]] = (),
        run_keys: Mapping[str, int] | None = None,
    ) -> None:
        """Replace what is stored about these executions' replays, atomically, with
        their `parents` (child, enclosing run id) linked in the same transaction."""
        def save() -> None:
            with (
                self._field_index_lock,
                self._write_lock,
                self._cursor() as cursor,
                transaction(cursor, "could not save replay results"),
            ):
                self._rewriter.note_writes(
                    replays.save(cursor, records, indexes, snapshots, run_keys)
                )
                lineage.link(cursor, parents)
            self._rows_since_open += len(records) + sum(len(index.nodes) for index in indexes)

        self._memory.at_any_limit(save, "a replay save")

    def compact_field_index_if_due(
        self,
        policy: field_layout.CompactionPolicy = field_layout.DEFAULT_COMPACTION,
        pause: Callable[[], bool] = lambda: False,
    ) -> bool:
        """Rewrite the field index in sort order if due; whether a rewrite finished.

        A bounded piece at a time, each step its own transaction (rewrite.py), so
        exports, replays and prunes go on meanwhile. `pause` is asked after every
        step: True leaves the rest to the next call. Raises StoreError.
        """
        host = rewrite.Host(
            self._cursor, self._write_lock, self._field_index_lock, self.checkpoint
        )
        with self._maintenance_lock:
            if not self._rewriter.run(host, policy, pause):
                return False
        # Frees the old tables' blocks; if it fails, the next automatic checkpoint does.
        with suppress(StoreError):
            self.checkpoint()
        return True

    def field_index_rewrite_wanted(
        self, policy: field_layout.CompactionPolicy = field_layout.DEFAULT_COMPACTION
    ) -> bool:
        """Whether a rewrite is in progress or due. Raises StoreError."""
        if self._rewriter.in_progress:
            return True
        return self._read(lambda cursor: policy.due(field_layout.layout(cursor)))

    @property
    def rewriting_field_index(self) -> bool:
        """A field-index rewrite began and has not finished (it resumes on the next call)."""
        return self._rewriter.in_progress

    def interrupt_maintenance(self) -> None:
        """Cut a field-index rewrite's step short (it rolls back), so shutdown need not wait."""
        self._rewriter.interrupt()

    # -- spans of a trace, for the execution page: SQL in collector/store/spans.py --

    def spans_of_trace(self, trace_id: str) -> list[span_reads.SpanRow]:
        """Every stored span of a trace, earliest first, with its protobuf bytes."""
        # One snapshot: a prune between two reads could take a chunk the spans name.
        def statement(cursor: _Cursor) -> list[span_reads.SpanRow]:
            with read_snapshot(cursor):
                return span_reads.spans_of_trace(cursor, trace_id)

        try:
            return self._read(statement)
        except span_bytes.ChunkError as exc:
            raise StoreError(f"the spans of trace {trace_id} cannot be read: {exc}") from exc

    def resource_of_span(self, trace_id: str, span_id: str) -> span_reads.ResourceRow | None:
        """The resource and scope a stored span was sent under, with their own bytes."""
        return self._read(lambda cursor: span_reads.resource_of_span(cursor, trace_id, span_id))

    # -- managed ingestion keys (keys.py); rare writes, under the write lock --

    def create_api_key(self, name: str, key_digest: str) -> ApiKey:
        """Raises KeyNameTaken if an active key already has this name."""
        return self._keys_write(lambda c: keys.insert_key(c, name, key_digest, time.time_ns()))

    def revoke_api_key(self, name: str) -> ApiKey | None:
        return self._keys_write(lambda c: keys.revoke_key(c, name, time.time_ns()))

    def touch_api_key(self, key_digest: str) -> None:
        self._keys_write(lambda c: keys.touch_key(c, key_digest, time.time_ns()))

    def list_api_keys(self) -> list[ApiKey]:
        return self._read(keys.select_keys)

    def api_key_digests(self) -> tuple[frozenset[str], int]:
        """Digests of the active keys, and the number of keys ever created."""
        return self._read(keys.select_digests)

    def _keys_write(self, statement: Callable[[_Cursor], _T]) -> _T:
        with self._write_lock:
            return self._read(statement)

    # -- retention (retention.py): one bounded batch per transaction, so ingestion
    # commits between batches.

    def prune_batch(
        self, cutoff_unix_nano: int, max_spans: int = retention.DEFAULT_BATCH_SPANS
    ) -> retention.PruneCounts:
        """Delete one batch of traces that ended before the cutoff; zero counts when done."""
        def statement(cursor: _Cursor) -> retention.PruneCounts:
            trace_ids = retention.old_traces(cursor, cutoff_unix_nano, max_spans)
            if self._rewriter.in_progress:
                self._rewriter.note_writes(retention.runs_of_traces(cursor, trace_ids).values())
            return retention.delete_traces(cursor, trace_ids)

        return self._retention_write(statement)

    def prune_orphans(self) -> retention.PruneCounts:
        def statement(cursor: _Cursor) -> retention.PruneCounts:
            self._rewriter.note_writes(swept=True)
            return retention.delete_orphans(cursor)

        return self._retention_write(statement)

    def _retention_write(
        self, statement: Callable[[duckdb.DuckDBPyConnection], _T]
    ) -> _T:
        with (
            self._field_index_lock,
            self._write_lock,
            self._cursor() as cursor,
            transaction(cursor, "could not delete old data"),
        ):
            self._stored_resources.clear()
            return statement(cursor)


def _name_of(statement: Callable[..., object]) -> str:
    """The store method or SQL function a read was made for, for the log."""
    qualname = getattr(statement, "__qualname__", repr(statement))
    return qualname.split(".<locals>", 1)[0]
