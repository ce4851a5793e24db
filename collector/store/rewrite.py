"""Running the field index's idle-time rewrite beside a live store, a step at a time.

field_layout.py has each step's SQL; this module decides which step runs next and
under which of the store's locks, each in a transaction of its own, so no step holds
a lock for long:
- a piece holds the write lock (its sort takes most of DuckDB's memory), but an
  export that wants it interrupts the piece, which is copied again after the export
  (through, after MAX_PREEMPTIONS in a row); a checkpoint follows each piece;
- replays and prunes meanwhile note the runs whose rows they change;
- the swap brings those runs up to date and swaps the copy in under the field-index
  lock (exports do not write the index), in one transaction.

Invariant: every run has exactly its live rows in the copy when it is swapped in, and
a filter reads the old tables or the new, never a mix. One call runs at a time (the
store's maintenance lock); the next resumes where the last stopped.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass, field
from typing import TypeVar

import duckdb

from collector.foreground import Foreground
from collector.store import field_layout
from collector.store.errors import StoreError
from collector.store.transactions import transaction

_T = TypeVar("_T")

# A rewrite swaps its copy in once at most this many runs changed since its last
# catch-up (the index scans cost the same for one run as for this many)...
SWAP_REFRESH_RUNS = 2_000
# ... or after this many catch-ups, whatever changed during the last one.
MAX_CATCH_UPS = 3
# A piece preempted this many times in a row is copied through, so a steady trickle
# of exports cannot keep the rewrite from ever finishing. (Shrinking preempted pieces
# instead was slower: each smaller piece scans the whole unsorted source.)
MAX_PREEMPTIONS = 3
# Exports waiting for the write lock take it before a piece does (else the rewrite
# wins it back at once and is preempted again); a piece waits at most this long, so
# the rewrite still gets its turn under a steady queue of exports.
EXPORTS_FIRST_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class Host:
    """What a call of the rewrite borrows from its store: cursors that raise StoreError,
    the store's locks, and its checkpoint."""

    cursor: Callable[[], AbstractContextManager[duckdb.DuckDBPyConnection]]
    write_lock: AbstractContextManager[object]
    field_index_lock: AbstractContextManager[object]
    checkpoint: Callable[[], None]


@dataclass(slots=True)
class Rewrite:
    """A rewrite in progress: what is copied, and what changed since it began.

    `touched` and `swept` are only changed under the store's field-index lock.
    """

    pieces: list[field_layout.Piece] | None = None  # planned by `begin`, then `plan_merge`
    merge_planned: bool = False
    copied: int = 0  # pieces copied
    preempted: int = 0  # times in a row an export interrupted the next piece
    touched: set[int] = field(default_factory=set)  # keys of runs whose rows changed since
    swept: bool = False  # orphaned rows were deleted since
    refreshed_rows: int = 0  # field_values rows copied out of sort order

    def take_changes(self) -> tuple[set[int], bool]:
        """The changes noted so far, forgetting them (a caller that fails puts them back)."""
        changes = self.touched, self.swept
        self.touched, self.swept = set(), False
        return changes


class Rewriter:
    """A store's rewrite of its field index, from the call that finds it due to the swap."""

    def __init__(self) -> None:
        self._rewrite: Rewrite | None = None
        self._step_cursor: duckdb.DuckDBPyConnection | None = None
        self._preemptible: duckdb.DuckDBPyConnection | None = None
        self._preempted = False
        self._stopping = False
        self.exports_first = Foreground(EXPORTS_FIRST_SECONDS)
        # Since the store opened (read by bench_filter_store and tests).
        self.preemptions = 0
        self.forced_pieces = 0

    @property
    def in_progress(self) -> bool:
        """A rewrite began and has not been swapped in (the next `run` resumes it)."""
        return self._rewrite is not None

    def run(
        self, host: Host, policy: field_layout.CompactionPolicy, pause: Callable[[], bool]
    ) -> bool:
        """Start a rewrite if due, or resume the one in progress; whether it was swapped in.
        `pause` is asked after every step. Raises StoreError (the failed step rolled back
        and the next call repeats it)."""
        rewrite = self._rewrite or self._start(host, policy)
        if rewrite is None:
            return False
        if rewrite.pieces is None:
            rewrite.pieces = self._step(host, field_layout.begin)
        while rewrite.copied < len(rewrite.pieces) or not rewrite.merge_planned:
            if rewrite.copied == len(rewrite.pieces):
                rewrite.pieces += self._step(host, field_layout.plan_merge)
                rewrite.merge_planned = True
                continue
            piece = rewrite.pieces[rewrite.copied]
            if self._copy_piece(host, piece, preemptible=rewrite.preempted < MAX_PREEMPTIONS):
                rewrite.copied += 1
                rewrite.preempted = 0
                self._checkpoint(host)
            else:
                rewrite.preempted += 1
            if pause() or self._stopping:
                return False
        for _ in range(MAX_CATCH_UPS):
            with host.field_index_lock:
                if len(rewrite.touched) <= SWAP_REFRESH_RUNS and not rewrite.swept:
                    self._swap(host, rewrite)
                    return True
                run_keys, sweep = rewrite.take_changes()
            self._catch_up(host, rewrite, run_keys, sweep)
            if pause() or self._stopping:
                return False
        # Still busy after every catch-up: what changed during the last one is
        # little enough to bring up to date under the lock.
        with host.field_index_lock:
            self._swap(host, rewrite)
        return True

    def note_writes(self, run_keys: Iterable[int] = (), swept: bool = False) -> None:
        """Note the keys of runs whose field-index rows change, for a rewrite in
        progress (the caller holds the field-index lock)."""
        rewrite = self._rewrite
        if rewrite is not None:
            rewrite.touched.update(run_keys)
            rewrite.swept |= swept

    def preempt(self) -> None:
        """Interrupt the piece in progress if an export may (one waiting for the write lock)."""
        piece = self._preemptible
        if piece is not None:
            self._preempted = True
            piece.interrupt()

    def interrupt(self) -> None:
        """Cut the step in progress short (it rolls back; the next `run` repeats it)."""
        cursor = self._step_cursor
        if cursor is not None:
            cursor.interrupt()

    def stop(self) -> None:
        """Interrupt the step in progress and start no other: the store is closing."""
        self._stopping = True
        self.interrupt()

    def _start(self, host: Host, policy: field_layout.CompactionPolicy) -> Rewrite | None:
        """A new rewrite if one is due, noting changes from now on (under the field-index
        lock, so no change the pieces may miss goes unnoted)."""
        with host.field_index_lock, host.cursor() as cursor:
            if self._stopping or not policy.due(field_layout.layout(cursor)):
                return None
            self._rewrite = Rewrite()
            return self._rewrite

    def _copy_piece(self, host: Host, piece: field_layout.Piece, *, preemptible: bool) -> bool:
        """Copy one piece under the write lock; False if an export preempted it.

        The sort takes what DuckDB's memory limit allows, so a write beside it could
        run out of memory (and a failed rollback invalidates the database).
        """
        self.exports_first.give_way()
        with host.write_lock:
            self._preempted = False
            try:
                self._step(
                    host,
                    functools.partial(field_layout.copy_piece, piece=piece),
                    preemptible=preemptible,
                )
            except StoreError:
                if self._preempted and not self._stopping:
                    self.preemptions += 1
                    return False
                raise
        self.forced_pieces += not preemptible
        return True

    def _checkpoint(self, host: Host) -> None:
        """Fold the piece just copied into the file, exports waiting for the write lock
        first: a checkpoint's time grows with the rows written since the last, and
        one after the swap would hold an export's commit. If it fails, the next one
        folds this piece in too."""
        self.exports_first.give_way()
        with suppress(StoreError):
            host.checkpoint()

    def _catch_up(self, host: Host, rewrite: Rewrite, run_keys: set[int], sweep: bool) -> None:
        """Bring the runs changed so far up to date in the copy, holding no lock."""
        try:
            rewrite.refreshed_rows += self._step(
                host, functools.partial(field_layout.refresh_runs, run_keys=run_keys, sweep=sweep)
            )
        except StoreError:
            with host.field_index_lock:
                rewrite.touched |= run_keys
                rewrite.swept |= sweep
            raise

    def _swap(self, host: Host, rewrite: Rewrite) -> None:
        """The last changes, then the swap (the caller holds the field-index lock)."""
        def statement(cursor: duckdb.DuckDBPyConnection) -> int:
            refreshed = field_layout.refresh_runs(cursor, rewrite.touched, rewrite.swept)
            return field_layout.swap(cursor, rewrite.refreshed_rows + refreshed)

        self._step(host, statement)
        self._rewrite = None

    def _step(
        self,
        host: Host,
        statement: Callable[[duckdb.DuckDBPyConnection], _T],
        *,
        preemptible: bool = False,
    ) -> _T:
        """One step in a transaction of its own, on a cursor that `interrupt` can
        reach, and, if `preemptible`, an export too (`preempt`)."""
        with host.cursor() as cursor:
            self._step_cursor = cursor
            self._preemptible = cursor if preemptible else None
            try:
                with transaction(cursor, "could not sort the field index"):
                    return statement(cursor)
            finally:
                self._step_cursor = self._preemptible = None
