"""The command line: `statetrail executions` lists what arrived (server running or
stopped), and `serve` takes its settings from flags or STATETRAIL_* variables."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import grpc
import httpx
import pytest
from support.servers import MakeServer, Server, export_raw, fixture_requests

from collector.config import spool_path_for
from collector.intake.spool import START, Spool, unstored_bytes
from collector.store import Store


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


def test_cli_executions_asks_the_running_server_for_a_locked_file(make_server: MakeServer) -> None:
    server: Server = make_server()
    _load(server)
    rows = [json.loads(line) for line in _executions(server.db, "--json").stdout.splitlines()]
    assert {(row["workflow"], row["status"]) for row in rows} == {
        ("Linear Workflow", "ok"), ("Failing Workflow", "error"),
    }
    assert all(row["store_id"] and row["started_at"].endswith("Z") for row in rows)


def test_cli_executions_reads_the_file_when_no_server_runs(make_server: MakeServer) -> None:
    server: Server = make_server()
    _load(server)
    server.stop()
    listing = _executions(server.db)
    assert listing.stderr == ""  # everything acknowledged was stored before the stop
    table = listing.stdout.splitlines()
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


def test_serve_duckdb_threads_from_flag_or_environment() -> None:
    from collector.cli.main import _parser
    from collector.config import serve_config

    assert serve_config(_parser({}).parse_args(["serve"])).duckdb_threads == 1
    from_env = _parser({"STATETRAIL_DUCKDB_THREADS": "4"}).parse_args(["serve"])
    assert serve_config(from_env).duckdb_threads == 4
    flag = _parser({}).parse_args(["serve", "--duckdb-threads", "2"])
    assert serve_config(flag).duckdb_threads == 2


@pytest.mark.parametrize(
    ("environ", "flags", "expected"),
    [
        ({}, [], True),
        ({"STATETRAIL_EXTRACTION_WORKER": "0"}, [], False),
        ({"STATETRAIL_EXTRACTION_WORKER": "false"}, [], False),
        ({"STATETRAIL_EXTRACTION_WORKER": "1"}, [], True),
        ({}, ["--no-extraction-worker"], False),
    ],
)
def test_serve_extracts_in_a_child_process_unless_told_not_to(
    environ: dict[str, str], flags: list[str], expected: bool
) -> None:
    from collector.cli.main import _parser
    from collector.config import serve_config

    args = _parser(environ).parse_args(["serve", *flags])
    assert serve_config(args).extraction_worker is expected


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_serve_refuses_a_duckdb_thread_count_below_one(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from collector.cli.main import _parser

    with pytest.raises(SystemExit):
        _parser({}).parse_args(["serve", "--duckdb-threads", value])
    assert "--duckdb-threads" in capsys.readouterr().err


def test_cli_executions_says_when_received_exports_are_not_stored_yet(tmp_path: Path) -> None:
    # What a server stopped with a backlog leaves: a migrated database and
    # acknowledged records in its spool that the extractor never stored.
    db = tmp_path / "statetrail.duckdb"
    Store(db).close()
    body, _ = fixture_requests("a_linear")[0]
    spool = Spool(spool_path_for(db), START)
    spool.append([body] * 3, 0)
    spool.close()
    listing = _executions(db)
    assert listing.stdout.splitlines()[1:] == []
    assert re.search(r": \d+\.\d KiB of received exports are in ", listing.stderr)
    assert str(spool_path_for(db)) in listing.stderr
    assert f"statetrail serve --db {db}" in listing.stderr
    # Counted as the spool holds them (compressed), none of it stored yet.
    on_disk = sum(path.stat().st_size for path in spool_path_for(db).glob("*.seg"))
    assert unstored_bytes(spool_path_for(db), START) == on_disk > 0


def test_serve_takes_its_secrets_from_the_environment_and_files_out_of_ps(
    tmp_path: Path,
) -> None:
    password, key = "env-studio-password-42", "file-ingest-key-42"
    keys_file = tmp_path / "keys"
    keys_file.write_text(f"{key}  # the exporters' key\n")
    server = Server.on_free_ports(
        tmp_path / "statetrail.duckdb", "--auth", "--keys-file", str(keys_file),
        env={"STATETRAIL_STUDIO_PASSWORD": password},
    ).start()
    try:
        assert server.process is not None
        command_line = Path(f"/proc/{server.process.pid}/cmdline").read_bytes()
        assert password.encode() not in command_line and key.encode() not in command_line
        bearer = {"authorization": f"Bearer {password}"}
        assert httpx.get(server.url + "/api/executions", headers=bearer).status_code == 200
        body, _ = fixture_requests("a_linear")[0]
        assert export_raw(server.grpc_target, body, [("x-junjo-api-key", key)]) == b""
        with pytest.raises(grpc.RpcError) as refused:
            export_raw(server.grpc_target, body)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        server.stop()


def test_serve_reads_ingestion_keys_from_the_environment() -> None:
    from collector.cli.main import _parser
    from collector.config import serve_config

    environ = {"STATETRAIL_API_KEY": "one,two", "STATETRAIL_STUDIO_PASSWORD": "pw"}
    config = serve_config(_parser(environ).parse_args(["serve", "--auth"]))
    assert config.api_keys == frozenset({"one", "two"})
    assert config.studio_password == "pw"


def test_serve_help_says_to_prefer_files_and_variables_for_secrets() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "collector", "serve", "--help"],
        capture_output=True, text=True, timeout=60, check=True,
        env={**os.environ, "COLUMNS": "1000"},  # no hyphenated flag broken over two lines
    )
    text = " ".join(shown.stdout.split())
    for flag, preferred in [("--studio-password", "--studio-password-file"),
                            ("--api-key", "--keys-file")]:
        assert re.search(rf"{flag} \S+ .*?Prefer {preferred} or the variable", text), flag
    assert "read a flag's value in ps" in text
