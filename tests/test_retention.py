"""Retention: `statetrail prune` and `serve --retain` delete whole old traces, nothing newer.

Old data is made by moving captured Junjo fixtures (and plain spans) back in
time with fresh ids (tests/support/otlp_craft.py), so executions, transitions, stored
replays and field-index rows all exist for both the old and the new side.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest
from support.otlp_craft import (
    DAY_NANOS,
    new_span_id,
    new_trace_id,
    plain_request,
    relocated_fixture,
)
from support.polling import wait_until
from support.servers import FIXTURE_API_KEY, MakeServer, Server, export_raw

from collector.durations import DurationError, parse_duration

KEY = [("x-junjo-api-key", FIXTURE_API_KEY)]
SCENARIOS = ("a_linear", "d_subflow")


def _send_fixtures(server: Server, *, age_days: int, tag: str) -> None:
    end = time.time_ns() - age_days * DAY_NANOS
    for scenario in SCENARIOS:
        for body in relocated_fixture(scenario, end_unix_nano=end, tag=f"{tag}-{scenario}"):
            export_raw(server.grpc_target, body, KEY)


def _send_plain(server: Server, *, age_days: int, traces: int, spans: int) -> None:
    end = time.time_ns() - age_days * DAY_NANOS
    for _ in range(traces):
        request = plain_request(new_trace_id(), [new_span_id() for _ in range(spans)],
                                start_unix_nano=end - 1000, end_unix_nano=end)
        export_raw(server.grpc_target, request.SerializeToString(), KEY)


def _table_counts(db: Path, cutoff: int) -> dict[str, tuple[int, int]]:
    """Per table, (rows of traces older than the cutoff, rows of the rest)."""
    old_traces = (
        "SELECT trace_id FROM spans GROUP BY trace_id HAVING max(end_unix_nano) < $cutoff"
    )
    old_runs = f"SELECT run_id FROM executions WHERE trace_id IN ({old_traces})"
    old_run_keys = f"SELECT run_key FROM executions WHERE trace_id IN ({old_traces})"
    queries = {
        "traces": ("SELECT count(DISTINCT trace_id) FROM spans", "trace_id"),
        "spans": ("SELECT count(*) FROM spans", "trace_id"),
        "executions": ("SELECT count(*) FROM executions", "trace_id"),
        "transitions": ("SELECT count(*) FROM transitions", "trace_id"),
        "replays": ("SELECT count(*) FROM execution_replays", "run_id"),
        "field_values": ("SELECT count(*) FROM field_values", "run_key"),
        "field_ranges": ("SELECT count(*) FROM field_ranges", "run_key"),
    }
    counts = {}
    with duckdb.connect(str(db), read_only=True) as connection:
        for table, (select, column) in queries.items():
            subquery = {"trace_id": old_traces, "run_id": old_runs, "run_key": old_run_keys}[column]
            old_count = connection.execute(
                f"{select} WHERE {column} IN ({subquery})", {"cutoff": cutoff}
            ).fetchone()
            new_count = connection.execute(
                f"{select} WHERE {column} NOT IN ({subquery})", {"cutoff": cutoff}
            ).fetchone()
            assert old_count is not None and new_count is not None
            counts[table] = (old_count[0], new_count[0])
    return counts


def _chunk_counts(db: Path, cutoff: int) -> dict[str, int]:
    """Span chunks: all, those whose every span is of a trace older than the cutoff, unused."""
    old_traces = "SELECT trace_id FROM spans GROUP BY trace_id HAVING max(end_unix_nano) < ?"
    with duckdb.connect(str(db), read_only=True) as connection:
        row = connection.execute(
            f"""
            SELECT (SELECT count(DISTINCT chunk_id) FROM span_chunk_pieces),
                   (SELECT count(DISTINCT chunk_id) FROM span_chunk_pieces WHERE chunk_id IN
                        (SELECT chunk_id FROM spans GROUP BY chunk_id
                         HAVING bool_and(trace_id IN ({old_traces})))),
                   (SELECT count(DISTINCT chunk_id) FROM span_chunk_pieces WHERE chunk_id NOT IN
                        (SELECT chunk_id FROM spans WHERE chunk_id IS NOT NULL))
            """,
            [cutoff],
        ).fetchone()
    assert row is not None
    return {"all": row[0], "old_only": row[1], "unreferenced": row[2]}


def _prune_cli(db: Path, age: str) -> dict[str, int]:
    result = subprocess.run(
        [sys.executable, "-m", "collector", "prune", "--older-than", age, "--db", str(db),
         "--json"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stderr
    counts: dict[str, int] = json.loads(result.stdout)
    return counts


def test_prune_removes_only_traces_older_than_the_limit(make_server: MakeServer) -> None:
    server: Server = make_server()
    _send_fixtures(server, age_days=60, tag="old")
    _send_fixtures(server, age_days=0, tag="new")
    _send_plain(server, age_days=45, traces=3, spans=4)
    server.wait_replayed()
    server.stop()
    cutoff = time.time_ns() - 30 * DAY_NANOS
    before = _table_counts(server.db, cutoff)
    assert all(old > 0 and new > 0 for old, new in before.values()), before

    chunks_before = _chunk_counts(server.db, cutoff)
    assert chunks_before["old_only"] > 0 and chunks_before["unreferenced"] == 0

    pruned = _prune_cli(server.db, "30d")

    assert pruned == {table: old for table, (old, _) in before.items()}
    after = _table_counts(server.db, cutoff)
    assert after == {table: (0, new) for table, (_, new) in before.items()}
    # The span bytes of old traces went with them; the others' are all still there.
    assert _chunk_counts(server.db, cutoff) == {
        "all": chunks_before["all"] - chunks_before["old_only"],
        "old_only": 0,
        "unreferenced": 0,
    }
    # A second prune finds nothing more to do.
    assert set(_prune_cli(server.db, "30d").values()) == {0}


@pytest.mark.slow
def test_prune_through_a_running_server_never_blocks_ingestion(make_server: MakeServer) -> None:
    server: Server = make_server()
    # More than one 5,000-span batch of old data, so the prune commits several times.
    _send_plain(server, age_days=90, traces=120, spans=100)
    _send_fixtures(server, age_days=90, tag="old")
    server.wait_replayed()
    cutoff = time.time_ns() - 30 * DAY_NANOS
    old_spans = 120 * 100
    stop = threading.Event()
    sent: list[int] = []
    failures: list[BaseException] = []

    def export_new() -> None:
        while not stop.is_set():
            trace_id, span_ids = new_trace_id(), [new_span_id() for _ in range(20)]
            now = time.time_ns()
            body = plain_request(trace_id, span_ids, start_unix_nano=now - 1000,
                                 end_unix_nano=now).SerializeToString()
            try:
                export_raw(server.grpc_target, body, KEY, timeout=10)
            except BaseException as exc:  # any failure fails the test below
                failures.append(exc)
                return
            sent.append(len(span_ids))

    exporters = [threading.Thread(target=export_new) for _ in range(4)]
    for exporter in exporters:
        exporter.start()
    try:
        # Exports are under way when the prune starts, and still succeed after it.
        wait_until(
            lambda: len(sent) >= 6 or failures, timeout=60, interval=0.01,
            what="exports before the prune",
        )  # fmt: skip
        pruned = _prune_cli(server.db, "30d")
        during = len(sent)
        wait_until(
            lambda: len(sent) >= during + 6 or failures, timeout=60, interval=0.01,
            what="exports after the prune",
        )  # fmt: skip
    finally:
        stop.set()
        for exporter in exporters:
            exporter.join()
    assert not failures, failures
    assert len(sent) > 10
    assert pruned["spans"] >= old_spans
    health = server.wait_replayed()
    assert health["spans"] == sum(sent)
    server.stop()
    counts = _table_counts(server.db, cutoff)
    assert {table: old for table, (old, _) in counts.items()} == dict.fromkeys(counts, 0)


@pytest.mark.slow
def test_serve_retain_prunes_in_the_background(make_server: MakeServer) -> None:
    server: Server = make_server("--retain", "30d", "--prune-every", "1s")
    _send_fixtures(server, age_days=400, tag="old")
    _send_fixtures(server, age_days=1, tag="new")
    server.wait_replayed()
    stored = wait_until(
        lambda: server.get_json("/api/executions?limit=100")["executions"],
        until=lambda executions: all(
            "-old-" not in e["store_id"] for e in executions if e["store_id"]
        ),
        timeout=30, interval=0.2, what="the old executions to be pruned",
    )  # fmt: skip
    assert stored, "the new executions must stay"
    assert all("-new-" in e["store_id"] for e in stored if e["store_id"])


def test_prune_durations_accept_hours_days_weeks_only() -> None:
    assert parse_duration("30d", "hdw") == 30 * DAY_NANOS
    assert parse_duration("12h", "hdw") == 12 * 3600 * 10**9
    assert parse_duration("2w", "hdw") == 14 * DAY_NANOS
    for text in ("6m", "0d", "-1d", "1.5d", "d", "30"):
        with pytest.raises(DurationError):
            parse_duration(text, "hdw")
