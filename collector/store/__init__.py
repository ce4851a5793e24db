"""Storage stage: the one object that owns every read and write of the DuckDB file.

Every SQL statement in statetrail lives in this package, so moving to DuckLake
with a PostgreSQL catalog touches nothing else. This module is a facade: the
`Store` opens the file, serialises writes under one lock (writers of the
field index also take a second one: see rewrite.py), gives each call a
cursor and turns DuckDB's failures into StoreError (errors.py); the SQL is in
the submodules, one concern each: the schema (migrations.py), transactions
(transactions.py), the database's settings and checkpoints (database.py), an
ingest write (writes.py), finding executions (listing.py) and runs in flight
(in_flight.py), replay's inputs and results (replays.py, lineage.py,
run_keys.py), the field index and its filter compiler (filters.py), its
idle-time rewrite (field_layout.py) and the filter box's suggestions
(field_catalog.py), retention (retention.py), ingestion keys (keys.py), a
trace's spans (spans.py) and the spool position (spool_position.py).
rewrite.py runs field_layout.py's rewrite a step at a time under the store's
locks, without SQL. The rows a write stores are built outside this package,
without the database (collector/encode/): the extraction worker builds them
without importing DuckDB. Values are always bound parameters; identifiers
come only from allow-lists.

Writes: `write` stores a group of decoded batches in one transaction, with the
intake spool position they were read up to (collector/intake/extractor.py), and
returns only after COMMIT. It is `prepare_write` (the Arrow rows, built without
the database: collector/encode/rows.py) then `commit` (writes.py).

Reads use their own cursor per call (DuckDB cursors are cheap, and a cursor is
not safe to share between threads).
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
from collector.model import Execution, Transition
from collector.producers import junjo
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

# DuckDB's client tries `import pandas` every time it binds a list parameter,
# and `import dateutil.relativedelta` for every parameter it binds. Without
# those packages installed each try searches sys.path again: ~8% of the
# server's CPU under load for pandas, and ~40% of the Python time of an ingest
# write for dateutil. Recording the absence once makes every later try instant.
_OPTIONAL_IMPORTS = {"pandas": ("pandas",), "dateutil": ("dateutil", "dateutil.relativedelta")}
for _package, _modules in _OPTIONAL_IMPORTS.items():
    if importlib.util.find_spec(_package) is None:
        for _module in _modules:
            sys.modules.setdefault(_module, None)  # type: ignore[arg-type]


# The first time DuckDB scans an Arrow table (every ingest write does) it
# imports pyarrow.dataset, to tell datasets and scanners apart from tables.
# That loads Arrow's dataset, Parquet, ORC, Acero, Substrait and S3, GCS,
# Azure and HDFS libraries: 22 MB of RSS for types statetrail never hands
# DuckDB. Marked absent, DuckDB takes them for missing and scans tables as
# before. (Set only if nothing has imported it yet.)
sys.modules.setdefault("pyarrow.dataset", None)  # type: ignore[arg-type]

_T = TypeVar("_T")
_Cursor = duckdb.DuckDBPyConnection

# Resource keys remembered as stored (Store._stored_resources): an export names
# one or two, so this covers thousands of services before it starts over.
MAX_REMEMBERED_RESOURCES = 4096
# An export waiting for the write lock interrupts a field-index rewrite's piece
# (which rolls back, to be copied again: rewrite.MAX_PREEMPTIONS), repeating
# this often until it has the lock.
PREEMPT_POLL_SECONDS = 0.05
# How long `release_memory` waits for the maintenance lock, and then for the
# cursors in use to close, before it gives up (a reopen itself takes ~15 ms).
REOPEN_WAIT_SECONDS = 2.0
# Rows appended after which the replayer opens the file again, idle or within
# a burst (`release_memory_if_grown`): ~10 MB of DuckDB's memory pinned by then,
# and a reopen empties DuckDB's cache, which the next queries fill again.
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
        # Resource keys committed by this store and not deleted since, so that a
        # write naming only those skips their INSERT (writes.insert_write). Emptied
        # whenever that may no longer hold: a failure, a reopen, a retention write.
        self._stored_resources: set[str] = set()
        # Reentrant: a writer that finds the database invalidated reopens it
        # (`_reopen_invalidated`) while it holds this lock, as every other thread does.
        self._write_lock = threading.RLock()
        self._closed = False
        # Set when DuckDB invalidated the connection (`_note_failure`).
        self._invalidated = False
        # Every cursor open on the connection, which `release_memory` waits to see closed.
        self._cursors = CursorGate()
        # Rows appended since the file was opened, roughly: what DuckDB pins grows
        # with them (`release_memory`).
        self._rows_since_open = 0
        self._connection = self._connect()
        # The WAL size at which a commit checkpoints, as DuckDB reads the setting.
        self._checkpoint_at: int | None = None
        if not read_only:
            apply_migrations(self._connection)
            self._checkpoint_on_open()
            with self._cursor() as cursor:
                self._checkpoint_at = database.checkpoint_threshold_bytes(cursor)
        # Held through a call of the field-index rewrite (compact_field_index_if_due),
        # and by `close`, which drops the rewrite's copy.
        self._maintenance_lock = threading.Lock()
        # Held by every writer of the field index's tables (replays, prunes, the
        # rewrite's swap), which ingest does not write: a swap never holds up
        # storing. Taken after the maintenance lock, before the write lock.
        self._field_index_lock = threading.Lock()
        # The field-index rewrite in progress, if any, and the cursor of its step.
        self._rewriter = rewrite.Rewriter()
        if not read_only:
            # This process is the file's only writer, so it hands out chunk ids.
            # (On a cursor of its own: a result left open on the connection
            # keeps a transaction open, and that blocks every checkpoint.)
            with self._cursor() as cursor:
                self._next_chunk_id = span_reads.next_chunk_id(cursor)

    def _connect(self, memory_limit: str | None = None) -> duckdb.DuckDBPyConnection:
        """A connection to the file, with this store's settings (and `memory_limit`
        rather than the configured one, if given)."""
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
        """Start from a checkpointed file: whatever an earlier crash left in the
        WAL is folded in now rather than on some later write.

        On a full disk the checkpoint cannot grow the file. Then the server
        still starts, on the file reopened with its WAL (folded in by a later
        checkpoint): it answers, keeps taking exports into the spool, and
        stores them once there is room, rather than refusing to start.
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
                # At the configured memory limit (a burst's lower one may still
                # be set): a checkpoint that runs out of memory is FATAL in
                # DuckDB, so no lower limit to save RSS here.
                if not self._read_only:
                    self.limit_memory()
                    if self._rewriter.in_progress:
                        field_layout.abandon(self._connection)
                    database.checkpoint(self._connection)
            except duckdb.Error as exc:
                # An invalidated database cannot checkpoint; what was committed
                # is in the WAL and is replayed on the next open.
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
        """`limit_memory` below the configured limit for a while (a burst:
        collector/jobs/burst_memory.py), until `limit_memory()` restores it
        (collector/store/memory.py says how work that needs more still gets it)."""
        return self._memory.lower(limit)

    @contextmanager
    def memory_raised(self, limit: str) -> Iterator[None]:
        """DuckDB's memory limit at `limit` for the block, then back to what it was.

        "What it was" is read, not the configured limit: a burst may have
        lowered it (collector/jobs/burst_memory.py). Raises StoreError if the limit
        cannot be set.
        """
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
            # Before the gate: this waits for the write lock, which `release_memory`
            # holds while it waits for the gate's cursors to close.
            self._reopen_invalidated()
        with self._cursors.admit(), self._connection_cursor() as cursor:
            yield cursor

    @contextmanager
    def _connection_cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        # Every failure leaves as StoreError, so callers (receivers, studio
        # pages, /healthz) answer "unavailable, retry" without knowing DuckDB.
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
        """Mark the connection for reopening if DuckDB invalidated it.

        After a fatal error, such as a checkpoint that could not grow the file
        on a full disk, DuckDB refuses every query on that database until it is
        opened again. Left so, storing would stop until a restart, however soon
        there is room again, and /healthz would answer 503 meanwhile.
        """
        self._stored_resources.clear()
        if isinstance(error, duckdb.FatalException) and connection is self._connection:
            self._invalidated = True

    def _reopen_invalidated(self) -> None:
        """Open the invalidated database again. Raises StoreError (and stays
        marked, so that the next use tries again)."""
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
                    # A commit whose automatic checkpoint failed is durable, though
                    # it raised: the chunk ids it took are in the file.
                    with closing(self._connection.cursor()) as cursor:
                        self._next_chunk_id = span_reads.next_chunk_id(cursor)
            except duckdb.Error as exc:
                raise StoreError(f"could not open the database again: {exc}") from exc
            self._invalidated = False

    def release_memory(self) -> bool:
        """Close the file and open it again, to let go of memory DuckDB keeps
        for as long as a database is open, and never evicts.

        Rows appended in commits that do not fill whole vectors keep version
        information pinned in DuckDB's buffer pool, ~2 bytes a row of every
        table written since the file was opened (measured with duckdb 1.5.5:
        December 2026). A checkpoint does not free it; dropping the table or
        closing the database does. After bench_ingest's burst ~50 MB of the
        pool was pinned so, most of it the field index's rows appended by
        replay, and a field-index rewrite at the burst's 80 MB limit ran out
        of memory in hundreds of its pieces.

        Within a burst (`lower_memory`) the file is opened at the burst's
        limit, so that a long replay does not keep less and less of the pool
        for its own work (bench_ingest's replay appends ~60M rows).

        Waits for the write lock, and up to REOPEN_WAIT_SECONDS for open
        cursors to close, while cursors asked for meanwhile wait. Returns
        whether the file was opened again: not if cursors stayed open, a call
        runs at the configured limit within a burst (memory.py), or the
        checkpoint that comes first failed (opening would then replay the WAL
        into memory).
        """
        if self._read_only or not self._maintenance_lock.acquire(timeout=REOPEN_WAIT_SECONDS):
            return False
        try:
            with self._write_lock:
                # With a timeout: whoever holds it may be waiting for the write
                # lock (a cursor on an invalidated store reopens it first).
                if not self._memory.lock.acquire(timeout=REOPEN_WAIT_SECONDS):
                    return False
                try:
                    # Asked before the gate shuts, which holds every reader back.
                    # A raised call would lose its raise to the new connection.
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
        """`release_memory` once RELEASE_AFTER_ROWS rows were appended since the
        file was opened: a server storing a steady trickle, which never settles
        a burst (collector/jobs/burst_memory.py), would pin more the longer it ran."""
        return self._rows_since_open >= RELEASE_AFTER_ROWS and self.release_memory()

    # -- writes -------------------------------------------------------------

    def write(
        self, batches: Sequence[IngestBatch], progress: tuple[int, int] | None = None
    ) -> WriteResult:
        """Store several batches in one transaction; return after COMMIT.

        `progress` is the intake spool position (segment, byte offset) after
        these batches, recorded in the same transaction (collector/intake/extractor.py).
        Raises StoreError if anything fails; then nothing of these batches is
        stored and the caller must not acknowledge them.
        """
        return self.commit(prepare_write(batches), progress)

    def commit(self, write: PreparedWrite, progress: tuple[int, int] | None = None) -> WriteResult:
        """`write`'s second half: the rows of `prepare_write`, in one transaction.

        The extractor lets the decoded batches go before calling this, so
        they are not held while DuckDB's memory peaks in the commit. A write
        that runs out of memory while the limit is lowered (`lower_memory`)
        is tried again at the configured limit, which stays for the rest of
        the burst.
        """
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
            # Reached only after COMMIT: a failed write hands out no chunk ids.
            # Ids of chunks a redelivery dropped stay unused: gaps are harmless.
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
        """The write lock, for an export: a rewrite's piece in the way is interrupted,
        and lets the export have the lock before it is tried again.

        The interrupt is repeated while the lock is not free: one sent just
        before the piece's statement began would be lost.
        """
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
        """Runs in flight (in_flight.py), known by Junjo's conventions for spans' runs.

        With `matching`, only those the query could list: none when it filters by
        what a run in flight does not have yet (a field value, a workflow name, ...).
        One run (`run_id`) is looked for among the recent spans first and then among
        all of them, so the page of a run whose process died long ago still opens.
        """
        if matching is not None and not in_flight.could_match(matching):
            return []
        find = functools.partial(
            in_flight.in_flight,
            in_run_types=junjo.IN_RUN_SPAN_TYPES,
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
        """The spans of these traces and these carrier spans: see replays.evidence_spans_for."""
        spans = list(carriers)  # read twice if the first try runs out of memory
        return self._read(lambda cursor: replays.evidence_spans_for(cursor, trace_ids, spans))

    def replay_batch(
        self, store_ids: Sequence[str], storeless_runs: Sequence[str] = ()
    ) -> replays.ReplayBatch:
        """The executions owning these stores, plus these storeless runs, and all
        their evidence, read in one snapshot: see replays.replay_batch."""
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
        """Replace what is stored about these executions' replays, atomically.

        `parents` are (child run id, enclosing run id) pairs found by the walk
        in collector/replay/lineage.py, linked in the same transaction. `run_keys`
        (`ReplayBatch.run_keys`) spare the save looking the runs up by id.
        """
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
        """Rewrite the field index in sort order if enough rows were appended since.

        Returns whether a rewrite finished in this call. The sorted copy is
        built beside the live tables (field_layout.py), a bounded piece at a
        time, each step in a transaction of its own, so no step holds a lock
        for long and exports, replays and prunes go on meanwhile (rewrite.py
        says which lock each step takes). A filter reads the old tables or the
        new, never a mix. Once swapped in, a checkpoint frees the old tables' blocks.

        `pause` is asked after every step: True leaves the rest to the next
        call, which resumes where this one stopped. The replayer calls this when
        idle; `interrupt_maintenance` cuts the step in progress short (it rolls
        back; the next call repeats it). Raises StoreError.
        """
        host = rewrite.Host(
            self._cursor, self._write_lock, self._field_index_lock, self.checkpoint
        )
        with self._maintenance_lock:
            if not self._rewriter.run(host, policy, pause):
                return False
        # The old tables' blocks are free for reuse only once checkpointed; if
        # this fails, the next automatic checkpoint does it.
        with suppress(StoreError):
            self.checkpoint()
        return True

    def field_index_rewrite_wanted(
        self, policy: field_layout.CompactionPolicy = field_layout.DEFAULT_COMPACTION
    ) -> bool:
        """Whether `compact_field_index_if_due` would work now: a rewrite is in
        progress, or one is due. Raises StoreError."""
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
        # One snapshot for the spans and their chunks: a prune between the two
        # reads could otherwise take a chunk the spans still name.
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

    # -- managed ingestion keys: the SQL is in collector/store/keys.py ------
    # Writes take the write lock so they never race `close`; they are rare
    # (an operator command, or a key's last-used time at most once a minute).

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

    # -- retention: the SQL is in collector/store/retention.py ----------------
    # One bounded batch per transaction under the write lock (and the field-index
    # lock: prunes delete index rows), so ingestion commits between batches;
    # collector/jobs/pruner.py runs the loop.

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
            # Retention deletes resources no span names any more.
            self._stored_resources.clear()
            return statement(cursor)


def _name_of(statement: Callable[..., object]) -> str:
    """The store method a read was made for, for the log: `Store.replay_batch` from
    its lambda's qualified name, `counts` from a function of a SQL module."""
    qualname = getattr(statement, "__qualname__", repr(statement))
    return qualname.split(".<locals>", 1)[0]
