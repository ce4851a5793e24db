"""Replay cost on a large history, as ratios to one deepcopy of the state.

Builds 10,000 transitions (chat-style appends and in-place edits, as Junjo emits
them) on a ~250 KB state and times a full replay, `state_at` of a middle step and
a provenance query. The baseline is one `copy.deepcopy` of the same state,
measured in the same run, so the ratios hold across machines: a replay that
copied the state at every step would show a ratio near 10,000.

Run from the repository root: .venv/bin/python -m bench.bench_replay
"""

from __future__ import annotations

import copy
import json
import random
import time
from collections.abc import Callable
from typing import Any

from collector.model import Execution, Transition
from collector.replay.provenance import provenance
from collector.replay.walk import replay

TRANSITIONS = 10_000
MESSAGES = 1_800
REPEATS = 5


def build() -> tuple[Execution, list[Transition], dict[str, Any]]:
    rng = random.Random(42)
    start: dict[str, Any] = {
        "messages": [{"role": "user", "text": f"{i:04d} " + "x" * 110} for i in range(MESSAGES)],
        "turn": 0,
    }
    state = copy.deepcopy(start)
    transitions = []
    patch: list[dict[str, Any]]
    for sequence in range(1, TRANSITIONS + 1):
        if sequence % 4 == 0:
            message = {"role": "assistant", "text": f"reply {sequence}"}
            patch = [{"op": "add", "path": f"/messages/{len(state['messages'])}", "value": message}]
        else:
            index = rng.randrange(len(state["messages"]))
            patch = [
                {"op": "replace", "path": f"/messages/{index}/role", "value": f"r{sequence}"},
                {"op": "replace", "path": "/turn", "value": sequence},
            ]
        state = _apply_direct(state, patch)
        transitions.append(_transition(sequence, json.dumps(patch)))
    return _execution(start, state), transitions, start


def _apply_direct(state: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    for op in patch:
        parts = op["path"].split("/")[1:]
        target: Any = state
        for part in parts[:-1]:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if isinstance(target, list):
            target.insert(int(parts[-1]), copy.deepcopy(op["value"]))
        else:
            target[parts[-1]] = copy.deepcopy(op["value"])
    return state


def _transition(sequence: int, patch: str) -> Transition:
    return Transition(
        store_id="bench", sequence=sequence, store_name="ChatStore", action="append",
        revision_before=sequence - 1, revision_after=sequence, patch_json=patch,
        patch_mode="full", patch_policy="junjo.full.v1", event_id=f"e{sequence}",
        trace_id="a" * 32, span_id="b" * 16, event_index=0, time_unix_nano=sequence,
        contract_version=3, span_name="ChatNode",
    )  # fmt: skip


def _execution(start: Any, end: Any) -> Execution:
    return Execution(
        run_id="bench", kind="workflow", name="Bench", service="bench", trace_id="a" * 32,
        span_id="c" * 16, parent_span_id="", parent_run_id=None, status="ok",
        status_message="", error_type=None, start_unix_nano=0, end_unix_nano=1,
        store_id="bench", parent_store_id=None, state_start=json.dumps(start),
        state_start_mode="full", state_start_policy="junjo.full.v1",
        state_end=json.dumps(end), state_end_mode="full", state_end_policy="junjo.full.v1",
        revision_start=0, revision_end=TRANSITIONS, transition_start=0,
        transition_end=TRANSITIONS, transition_count=TRANSITIONS, reconstructable=True,
        graph_snapshot=None, contract_version=3, definition_id=None, structural_id=None,
        cancelled_reason=None, correlation_type=None, correlation_id=None,
        application_store_id=None, application_transition_start=None,
        application_transition_end=None,
    )  # fmt: skip


def best_of(action: Callable[[], object]) -> float:
    timings = []
    for _ in range(REPEATS):
        began = time.perf_counter()
        action()
        timings.append(time.perf_counter() - began)
    return min(timings)


def main() -> None:
    execution, transitions, start = build()
    baseline = best_of(lambda: copy.deepcopy(start))
    history = replay(execution, transitions)
    assert history.verdict == "verified", history.diagnostics

    figures = {
        "full replay (10,000 transitions)": best_of(lambda: replay(execution, transitions)),
        "state_at(middle step)": best_of(lambda: history.state_at(TRANSITIONS // 2)),
        "provenance('/turn')": best_of(lambda: provenance(history, "/turn")),
    }
    print(f"state: {len(execution.state_start or '') / 1024:.0f} KB at start, "
          f"{len(execution.state_end or '') / 1024:.0f} KB at end; "
          f"{history.checkpoint_count} checkpoints")  # fmt: skip
    print(f"baseline: one deepcopy of the start state = {baseline * 1e3:.1f} ms")
    for name, seconds in figures.items():
        print(f"{name:<34} {seconds * 1e3:8.1f} ms  = {seconds / baseline:6.1f} x baseline")
    per_step = figures["full replay (10,000 transitions)"] / TRANSITIONS
    print(f"per transition: {per_step * 1e6:.1f} us = {per_step / baseline:.4f} x baseline")


if __name__ == "__main__":
    main()
