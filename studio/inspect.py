"""Rebuilding one execution for the studio: stored evidence -> replayed History.

A user stepping through a timeline asks for the same run again and again, so
histories are kept in an LRU cache keyed by run id and evidence version, bounded by
an estimate of the memory they hold (a long run's checkpoints are large). The
replayer offers the long histories it makes, so a just-ingested run is not replayed
twice. The stored row (verdict, counts) is read on every view, since the replayer
saves verdicts after the evidence arrives.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from collector.evidence import EvidenceVersion, load_history, load_in_flight_history
from collector.model import Execution
from collector.replay.history import History
from collector.replay.jsondoc import DEFAULT_LIMITS, DocumentLimits
from collector.replay.provenance import Provenance, provenance
from collector.store import Store
from collector.store.in_flight import InFlightRow
from collector.store.listing import ExecutionRow

CACHED_HISTORIES = 32
CACHE_BUDGET_BYTES = 256 * 1024 * 1024
# Shorter histories replay in milliseconds when first viewed; keeping every
# replayed history would only churn the cache.
MIN_OFFERED_STEPS = 1_000
# Parsed JSON held in Python objects, per byte of its text, and what one step
# (a Step, its Transition and strings) holds.
_OBJECT_BYTES_PER_JSON_BYTE = 4
_BYTES_PER_STEP = 600
# Provenance costs about a replay; a user clicks through a few fields of a run.
CACHED_PROVENANCES = 8


@dataclass(frozen=True, slots=True)
class Inspection:
    """Everything known about one run: stored row, owner span, replayed history.

    `execution` and `row` are None while the owner span is in flight; then
    `in_flight` describes what arrived so far. A cached inspection's `row` is
    replaced with the stored one on every view (`Inspector.inspect`).
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
        """Provenance of this history, remembered per pointer (never stale: the inspection
        is replaced when new evidence arrives). Raises ValueError for a malformed pointer."""
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

    def __init__(
        self,
        store: Store,
        capacity: int = CACHED_HISTORIES,
        budget_bytes: int = CACHE_BUDGET_BYTES,
        min_offered_steps: int = MIN_OFFERED_STEPS,
        limits: DocumentLimits = DEFAULT_LIMITS,
    ) -> None:
        self._store = store
        self._limits = limits
        self._capacity = capacity
        self._budget = budget_bytes
        self._min_offered_steps = min_offered_steps
        self._cache: OrderedDict[str, tuple[EvidenceVersion, Inspection, int]] = OrderedDict()
        self._cached_bytes = 0
        self._lock = threading.Lock()

    def inspect(self, run_id: str) -> Inspection | None:
        execution = self._store.get_execution(run_id)
        if execution is None:
            return self._inspect_in_flight(run_id)
        row = self._store.execution_row(run_id)
        if self._holds(run_id):
            version = self._store.evidence_version(execution.store_id, execution.trace_id)
            cached = self._cached(run_id, version)
            if cached is not None:
                # replace() hands the remembered provenances on to the new instance.
                return cached if cached.row == row else dataclasses.replace(cached, row=row)
        history, version = load_history(self._store, execution, self._limits)
        return self._remember(version, Inspection(run_id, row, execution, None, history))

    def offer(self, execution: Execution, history: History, version: EvidenceVersion) -> None:
        """Keep a history replayed elsewhere (the replayer) if it is long enough to matter."""
        if len(history.steps) >= self._min_offered_steps:
            self._remember(version, Inspection(execution.run_id, None, execution, None, history))

    def _inspect_in_flight(self, run_id: str) -> Inspection | None:
        found = self._store.in_flight(limit=1, run_id=run_id)
        if not found:
            return None
        in_flight = found[0]
        history = load_in_flight_history(
            self._store, in_flight.trace_id, in_flight.own_store_id, run_id
        )
        return Inspection(run_id, None, None, in_flight, history)

    def _holds(self, run_id: str) -> bool:
        with self._lock:
            return run_id in self._cache

    def _cached(self, run_id: str, version: EvidenceVersion) -> Inspection | None:
        with self._lock:
            entry = self._cache.get(run_id)
            if entry is None or entry[0] != version:
                return None
            self._cache.move_to_end(run_id)
            return entry[1]

    def _remember(self, version: EvidenceVersion, inspection: Inspection) -> Inspection:
        size = footprint(inspection.history)
        with self._lock:
            old = self._cache.pop(inspection.run_id, None)
            if old is not None:
                self._cached_bytes -= old[2]
            self._cache[inspection.run_id] = (version, inspection, size)
            self._cached_bytes += size
            # The newest entry stays even if it alone is over budget: it is the
            # one being looked at.
            while len(self._cache) > 1 and (
                len(self._cache) > self._capacity or self._cached_bytes > self._budget
            ):
                _, (_, _, evicted) = self._cache.popitem(last=False)
                self._cached_bytes -= evicted
        return inspection


def footprint(history: History) -> int:
    """Roughly the bytes a history holds: its checkpointed states and its steps."""
    execution = history.execution
    # A patch can build a state far larger than the start and end texts (docs/limits.md).
    state_text = history.peak_state_size
    if execution is not None:
        state_text = max(
            state_text, len(execution.state_start or ""), len(execution.state_end or "")
        )
    checkpoints = history.checkpoint_count * state_text * _OBJECT_BYTES_PER_JSON_BYTE
    patches = sum(len(step.transition.patch_json) for step in history.steps)
    return checkpoints + patches + _BYTES_PER_STEP * len(history.steps)


def parent_and_children(
    store: Store, run_id: str, parent_run_id: str | None
) -> tuple[ExecutionRow | None, list[ExecutionRow]]:
    """A stored run's parent row (None at the top, or not stored) and its child runs, oldest first.

    Shared by the execution page and its JSON twin, so both name the same relatives.
    """
    parent = store.execution_row(parent_run_id) if parent_run_id else None
    return parent, store.child_executions(run_id)
