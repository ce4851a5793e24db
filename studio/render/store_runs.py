"""A convention run's place among the runs of its store: the runs before and after it.

Pure. The runs of one store (a LangGraph thread: a run interrupted by `interrupt()` and
the run that resumed it) follow each other in the store's sequence order; the page links
a run to its neighbours, and says where it sits (run 2 of 3).
"""

from __future__ import annotations

from dataclasses import dataclass

from collector.store.replays import StoreRun


@dataclass(frozen=True, slots=True)
class StorePosition:
    """Where a run sits among its store's runs (1-based), and its neighbours."""

    store_id: str
    index: int
    count: int
    previous: StoreRun | None
    next: StoreRun | None


def store_position(store_id: str, runs: list[StoreRun], run_id: str) -> StorePosition | None:
    """The run's position among `runs` (in sequence order), or None if it is not one of them
    or is its store's only run."""
    ids = [run.run_id for run in runs]
    if run_id not in ids or len(runs) < 2:
        return None
    index = ids.index(run_id)
    return StorePosition(
        store_id=store_id,
        index=index + 1,
        count=len(runs),
        previous=runs[index - 1] if index > 0 else None,
        next=runs[index + 1] if index + 1 < len(runs) else None,
    )


def store_position_json(position: StorePosition | None) -> dict[str, object] | None:
    """The JSON twin's `store_runs`: null for a run alone in its store."""
    if position is None:
        return None

    def brief(run: StoreRun | None) -> dict[str, object] | None:
        if run is None:
            return None
        return {"id": run.run_id, "workflow": run.name, "run_status": run.run_status,
                "transition_start": run.transition_start, "transition_end": run.transition_end}

    return {"store_id": position.store_id, "index": position.index, "count": position.count,
            "previous": brief(position.previous), "next": brief(position.next)}
