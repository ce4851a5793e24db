"""Every captured Junjo request, sent as its exact bytes through a real gRPC channel.

The expectations are derived from the capture's own JSON rendering and its
manifest, a separate path from the protobuf decoding under test.
"""

from __future__ import annotations

import base64
import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
from support.servers import (
    FIXTURES,
    Server,
    captured_compression,
    manifest,
    scenarios,
    send_scenario,
)

from collector.encode.documents import unpack

OWNER_TYPES = {"workflow", "subflow", "agent"}


def _attributes(items: list[dict[str, Any]]) -> dict[str, Any]:
    values = {}
    for item in items:
        value = item.get("value", {})
        if "stringValue" in value:
            values[item["key"]] = value["stringValue"]
        elif "intValue" in value:
            values[item["key"]] = int(value["intValue"])
        elif "boolValue" in value:
            values[item["key"]] = value["boolValue"]
    return values


def _captured_spans(scenario: str) -> list[dict[str, Any]]:
    spans = []
    for path in sorted((FIXTURES / scenario).glob("request_*.json")):
        request = json.loads(path.read_text())
        for resource_spans in request.get("resourceSpans", []):
            for scope_spans in resource_spans.get("scopeSpans", []):
                spans.extend(scope_spans.get("spans", []))
    return spans


def _hex(b64: str) -> str:
    return base64.b64decode(b64).hex()


@pytest.fixture(scope="module")
def loaded_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """All fixtures sent to one server, which is then stopped cleanly."""
    db = tmp_path_factory.mktemp("fixtures") / "statetrail.duckdb"
    server = Server.on_free_ports(db, "--api-key", "test-junjo-api-key-0123456789").start()
    try:
        for scenario in scenarios():
            compression = captured_compression(scenario)
            for reply in send_scenario(server.grpc_target, scenario, compression=compression):
                assert reply == b"", f"{scenario}: unexpected partial success {reply!r}"
    finally:
        assert server.stop() in (0, -signal.SIGTERM), server.output()
    yield db


@pytest.fixture(scope="module")
def db(loaded_db: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    connection = duckdb.connect(str(loaded_db), read_only=True)
    yield connection
    connection.close()


@pytest.mark.parametrize("scenario", scenarios())
def test_fixture_every_span_stored_once(db: duckdb.DuckDBPyConnection, scenario: str) -> None:
    captured = _captured_spans(scenario)
    keys = [(_hex(s["traceId"]), _hex(s["spanId"])) for s in captured]
    for trace_id, span_id in keys:
        (count,) = db.execute(
            "SELECT count(*) FROM spans WHERE trace_id = ? AND span_id = ?", [trace_id, span_id]
        ).fetchone() or (0,)
        assert count == 1


@pytest.mark.parametrize("scenario", scenarios())
def test_fixture_every_set_state_event_is_a_transition(
    db: duckdb.DuckDBPyConnection, scenario: str
) -> None:
    for span in _captured_spans(scenario):
        events = [e for e in span.get("events", []) if e["name"] == "set_state"]
        stored = db.execute(
            "SELECT store_id, sequence, action, revision_before, revision_after, patch"
            " FROM transitions WHERE trace_id = ? AND span_id = ? ORDER BY event_index",
            [_hex(span["traceId"]), _hex(span["spanId"])],
        ).fetchall()
        expected = [
            (
                a["junjo.store.id"], a["junjo.store.transition.sequence"], a["junjo.store.action"],
                a["junjo.store.revision.before"], a["junjo.store.revision.after"],
                a["junjo.state_json_patch"],
            )
            for a in (_attributes(e["attributes"]) for e in events)
        ]
        assert stored == expected


@pytest.mark.parametrize("scenario", scenarios())
def test_fixture_every_owner_span_is_an_execution(
    db: duckdb.DuckDBPyConnection, scenario: str
) -> None:
    for span in _captured_spans(scenario):
        attrs = _attributes(span.get("attributes", []))
        if attrs.get("junjo.span_type") not in OWNER_TYPES:
            continue
        row = db.execute(
            "SELECT kind, name, trace_id, span_id, store_id, transition_start, transition_end,"
            " transition_count, state_start, state_end, contract_version, reconstructable"
            " FROM executions WHERE run_id = ?",
            [attrs["junjo.executable_runtime_id"]],
        ).fetchone()
        assert row is not None
        assert row[:4] == (
            attrs["junjo.span_type"], span["name"], _hex(span["traceId"]), _hex(span["spanId"])
        )
        prefix = "junjo.agent" if attrs["junjo.span_type"] == "agent" else "junjo.workflow"
        assert row[4] == attrs.get(f"{prefix}.store.id")
        assert row[5:8] == (
            attrs.get("junjo.store.transition.start"),
            attrs.get("junjo.store.transition.end"),
            attrs.get("junjo.store.transition.count"),
        )
        # Stored packed (collector/encode/documents.py); read back, the text is as sent.
        assert unpack(row[8]) == attrs.get(f"{prefix}.state.start")
        assert unpack(row[9]) == attrs.get(f"{prefix}.state.end")
        assert row[10] == 3
        assert row[11] == attrs.get("junjo.store.reconstructable")


@pytest.mark.parametrize(
    "scenario", [s for s in scenarios() if "run_id" in manifest(s)["outcome"]]
)
def test_fixture_outcome_matches_manifest(db: duckdb.DuckDBPyConnection, scenario: str) -> None:
    outcome = manifest(scenario)["outcome"]
    row = db.execute(
        "SELECT status, state_end, error_type FROM executions WHERE run_id = ?",
        [outcome["run_id"]],
    ).fetchone()
    assert row is not None
    status, state_end, error_type = row
    if "raised" in outcome:
        assert status == "error"
        assert error_type is not None
        assert json.loads(unpack(state_end) or "") == outcome["state_at_failure"]
    else:
        assert status == "ok"
        assert json.loads(unpack(state_end) or "") == outcome["final_state"]


def test_fixture_split_batches_join_transitions_to_late_owner(
    db: duckdb.DuckDBPyConnection,
) -> None:
    """The workflow span arrives in the last request; its transitions came before it."""
    rows = db.execute(
        """
        SELECT e.run_id, e.transition_end - e.transition_start, count(t.sequence)
        FROM executions e JOIN transitions t
          ON t.store_id = e.store_id
         AND t.sequence > e.transition_start AND t.sequence <= e.transition_end
        WHERE e.name = 'Slow Workflow'
        GROUP BY ALL
        """
    ).fetchall()
    assert len(rows) == 1
    _, expected, received = rows[0]
    assert received == expected == 6


def test_fixture_large_state_records_dropped_events(db: duckdb.DuckDBPyConnection) -> None:
    rows = db.execute(
        "SELECT dropped_events_count FROM spans WHERE dropped_events_count > 0"
    ).fetchall()
    assert rows and all(count > 0 for (count,) in rows)
