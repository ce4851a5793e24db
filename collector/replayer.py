"""Keeps every execution's stored replay (verdict, diagnostics, field index) current.

An execution is replayed when its owner span arrives and again whenever late
transitions for its store arrive, on a background thread: the acknowledgement
of an export never waits for a replay. Lists and field filters read what this
saved; the execution pages replay on demand from the evidence itself.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict

from collector.fieldindex import ABSENT, Absent, FieldIndex, JsonValue, index_rows
from collector.history import History, Missing, replay, resolve, walk
from collector.model import Execution
from collector.store import Store, StoreError, WriteResult
from collector.store.replays import ReplayRecord

logger = logging.getLogger(__name__)


def load_history(store: Store, execution: Execution) -> History:
    """Replay one execution from everything stored about its store and trace."""
    transitions = store.transitions_for_store(execution.store_id) if execution.store_id else []
    links = store.evidence_spans(execution.trace_id, execution.store_id)
    same_trace = [
        (link.span.span_id, link.parent_span_id)
        for link in links
        if link.span.trace_id == execution.trace_id
    ]
    return replay(
        execution,
        transitions,
        evidence_spans=[link.span for link in links],
        owner_span_ids=_subtree(execution.span_id, same_trace),
    )


def _subtree(root: str, edges: Iterable[tuple[str, str]]) -> frozenset[str]:
    children: dict[str, list[str]] = {}
    for span_id, parent_span_id in edges:
        children.setdefault(parent_span_id, []).append(span_id)
    found = {root}
    pending = [root]
    while pending:
        for child in children.get(pending.pop(), ()):
            if child not in found:
                found.add(child)
                pending.append(child)
    return frozenset(found)


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


def field_index(history: History, run_id: str) -> FieldIndex:
    """The filterable values of a history: its start, every write, and its end.

    The end is the recorded end state when there is one (it is what the run
    ended with, whatever the evidence in between), else the replayed end.
    """
    recorded = history.recorded_end
    if not history.has_states:
        return index_rows(run_id, ABSENT, ABSENT if isinstance(recorded, Missing) else recorded)
    start = history.state_at(history.start_sequence)
    touched: list[tuple[str, JsonValue | Absent]] = []
    for step, state in walk(history):
        for pointer in step.changed_paths:
            # The walked state is replay's working document: index it now, and
            # let index_rows copy what it keeps (it stores scalars only).
            value = resolve(state, pointer)
            touched.append((pointer, ABSENT if isinstance(value, Missing) else value))
    end = history.replayed_end if isinstance(recorded, Missing) else recorded
    return index_rows(run_id, start, end, touched)


class Replayer:
    """A background thread that re-replays the executions a commit touched."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._queue: queue.Queue[frozenset[str] | None] = queue.Queue()
        self._idle = threading.Event()
        self._idle.set()
        self._thread = threading.Thread(target=self._run, name="statetrail-replayer", daemon=True)
        self._thread.start()

    def notify(self, result: WriteResult) -> None:
        if result.store_ids:
            self._idle.clear()
            self._queue.put(result.store_ids)

    def wait_idle(self, timeout: float) -> bool:
        return self._idle.wait(timeout)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            store_ids = set(item)
            # Coalesce: many commits touching the same stores cost one replay.
            while True:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._replay_stores(store_ids)
                    return
                store_ids |= more
            self._replay_stores(store_ids)
            if self._queue.empty():
                self._idle.set()

    def _replay_stores(self, store_ids: Iterable[str]) -> None:
        try:
            replay_stores(self._store, store_ids)
        except StoreError as exc:
            # The evidence is stored; the next commit touching these stores, or
            # `statetrail reindex`, replays them again.
            logger.error("replay failed: %s", exc)
        except Exception:
            # A replay bug on hostile evidence must not end this thread (every
            # later verdict would stay pending); replay the stores one by one
            # so the rest still get their verdicts, and log the culprit.
            store_ids = list(store_ids)
            if len(store_ids) > 1:
                for store_id in store_ids:
                    self._replay_stores([store_id])
                return
            logger.exception("replay failed for store %s", store_ids)


def replay_stores(store: Store, store_ids: Iterable[str]) -> int:
    """Replay and save every execution owning one of these stores; return how many."""
    now = time.time_ns()
    records: list[ReplayRecord] = []
    indexes: list[FieldIndex] = []
    for execution in store.executions_for_stores(store_ids):
        history = load_history(store, execution)
        index = field_index(history, execution.run_id)
        records.append(replay_record(history, execution.run_id, index, now))
        indexes.append(index)
    if records:
        store.save_replays(records, indexes)
    return len(records)
