"""Rebuilding one execution for the studio: stored evidence -> replayed History.

Replaying a long history costs far more than reading it, and a user stepping
through a timeline asks for the same execution again and again, so histories
are kept in a small LRU cache keyed by run id and an evidence version that
changes whenever anything new arrives for the execution's stores or trace.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from collector.history import History, replay
from collector.model import Execution
from collector.provenance import Provenance, provenance
from collector.replayer import load_history
from collector.store import Store
from collector.store.listing import ExecutionRow, InFlightRow

CACHED_HISTORIES = 32
# Provenance costs about a replay; a user clicks through a few fields of a run.
CACHED_PROVENANCES = 8


@dataclass(frozen=True, slots=True)
class Inspection:
    """Everything known about one run: stored row, owner span, replayed history.

    `execution` and `row` are None while the owner span is in flight; then
    `in_flight` describes what arrived so far.
    """

    run_id: str
    row: ExecutionRow | None
    execution: Execution | None
    in_flight: InFlightRow | None
    history: History
    _provenances: OrderedDict[str, Provenance] = field(
        default_factory=OrderedDict, compare=False, repr=False
    )
    _provenance_lock: threading.Lock = field(
        default_factory=threading.Lock, compare=False, repr=False
    )

    def provenance(self, pointer: str) -> Provenance:
        """`collector.provenance.provenance` of this history, remembered per pointer.

        Lives and dies with the inspection, which the Inspector replaces as soon
        as new evidence arrives, so a remembered answer is never stale.
        Raises ValueError for a malformed pointer.
        """
        with self._provenance_lock:
            found = self._provenances.get(pointer)
            if found is not None:
                self._provenances.move_to_end(pointer)
                return found
        found = provenance(self.history, pointer)
        with self._provenance_lock:
            self._provenances[pointer] = found
            while len(self._provenances) > CACHED_PROVENANCES:
                self._provenances.popitem(last=False)
        return found

    @property
    def trace_id(self) -> str:
        if self.execution is not None:
            return self.execution.trace_id
        assert self.in_flight is not None
        return self.in_flight.trace_id


class Inspector:
    """Answers "show me run X" from the store, with a cache of replayed histories."""

    def __init__(self, store: Store, capacity: int = CACHED_HISTORIES) -> None:
        self._store = store
        self._capacity = capacity
        self._cache: OrderedDict[str, tuple[tuple[int, int], Inspection]] = OrderedDict()
        self._lock = threading.Lock()

    def inspect(self, run_id: str) -> Inspection | None:
        execution = self._store.get_execution(run_id)
        if execution is not None:
            version = self._store.evidence_version(execution.store_id, execution.trace_id)
            cached = self._cached(run_id, version)
            if cached is not None:
                return cached
            inspection = Inspection(
                run_id=run_id,
                row=self._store.execution_row(run_id),
                execution=execution,
                in_flight=None,
                history=load_history(self._store, execution),
            )
            return self._remember(version, inspection)
        return self._inspect_in_flight(run_id)

    def _inspect_in_flight(self, run_id: str) -> Inspection | None:
        found = self._store.in_flight(limit=1, run_id=run_id)
        if not found:
            return None
        in_flight = found[0]
        transitions = [
            transition
            for store_id in in_flight.store_ids
            for transition in self._store.transitions_for_store(store_id)
        ]
        spans = [
            link.span
            for link in self._store.evidence_spans_for([in_flight.trace_id], in_flight.store_ids)
        ]
        history = replay(None, transitions, evidence_spans=spans)
        return Inspection(run_id, None, None, in_flight, history)

    def _cached(self, run_id: str, version: tuple[int, int]) -> Inspection | None:
        with self._lock:
            entry = self._cache.get(run_id)
            if entry is None or entry[0] != version:
                return None
            self._cache.move_to_end(run_id)
            return entry[1]

    def _remember(self, version: tuple[int, int], inspection: Inspection) -> Inspection:
        with self._lock:
            self._cache[inspection.run_id] = (version, inspection)
            self._cache.move_to_end(inspection.run_id)
            while len(self._cache) > self._capacity:
                self._cache.popitem(last=False)
        return inspection
