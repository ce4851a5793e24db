"""The studio's Inspector against a real DuckDB file: reuse, invalidation, memory bound."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from support.history_records import scenario
from support.servers import fixture_requests, scenarios

from collector.encode.exports import batch_from_export
from collector.evidence import EvidenceVersion, load_history
from collector.jobs.replayer import replay_stores
from collector.model import Evidence, Execution, Transition
from collector.replay.history import History
from collector.store import IngestBatch, Store
from studio.inspect import Inspector


class Recorder:
    """A sink that remembers what the replayer offered and hands it on."""

    def __init__(self, inspector: Inspector) -> None:
        self.inspector = inspector
        self.offered: list[History] = []

    def offer(self, execution: Execution, history: History, version: EvidenceVersion) -> None:
        self.offered.append(history)
        self.inspector.offer(execution, history, version)


def _run(suffix: str, steps: int) -> tuple[Execution, list[Transition]]:
    execution, transitions, _ = scenario(
        {"n": 0}, [[{"op": "replace", "path": "/n", "value": i}] for i in range(1, steps + 1)]
    )
    store_id = f"store-{suffix}"
    execution = dataclasses.replace(
        execution, run_id=f"run-{suffix}", store_id=store_id, span_id=f"{suffix:0>16}"
    )
    # The store keys events by (trace, span, index).
    placed = [t._replace(store_id=store_id, event_index=i) for i, t in enumerate(transitions)]
    return execution, placed


def _store(tmp_path: Path, *runs: tuple[Execution, list[Transition]]) -> Store:
    store = Store(tmp_path / "inspect.duckdb")
    for execution, transitions in runs:
        store.write([IngestBatch(spans=[], evidence=Evidence([execution], transitions, {}))])
    return store


def test_first_view_reuses_the_history_the_replayer_made(tmp_path: Path) -> None:
    execution, transitions = _run("a", 20)
    store = _store(tmp_path, (execution, transitions))
    recorder = Recorder(Inspector(store, min_offered_steps=10))

    assert replay_stores(store, [execution.store_id or ""], sink=recorder) == 1

    inspection = recorder.inspector.inspect(execution.run_id)
    assert inspection is not None
    assert inspection.history is recorder.offered[0]
    # The stored row is read at view time, so it has the verdict saved after the offer.
    assert inspection.row is not None and inspection.row.verdict == "verified"

    # Late evidence for the store: the offered history is stale and replaced.
    late = transitions[-1]._replace(
        sequence=21, event_index=21, revision_before=20, revision_after=21,
        patch_json='[{"op": "replace", "path": "/n", "value": 21}]',
    )  # fmt: skip
    store.write([IngestBatch(spans=[], evidence=Evidence([], [late], {}))])
    again = recorder.inspector.inspect(execution.run_id)
    assert again is not None and again.history is not recorder.offered[0]
    # ...and the fresh replay is what later views get.
    latest = recorder.inspector.inspect(execution.run_id)
    assert latest is not None and latest.history is again.history
    store.close()


def test_short_histories_are_not_kept_from_the_replayer(tmp_path: Path) -> None:
    execution, transitions = _run("b", 5)
    store = _store(tmp_path, (execution, transitions))
    recorder = Recorder(Inspector(store, min_offered_steps=10))

    replay_stores(store, [execution.store_id or ""], sink=recorder)

    inspection = recorder.inspector.inspect(execution.run_id)
    assert inspection is not None and inspection.history is not recorder.offered[0]
    store.close()


def test_cache_is_bounded_by_the_memory_its_histories_hold(tmp_path: Path) -> None:
    first, second = _run("c", 5), _run("d", 5)
    store = _store(tmp_path, first, second)
    roomy, tight = Inspector(store), Inspector(store, budget_bytes=1)

    for inspector in (roomy, tight):
        kept = inspector.inspect(first[0].run_id)
        assert kept is not None
        inspector.inspect(second[0].run_id)
        again = inspector.inspect(first[0].run_id)
        assert again is not None
        # Within budget the first history is still cached; over it, it was evicted.
        assert (again.history is kept.history) == (inspector is roomy)
    store.close()


@pytest.mark.parametrize("scenario_name", scenarios())
def test_version_counted_from_the_evidence_read_is_the_stored_version(
    tmp_path: Path, scenario_name: str
) -> None:
    """A first view keys its cache entry by what it read; later views by a query."""
    store = Store(tmp_path / "versions.duckdb")
    for body, _ in fixture_requests(scenario_name):
        store.write([batch_from_export(body)])
    executions = store.executions_for_stores(store.stale_store_ids())
    assert executions
    for execution in executions:
        _, version = load_history(store, execution)
        assert version == store.evidence_version(execution.store_id, execution.trace_id)
    store.close()
