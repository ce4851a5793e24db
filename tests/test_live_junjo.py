"""Live junjo 0.69.0 workflows exporting to a running `statetrail serve`.

The application runs in its own process (Junjo uses the global TracerProvider)
with the real exporters: Junjo's JunjoOtelExporter and the standard
OTLPSpanExporter. What statetrail stored is compared with what the application
itself saw.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest
from support import Server

from collector.store import documents

APP = Path(__file__).with_name("junjo_app.py")
KEY = "live-test-key"


def _run_app(server: Server, exporter: str, *scenarios: str) -> dict[str, dict[str, Any]]:
    completed = subprocess.run(
        [sys.executable, str(APP), server.grpc_target, KEY, exporter, *scenarios],
        capture_output=True, text=True, timeout=120, check=True,
    )
    runs = [json.loads(line) for line in completed.stdout.splitlines() if line.startswith("{")]
    return {run["scenario"]: run for run in runs}


@pytest.fixture
def stored(make_server: Any) -> Any:
    def run(exporter: str, *scenarios: str) -> tuple[dict[str, dict[str, Any]], Path]:
        server: Server = make_server("--api-key", KEY)
        runs = _run_app(server, exporter, *scenarios)
        server.stop()
        return runs, server.db

    return run


def _execution(db: Path, run_id: str) -> dict[str, Any]:
    with duckdb.connect(str(db), read_only=True) as connection:
        cursor = connection.execute("SELECT * FROM executions WHERE run_id = ?", [run_id])
        row = cursor.fetchone()
        assert row is not None, f"execution {run_id} was not stored"
        execution = dict(zip([d[0] for d in cursor.description], row, strict=True))
    # States and graph are stored compressed (collector/store/documents.py).
    return execution | {name: documents.unpack(execution[name]) for name in documents.COLUMNS}


def _received(db: Path, execution: dict[str, Any]) -> list[int]:
    with duckdb.connect(str(db), read_only=True) as connection:
        rows = connection.execute(
            "SELECT sequence FROM transitions WHERE store_id = ? AND sequence > ?"
            " AND sequence <= ? ORDER BY sequence",
            [execution["store_id"], execution["transition_start"], execution["transition_end"]],
        ).fetchall()
    return [sequence for (sequence,) in rows]


@pytest.mark.parametrize("exporter", ["junjo", "otlp"])
def test_live_linear_and_concurrent_runs_are_stored_whole(stored: Any, exporter: str) -> None:
    runs, db = stored(exporter, "linear", "concurrent")
    for name in ("linear", "concurrent"):
        execution = _execution(db, runs[name]["run_id"])
        assert execution["status"] == "ok"
        assert execution["service"] == "refund-service"
        assert json.loads(execution["state_end"]) == runs[name]["final_state"]
        expected = list(range(execution["transition_start"] + 1, execution["transition_end"] + 1))
        assert _received(db, execution) == expected
        assert len(expected) == execution["transition_count"] >= 5


def test_live_subflow_is_a_child_execution_with_its_own_store(stored: Any) -> None:
    runs, db = stored("junjo", "subflow")
    parent = _execution(db, runs["subflow"]["run_id"])
    assert json.loads(parent["state_end"]) == runs["subflow"]["final_state"]
    with duckdb.connect(str(db), read_only=True) as connection:
        rows = connection.execute(
            "SELECT run_id, name, parent_store_id, store_id FROM executions"
            " WHERE parent_run_id = ?", [parent["run_id"]],
        ).fetchall()
    assert len(rows) == 1
    (_, name, parent_store_id, store_id) = rows[0]
    assert name == "Manual Review"
    assert parent_store_id == parent["store_id"] != store_id
    # post_run_actions wrote the parent's store from inside the subflow span.
    assert len(_received(db, parent)) == parent["transition_count"]


def test_live_failing_run_is_stored_with_its_error(stored: Any) -> None:
    runs, db = stored("otlp", "failing")
    execution = _execution(db, runs["failing"]["run_id"])
    assert execution["status"] == "error"
    assert execution["error_type"] == "RuntimeError"
    assert "payment provider returned 502" in execution["status_message"]
    assert json.loads(execution["state_end"])["notes"] == ["calling the payment provider"]
