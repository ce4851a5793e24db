"""Keeps every execution's stored replay (verdict, diagnostics, field index) current.

An execution is replayed on a background thread when its owner span arrives and again
when late transitions arrive, so no acknowledgement waits for a replay. Work is keyed
by store (one replay serves every run it holds), a storeless run by its id, so every
execution gets a stored verdict for lists and filters to read.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Protocol

from collector.evidence import EvidenceVersion, replay_with, version_of
from collector.foreground import Foreground
from collector.index.fields import FieldIndex
from collector.index.indexing import TouchedValues, field_index
from collector.jobs.burst_memory import BurstMemory
from collector.model import Execution
from collector.replay.history import History
from collector.replay.jsondoc import DEFAULT_LIMITS, DocumentLimits
from collector.replay.lineage import enclosing_runs
from collector.replay.snapshot import Snapshot, take, worth_taking
from collector.store import Store, StoreError, StoreOutOfMemory, WriteResult
from collector.store.field_layout import DEFAULT_COMPACTION, CompactionPolicy
from collector.store.replays import ReplayBatch, ReplayRecord, SpanLink

logger = logging.getLogger(__name__)

# Executions replayed and saved per transaction: few enough that fresh verdicts appear
# within a second or so and that their field-index rows (hundreds per execution) stay
# small in memory; more per save costs less CPU but raises the peak.
REPLAY_BATCH_STORES = 32
# Stores whose evidence is read at once. Each read scans whole tables (random ids: no
# zone map narrows it), which costs about as much for hundreds of stores as for a few;
# larger reads hold more memory (bench/bench_replayer.py).
READ_BATCH_STORES = 256
MAX_REST_SECONDS = 1.0
# Ingest counts as active for this long after its last commit.
INGEST_QUIET_SECONDS = 1.0
# While exports wait in the spool replays wait too, never longer than this at a time.
MAX_DEFER_SECONDS = 10.0
# First retry delay of a batch the store could not replay, doubled per failure in a row.
FIRST_RETRY_SECONDS = 0.5
MAX_RETRY_SECONDS = 30.0


@dataclass(slots=True)
class Backlog:
    """What waits to be replayed: stores, and runs that name no store (never overlapping,
    so no execution is replayed twice for one commit)."""

    stores: set[str] = field(default_factory=set)
    runs: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.stores or self.runs)

    def __len__(self) -> int:
        return len(self.stores) + len(self.runs)

    def add(self, stores: Iterable[str], runs: Iterable[str]) -> None:
        self.stores.update(stores)
        self.runs.update(runs)

    def take(self, size: int) -> Backlog:
        """Up to `size` stores and `size` runs (the least ids), removed from here.
        `nsmallest`, not a sort: a burst leaves tens of thousands waiting."""
        batch = Backlog(
            set(heapq.nsmallest(size, self.stores)), set(heapq.nsmallest(size, self.runs))
        )
        self.stores -= batch.stores
        self.runs -= batch.runs
        return batch


class HistorySink(Protocol):
    """Takes replayed histories for reuse (the studio's Inspector keeps long ones); `version`
    is read before the evidence, so evidence arriving meanwhile makes it stale."""

    def offer(self, execution: Execution, history: History, version: EvidenceVersion) -> None:
        ...


def replay_record(
    history: History, run_id: str, index: FieldIndex, now: int
) -> ReplayRecord:
    diagnostics = [asdict(d) for d in history.diagnostics]
    return ReplayRecord(
        run_id=run_id,
        verdict=history.verdict,
        diagnostics=diagnostics,
        error_count=sum(d["severity"] == "error" for d in diagnostics),
        warning_count=sum(d["severity"] == "warning" for d in diagnostics),
        received_transitions=len(history.steps),
        index_truncated=index.truncated,
        replayed_unix_nano=now,
    )


class Replayer:
    """A background thread that re-replays the executions a commit touched.

    Stores pile up in one pending set, so a burst touching the same stores costs one
    replay; storing comes first. Shutdown does not wait for the backlog: the next
    start-up finds it again (`Store.stale_store_ids`), so stopping stays quick.
    """

    def __init__(
        self,
        store: Store,
        foreground: Foreground | None = None,
        sink: HistorySink | None = None,
        burst: BurstMemory | None = None,
        compaction: CompactionPolicy = DEFAULT_COMPACTION,
        limits: DocumentLimits = DEFAULT_LIMITS,
    ) -> None:
        self._store = store
        self._limits = limits
        self._compaction = compaction
        self._foreground = foreground or Foreground()
        self._sink = sink
        self._burst = burst or BurstMemory(store, None)
        self._pending = Backlog(set(store.stale_store_ids()), set(store.stale_storeless_run_ids()))
        self._busy = bool(self._pending)
        self._stopping = False
        self._last_commit = float("-inf")
        self._storing_behind = False
        self._rewrite_paused = False
        self._failures_in_a_row = 0
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="statetrail-replayer", daemon=True)
        self._thread.start()

    def notify(self, result: WriteResult, more_to_store: bool = False) -> None:
        """A commit touched these stores and runs; `more_to_store` if exports wait behind it."""
        with self._changed:
            self._storing_behind = more_to_store
            if result.store_ids or result.storeless_run_ids:
                self._last_commit = time.monotonic()
                self._pending.add(result.store_ids, result.storeless_run_ids)
                self._busy = True
            self._changed.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until nothing is pending or being replayed; False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._busy, timeout)

    def close(self) -> None:
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        self._store.interrupt_maintenance()
        self._thread.join()

    def _run(self) -> None:
        if not self._pending:
            # An index appended to before a restart (or by an older version).
            self._compact_field_index()
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._pending or self._stopping or self._resumable())
                if self._stopping:
                    return
                resume = not self._pending
                catching_up = self._catching_up()
            if resume:
                # A rewrite paused for exports that are stored now, with nothing to replay.
                self._compact_field_index()
                continue
            if catching_up:
                self._burst.enter()
            with self._changed:
                # Storing comes first: both share one interpreter lock, a replay costs
                # more than storing, and the spool's backlog is what bounds intake.
                self._changed.wait_for(
                    lambda: self._stopping or not self._storing_behind, MAX_DEFER_SECONDS
                )
                if self._stopping:
                    return
                batch = self._pending.take(READ_BATCH_STORES)
            self._foreground.give_way()
            started = time.monotonic()
            self._replay(batch)
            with self._changed:
                settled = not self._pending and not self._storing_behind
            if settled:
                # Before "idle" is reported, so a server stopped then has little WAL left.
                self._burst.leave()
            # What appends pinned would otherwise leave replay less and less of the pool.
            self._store.release_memory_if_grown()
            with self._changed:
                idle = not self._pending
                if idle:
                    self._busy = False
                    self._changed.notify_all()
            if idle:
                if settled:
                    # Every verdict current and nothing to store: keep the index sorted.
                    self._compact_field_index()
                continue
            with self._changed:
                # While ingest commits, rest as long as the batch took (one interpreter
                # lock, storing first); once ingest is quiet, catch up at full speed.
                if time.monotonic() - self._last_commit < INGEST_QUIET_SECONDS:
                    rest = min(time.monotonic() - started, MAX_REST_SECONDS)
                    self._changed.wait_for(lambda: self._stopping, rest)

    def _resumable(self) -> bool:
        """A field-index rewrite paused, and nothing waits to be stored (hold `_changed`)."""
        return self._rewrite_paused and not self._storing_behind

    def _compact_field_index(self) -> None:
        started = time.monotonic()
        self._rewrite_paused = False
        try:
            # Asked first: lowering the limit evicts the cache the studio uses.
            if not self._store.field_index_rewrite_wanted(self._compaction):
                return
            if self._rewrite_field_index():
                logger.info(
                    "finished sorting the field index (its last step took %.1f s)",
                    time.monotonic() - started,
                )
            else:
                # Paused: resumed once idle (after a failure, at the next idle moment).
                self._rewrite_paused = self._store.rewriting_field_index
        except StoreError as exc:
            # Filters stay right, only slower; the next idle moment tries again.
            if not self._stopping:
                logger.error("could not sort the field index: %s", exc)

    def _rewrite_field_index(self) -> bool:
        """The field index's rewrite, a piece at a time, at the burst's lower memory
        limit; whether it finished. Stops for whatever else there is to do and resumes
        at the next idle moment. A step that runs out of memory is run again alone at
        the configured limit; raises StoreError if it fails there too.
        """
        while True:
            try:
                with self._burst.held():
                    return self._store.compact_field_index_if_due(
                        self._compaction, pause=self._has_work
                    )
            except StoreOutOfMemory as exc:
                logger.info("a step of the field index's rewrite ran out of memory at the "
                            "lower limit; running it at the configured one: %s", exc)
            if self._store.compact_field_index_if_due(self._compaction, pause=lambda: True):
                return True
            if self._has_work():
                return False

    def _has_work(self) -> bool:
        with self._changed:
            return bool(self._pending) or self._stopping or self._storing_behind

    def _catching_up(self) -> bool:
        # More than a batch waiting, or exports still to store: a burst, not
        # the trickle of one exporter.
        return self._storing_behind or len(self._pending) > REPLAY_BATCH_STORES

    def _replay(self, batch: Backlog) -> None:
        try:
            replay_stores(
                self._store,
                sorted(batch.stores),
                between=self._foreground.give_way,
                sink=self._sink,
                storeless_runs=sorted(batch.runs),
                limits=self._limits,
            )
        except StoreError as exc:
            # Verdicts must not stay pending until some later commit touches these
            # stores; groups saved before the failure are replayed again (replacing rows).
            self._retry_later(batch, exc)
        except Exception:
            # A replay bug on hostile evidence must not end this thread: replay the
            # stores one by one so the rest still get verdicts, and log the culprit.
            if len(batch) > 1:
                for store_id in sorted(batch.stores):
                    self._replay(Backlog(stores={store_id}))
                for run_id in sorted(batch.runs):
                    self._replay(Backlog(runs={run_id}))
                return
            logger.exception(
                "replay failed for store %s, run %s", sorted(batch.stores), sorted(batch.runs)
            )
        else:
            self._failures_in_a_row = 0

    def _retry_later(self, batch: Backlog, error: StoreError) -> None:
        """Put the batch back, and wait (longer after each failure in a row)."""
        self._failures_in_a_row += 1
        delay = min(FIRST_RETRY_SECONDS * 2 ** (self._failures_in_a_row - 1), MAX_RETRY_SECONDS)
        logger.error("replay failed (%d time(s) in a row), trying again in %.1f s: %s",
                     self._failures_in_a_row, delay, error)
        with self._changed:
            self._pending.add(batch.stores, batch.runs)
            self._changed.wait_for(lambda: self._stopping, delay)


def replay_stores(
    store: Store,
    store_ids: Sequence[str],
    between: Callable[[], object] = lambda: None,
    sink: HistorySink | None = None,
    storeless_runs: Sequence[str] = (),
    save_every: int = REPLAY_BATCH_STORES,
    limits: DocumentLimits = DEFAULT_LIMITS,
) -> int:
    """Replay and save every execution owning one of these stores (and the
    `storeless_runs`); return how many.

    The evidence is read in one snapshot; the executions are saved `save_every` at a
    time, each group in one transaction. `between` runs before each replay (to give
    way to studio requests); each history is offered to `sink`.
    """
    batch = store.replay_batch(store_ids, storeless_runs)
    # Each execution gets only its trace's spans and its carriers: linear per batch.
    by_trace: dict[str, list[SpanLink]] = {}
    for link in batch.links:
        by_trace.setdefault(link.span.trace_id, []).append(link)
    versions = batch.versions if sink is not None else None
    executions = batch.executions
    for start in range(0, len(executions), save_every):
        group = executions[start : start + save_every]
        _replay_and_save(store, batch, group, by_trace, between, sink, versions, limits)
    return len(executions)


def _replay_and_save(
    store: Store,
    batch: ReplayBatch,
    executions: Sequence[Execution],
    by_trace: dict[str, list[SpanLink]],
    between: Callable[[], object],
    sink: HistorySink | None,
    versions: tuple[dict[str, int], dict[str, int]] | None,
    limits: DocumentLimits,
) -> None:
    now = time.time_ns()
    records: list[ReplayRecord] = []
    indexes: list[FieldIndex] = []
    snapshots: list[Snapshot] = []
    for execution in executions:
        between()
        received = batch.transitions.get(execution.store_id, []) if execution.store_id else []
        carrier_traces = {t.trace_id for t in received} | {execution.trace_id}
        relevant = [link for trace in carrier_traces for link in by_trace.get(trace, ())]
        touched = TouchedValues()
        history = replay_with(execution, received, relevant, on_applied=touched, limits=limits)
        index = field_index(history, execution.run_id, touched.nodes)
        records.append(replay_record(history, execution.run_id, index, now))
        indexes.append(index)
        if worth_taking(history):
            snapshot = take(history, received, version_of(execution, received, relevant))
            if snapshot is not None:
                snapshots.append(snapshot)
        if sink is not None and versions is not None:
            per_store, per_trace = versions
            stored = per_store.get(execution.store_id, 0) if execution.store_id else 0
            sink.offer(execution, history, (stored, per_trace.get(execution.trace_id, 0)))
    # Link runs named through a node to the run around them (collector/replay/lineage.py).
    traces = {e.trace_id for e in executions}
    parents = enclosing_runs(link for trace in sorted(traces) for link in by_trace.get(trace, ()))
    store.save_replays(records, indexes, snapshots, parents, batch.run_keys)
