"""`statetrail executions` lists what arrived, with the server running or stopped."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from support import Server, export_raw, fixture_requests


def _executions(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "collector", "executions", "--db", str(db), *args],
        capture_output=True, text=True, timeout=60, check=True,
    )


def _load(server: Server) -> None:
    for scenario in ("a_linear", "e_exception"):
        for body, _ in fixture_requests(scenario):
            export_raw(server.grpc_target, body)
    server.wait_replayed()


def test_cli_executions_asks_the_running_server_for_a_locked_file(make_server: Any) -> None:
    server: Server = make_server()
    _load(server)
    rows = [json.loads(line) for line in _executions(server.db, "--json").stdout.splitlines()]
    assert {(row["workflow"], row["status"]) for row in rows} == {
        ("Linear Workflow", "ok"), ("Failing Workflow", "error"),
    }
    assert all(row["store_id"] and row["started_at"].endswith("Z") for row in rows)


def test_cli_executions_reads_the_file_when_no_server_runs(make_server: Any) -> None:
    server: Server = make_server()
    _load(server)
    server.stop()
    table = _executions(server.db).stdout.splitlines()
    assert table[0].split("\t") == [
        "id", "workflow", "service", "status", "started_at", "transition_count", "store_id",
    ]
    assert sorted(line.split("\t")[1] for line in table[1:]) == [
        "Failing Workflow", "Linear Workflow",
    ]


def test_cli_executions_without_a_database_says_so(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "collector", "executions", "--db", str(tmp_path / "none.duckdb")],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode != 0
    assert "no database" in result.stderr
