"""Live junjo 0.69.0 workflows exporting to a running `statetrail serve`.

The application runs in its own process (Junjo uses the global TracerProvider)
with the real exporters: Junjo's JunjoOtelExporter and the standard
OTLPSpanExporter. What statetrail stored is compared with what the application
itself saw. Besides the shipped fixtures' shapes, three that SCHEMA.md describes
but does not ship run here live: a store lent to several executions
(h_borrowed_store), an Agent in a node (j_agent_in_node) and a long looping run
split over requests (g2_large_state_loop).
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import urllib.parse
import urllib.request
from html import unescape
from pathlib import Path
from typing import Any, Protocol

import duckdb
import httpx
import pytest
from support.seeds import seed_id, seeds
from support.servers import MakeServer, Server
from test_execution_page import assert_span_anchors_resolve

from collector.encode import documents
from collector.index.query_ast import Path as FieldPath
from collector.index.query_ast import format_path
from collector.replay.jsondoc import pointer_text
from studio.links import run_id_segment

pytestmark = [pytest.mark.junjo, pytest.mark.slow]
APP = Path(__file__).parent / "apps" / "junjo_app.py"
KEY = "live-test-key"


# What junjo_app.py printed, by scenario: the run id and the state the application saw.
Runs = dict[str, dict[str, Any]]


class StoredRuns(Protocol):
    """The `stored` fixture: run scenarios with an exporter; the runs and the stopped DB."""

    def __call__(self, exporter: str, *scenarios: str) -> tuple[Runs, Path]: ...


class ReplayedRuns(Protocol):
    """The `replayed` fixture: run scenarios (`env` adds to the application's
    environment: SDK limits); the runs and the live, replayed server."""

    def __call__(
        self, *scenarios: str, env: dict[str, str] | None = None
    ) -> tuple[Runs, Server]: ...


def _run_app(
    server: Server, exporter: str, *scenarios: str, env: dict[str, str] | None = None
) -> Runs:
    """Run the scenarios in their own process; `env` adds to its environment (SDK limits)."""
    completed = subprocess.run(
        [sys.executable, str(APP), server.grpc_target, KEY, exporter, *scenarios],
        capture_output=True, text=True, timeout=120, check=True,
        env={**os.environ, **(env or {})},
    )
    runs = [json.loads(line) for line in completed.stdout.splitlines() if line.startswith("{")]
    return {run["scenario"]: run for run in runs}


@pytest.fixture
def stored(make_server: MakeServer) -> StoredRuns:
    def run(exporter: str, *scenarios: str) -> tuple[Runs, Path]:
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
    # States and graph are stored compressed (collector/encode/documents.py).
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
def test_live_linear_and_concurrent_runs_are_stored_whole(
    stored: StoredRuns, exporter: str
) -> None:
    runs, db = stored(exporter, "linear", "concurrent")
    for name in ("linear", "concurrent"):
        execution = _execution(db, runs[name]["run_id"])
        assert execution["status"] == "ok"
        assert execution["service"] == "refund-service"
        assert json.loads(execution["state_end"]) == runs[name]["final_state"]
        expected = list(range(execution["transition_start"] + 1, execution["transition_end"] + 1))
        assert _received(db, execution) == expected
        assert len(expected) == execution["transition_count"] >= 5


def test_live_subflow_is_a_child_execution_with_its_own_store(stored: StoredRuns) -> None:
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


def test_live_subflow_in_run_concurrent_is_a_child_of_the_workflow(replayed: ReplayedRuns) -> None:
    # Its junjo.parent_executable_type is run_concurrent: the parent run is
    # found through the RunConcurrent span (collector/store/lineage.py).
    runs, server = replayed("concurrent_subflow")
    run = runs["concurrent_subflow"]
    _, review = _verified_with_one_child(server, run, "subflow", "Manual Review")
    assert server.get_json(f"/api/executions/{review['id']}")["parent"]["id"] == run["run_id"]
    assert "review: approved" in run["final_state"]["notes"]
    # The graph draws the subflow inside its RunConcurrent group, as a link to its run.
    html = httpx.get(f"{server.url}/executions/{run['run_id']}", timeout=30).text
    graph = html[html.index('id="graph"') :]
    child = re.search(
        r'<g class="x-gchild kind-subflow[^"]*">\s*<title>[^<]*</title>\s*<a href="([^"]+)">', graph
    )
    assert child is not None and child.group(1) == f"/executions/{review['id']}"


def test_live_twin_subflows_each_draw_their_own_run_in_the_graph(replayed: ReplayedRuns) -> None:
    # Two instances of one subflow share a structural id (their graphs have one
    # shape); each graph box counts and opens its own run, by definition id.
    runs, server = replayed("twin_subflows")
    run = runs["twin_subflows"]
    assert run["final_state"]["notes"] == ["review: approved", "review: approved"]
    detail = server.get_json(f"/api/executions/{run['run_id']}")
    assert detail["verdict"] == "verified", detail["diagnostics"]
    first, second = sorted(detail["children"], key=lambda child: child["start_unix_nano"])
    html = httpx.get(f"{server.url}/executions/{run['run_id']}", timeout=30).text
    graph = html[html.index('id="graph"') :]
    box = r'<g class="x-gnode kind-subflow[^"]*">\s*<title>([^<]*)</title>\s*<a href="([^"]+)">'
    boxes = re.findall(box, graph)
    assert boxes == [
        ("Manual Review (ReviewSubflow): ran 1 time", f"/executions/{first['id']}"),
        ("Manual Review (ReviewSubflow): ran 1 time", f"/executions/{second['id']}"),
    ]


def test_live_run_that_lost_its_store_id_gets_its_verdict_in_the_list_too(
    replayed: ReplayedRuns,
) -> None:
    # The SDK drops a span's oldest attributes first: at 14 the workflow span
    # loses its start state and store id (it is an execution naming no store),
    # the subflow span even its junjo.span_type and run id (no execution).
    runs, server = replayed("subflow", env={"OTEL_ATTRIBUTE_COUNT_LIMIT": "14"})
    run_id = runs["subflow"]["run_id"]
    detail = server.get_json(f"/api/executions/{run_id}")
    assert (detail["store_id"], detail["verdict"]) == (None, "not_applicable")
    dropped = [d for d in detail["diagnostics"] if d["code"] == "otlp_data_dropped"]
    assert detail["children"] == [] and len(dropped) == 2
    # The parent says what the cut subflow span was and why its run is missing.
    (subflow,) = [d for d in dropped if "Manual Review" in d["message"]]
    assert "junjo.span_type was among them" in subflow["message"]
    assert "not listed as an execution" in subflow["message"]

    def listed(**filters: str) -> list[tuple[str, str, int | None]]:
        query = urllib.parse.urlencode(filters)
        rows = server.get_json(f"/api/executions?{query}")["executions"]
        return [(row["id"], row["verdict"], row["diagnostic_warnings"]) for row in rows]

    assert listed() == [(run_id, "not_applicable", 2)]
    assert listed(verdict="not_applicable") == [(run_id, "not_applicable", 2)]
    assert listed(verdict="pending") == []

    # A crash between the commit and the replay leaves the run never replayed;
    # the next start finds it, as it finds stores.
    server.stop()
    with duckdb.connect(str(server.db)) as connection:
        connection.execute("DELETE FROM execution_replays WHERE run_id = ?", [run_id])
    server.start()
    server.wait_replayed()
    assert listed(verdict="not_applicable") == [(run_id, "not_applicable", 2)]


def test_live_state_at_a_step_that_never_arrived_says_so(replayed: ReplayedRuns) -> None:
    # One event per span (the SDK keeps the newest): a node's earlier writes are lost.
    runs, server = replayed("linear", env={"OTEL_SPAN_EVENT_COUNT_LIMIT": "1"})
    run_id = runs["linear"]["run_id"]
    timeline = server.get_json(f"/api/executions/{run_id}/timeline")
    assert timeline["verdict"] == "partial" and timeline["missing"]
    hole = timeline["missing"][0]
    before = max(t["sequence"] for t in timeline["transitions"] if t["sequence"] < hole["first"])
    inside = server.get_json(f"/api/executions/{run_id}/state?sequence={hole['last']}")
    assert (inside["missing"], inside["verified"]) == (hole, False)
    assert inside["state_of_sequence"] == before
    received = server.get_json(f"/api/executions/{run_id}/state?sequence={before}")
    assert (received["missing"], received["state_of_sequence"]) == (None, before)


def test_live_events_a_subflow_span_dropped_count_against_the_store_they_wrote(
    replayed: ReplayedRuns,
) -> None:
    # One event per span: the subflow span keeps its post_run write (the
    # parent's store) and drops its pre_run one (the subflow's own store).
    runs, server = replayed("subflow", env={"OTEL_SPAN_EVENT_COUNT_LIMIT": "1"})
    run_id = runs["subflow"]["run_id"]
    parent = server.get_json(f"/api/executions/{run_id}")
    # Every transition of the parent arrived: the drop is said, as none of its loss.
    assert parent["verdict"] == "verified"
    (dropped,) = parent["diagnostics"]
    assert (dropped["code"], dropped["severity"]) == ("otlp_data_dropped", "info")
    assert "every transition of this run arrived" in dropped["message"]
    (listed,) = server.get_json("/api/executions?kind=workflow")["executions"]
    assert listed["diagnostic_warnings"] == 0
    # The subflow's own store lost its pre_run write: a warning, with the gap.
    (child,) = parent["children"]
    review = server.get_json(f"/api/executions/{child['id']}")
    assert review["verdict"] == "partial"
    (own,) = [d for d in review["diagnostics"] if d["code"] == "otlp_data_dropped"]
    assert own["severity"] == "warning" and own["span_id"] == dropped["span_id"]
    assert "sequence_gap" in _codes(review)


def _verified_with_one_child(
    server: Server, run: dict[str, Any], kind: str, name: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run's detail and its one child, both verified; the run's end as the app saw it."""
    workflow = server.get_json(f"/api/executions/{run['run_id']}")
    assert workflow["verdict"] == "verified", workflow["diagnostics"]
    (child,) = workflow["children"]
    assert (child["kind"], child["workflow"], child["verdict"]) == (kind, name, "verified")
    assert server.get_json(f"/api/executions/{run['run_id']}/state")["state"] == run["final_state"]
    return workflow, child


def test_live_failing_run_is_stored_with_its_error(stored: StoredRuns) -> None:
    runs, db = stored("otlp", "failing")
    execution = _execution(db, runs["failing"]["run_id"])
    assert execution["status"] == "error"
    assert execution["error_type"] == "RuntimeError"
    assert "payment provider returned 502" in execution["status_message"]
    assert json.loads(execution["state_end"])["notes"] == ["calling the payment provider"]


@pytest.fixture
def replayed(make_server: MakeServer) -> ReplayedRuns:
    """Run scenarios against a live server and wait until every execution is replayed."""

    def run(*scenarios: str, env: dict[str, str] | None = None) -> tuple[Runs, Server]:
        server: Server = make_server("--api-key", KEY)
        runs = _run_app(server, "junjo", *scenarios, env=env)
        server.wait_replayed()
        return runs, server

    return run


def _codes(detail: dict[str, Any]) -> list[str]:
    return [diagnostic["code"] for diagnostic in detail["diagnostics"]]


def test_live_borrowed_store_is_replayed_across_traces(replayed: ReplayedRuns) -> None:
    # h_borrowed_store's shape (SCHEMA.md 7.1, 7.4, 7.5): one live store lent to
    # four top-level executions, each its own trace; not shipped as a fixture.
    runs, server = replayed("borrowed_store")
    details = {
        label: server.get_json(f"/api/executions/{runs[f'borrowed_{label}']['run_id']}")
        for label in ("one", "two", "three", "four")
    }
    assert len({detail["store_id"] for detail in details.values()}) == 1
    assert len({detail["trace_id"] for detail in details.values()}) == 4
    (store_id,) = {detail["store_id"] for detail in details.values()}
    lent = server.get_json(f"/api/executions?store={store_id}")["executions"]
    assert {e["id"] for e in lent} == {detail["id"] for detail in details.values()}
    ends = {
        label: server.get_json(f"/api/executions/{detail['id']}/state")
        for label, detail in details.items()
    }
    for label in ("one", "three", "four"):
        assert ends[label]["verified"], label
        assert ends[label]["state"] == runs[f"borrowed_{label}"]["final_state"], label
    # Each run picks up the store where the one before left it.
    assert details["one"]["transition_start"] == 0
    assert details["two"]["transition_start"] == details["one"]["transition_end"]
    assert details["one"]["verdict"] == "verified"
    # "two": a task that no span was current in wrote the store meanwhile, so one
    # sequence of its interval has no event, and the replayed end cannot match.
    two = details["two"]
    assert two["verdict"] == "partial"
    assert two["received_transitions"] == two["transition_count"] - 1
    assert {"sequence_gap", "end_state_mismatch"} <= set(_codes(two))
    assert not ends["two"]["verified"]
    seen_by_app = runs["borrowed_two"]["final_state"]
    assert ends["two"]["state"] == seen_by_app | {
        "notes": [n for n in seen_by_app["notes"] if n != "written by a background task"]
    }
    # "three" and "four" ran at once: the one that started first holds the
    # other's writes in its interval, from another trace, and still verifies.
    three, four = sorted((details["three"], details["four"]), key=lambda d: d["transition_start"])
    assert three["verdict"] == four["verdict"] == "verified"
    assert four["transition_start"] < three["transition_end"]
    for detail in (three, four):
        assert detail["received_transitions"] == detail["transition_count"]
    # A linear run writes 8 transitions itself; the rest of the interval is the other's.
    assert three["transition_count"] > 8
    foreign = [d for d in three["diagnostics"] if d["code"] == "foreign_writer"]
    assert foreign and all(d["trace_id"] == four["trace_id"] for d in foreign)
    assert all(four["trace_id"] in d["message"] for d in foreign)
    # The page links each such finding to the runs of the writer's trace (there,
    # the writer is the only run) and to the writer, and each foreign step to the
    # writer, whose page shows the span that wrote it.
    page = urllib.request.urlopen(f"{server.url}/executions/{three['id']}").read().decode()
    writer = f'href="/executions/{four["id"]}"'
    assert f'<a class="x-goto" href="/?trace={four["trace_id"]}"' in page
    assert f'<a class="x-goto" {writer}' in page
    assert f'<a class="x-mark mark-foreign" {writer}' in page
    in_that_trace = server.get_json(f"/api/executions?trace={four['trace_id']}")["executions"]
    assert [e["id"] for e in in_that_trace] == [four["id"]]
    assert "foreign_writer" not in _codes(four)
    timeline = server.get_json(f"/api/executions/{three['id']}/timeline")["transitions"]
    for step in (t for t in timeline if t["foreign"]):
        page = httpx.get(
            f"{server.url}/executions/{three['id']}", params={"step": step["sequence"]}
        ).text
        assert_span_anchors_resolve(page)
        assert f'{writer[:-1]}?step={step["sequence"]}#span-{step["span_id"]}"' in page


def _start_writer_text(html: str) -> str:
    """The provenance panel's sentence on who set a start-state value, tags dropped."""
    return _block_text(html, 'class="x-start-writer', "</p>")


def test_live_borrowed_store_provenance_names_the_earlier_run_that_wrote_the_value(
    replayed: ReplayedRuns,
) -> None:
    # The last run on a lent store starts with refund.eligible as "one" left it,
    # two runs back: its own provenance has no write, so the panel walks back
    # through the store's earlier runs to the write that set it.
    runs, server = replayed("borrowed_store")
    details = [
        server.get_json(f"/api/executions/{runs[f'borrowed_{label}']['run_id']}")
        for label in ("one", "two", "three", "four")
    ]
    one = details[0]
    last = max(details, key=lambda d: d["transition_start"])
    assert last["transition_start"] > one["transition_end"]
    own = server.get_json(f"/api/executions/{one['id']}/provenance?path=/refund/eligible")
    (written,) = [w for w in own["writes"] if w["after"] is True]
    found = server.get_json(f"/api/executions/{last['id']}/provenance?path=/refund/eligible")
    assert found["writes"] == [] and found["last_writer"] is None
    target = f"/executions/{one['id']}?step={written['sequence']}&path=/refund/eligible#provenance"
    assert found["start_writer"] == {
        "run_id": one["id"], "run_name": "Refund Workflow", "sequence": written["sequence"],
        "action": written["action"], "span_name": written["node"], "href": target,
        # "two"'s interval lost the background task's write: it may have written it too.
        "verified": False,
    }
    page = httpx.get(
        f"{server.url}/executions/{last['id']}", params={"path": "/refund/eligible"}
    ).text
    assert "the value comes from the start state" in page
    assert _start_writer_text(page) == (
        f"Earlier runs on this store set it: last written at step {written['sequence']} of"
        f" Refund Workflow (run {one['id']}) by {written['action']} in {written['node']}"
        " unverified. Every run on this store"
    )
    assert f'<a href="{target.replace("&", "&amp;")}">step {written["sequence"]} of' in page
    assert f'<a href="/?store={one["store_id"]}">Every run on this store</a>' in page
    # The in-place panel (htmx) says the same.
    panel = httpx.get(
        f"{server.url}/executions/{last['id']}/provenance", params={"path": "/refund/eligible"}
    ).text
    assert _start_writer_text(panel) == _start_writer_text(page)
    # A value the earlier runs cannot account for ("three" starts with the
    # background task's note, which no event recorded) names no writer.
    three = min(details[2:], key=lambda d: d["transition_start"])
    notes = httpx.get(
        f"{server.url}/executions/{three['id']}",
        params={"path": "/notes", "step": three["transition_start"]},
    ).text
    assert "As recorded in the start state." in notes
    assert _start_writer_text(notes) == (
        "Earlier runs used this run's store and left its start state; none of them shows"
        " a write that set this value: every run on this store."
    )
    # The first run's store was fresh: nothing earlier to point at.
    fresh = httpx.get(
        f"{server.url}/executions/{one['id']}", params={"path": "/order_id", "step": 0}
    ).text
    assert "As recorded in the start state." in fresh and "x-start-writer" not in fresh


def test_live_store_written_between_its_runs_names_that_write(replayed: ReplayedRuns) -> None:
    # A request handler lends one store to two runs and writes it before each,
    # inside the request's span: those events arrive, but in no run's interval.
    runs, server = replayed("lent_in_request")
    first, second = (
        server.get_json(f"/api/executions/{runs[f'lent_in_request_{label}']['run_id']}")
        for label in ("first", "second")
    )
    assert first["verdict"] == second["verdict"] == "verified"
    between = first["transition_end"] + 1
    assert (first["transition_start"], second["transition_start"]) == (1, between)

    def origin(run: dict[str, Any], path: str) -> Any:
        found = server.get_json(f"/api/executions/{run['id']}/provenance?path={path}")
        assert found["writes"] == []
        return found["start_writer"]

    handler = {
        "run_id": None, "run_name": None, "span_name": "POST /refunds",
        "href": f"/?trace={first['trace_id']}", "verified": True,
    }
    # Replayed from the first run's end: the decision the handler made between.
    assert origin(second, "/refund/reason") == handler | {"sequence": between, "action": "decide"}
    # Before the first run, no state is known: read off the write of the whole field,
    # found walking back through the first run, which did not change it.
    assert origin(second, "/order_id") == handler | {"sequence": 1, "action": "load_order"}
    assert origin(first, "/customer/tier") == handler | {"sequence": 1, "action": "load_order"}
    assert server.get_json(f"/api/executions/{second['id']}/state")["state"] == (
        runs["lent_in_request_second"]["final_state"]
    )
    page = httpx.get(
        f"{server.url}/executions/{second['id']}", params={"path": "/refund/reason"}
    ).text
    assert _start_writer_text(page) == (
        f"The store was written between its runs: last at step {between}, in no run, by"
        " decide in POST /refunds (the runs of its trace). Every run on this store"
    )
    assert f'<a href="/?trace={first["trace_id"]}">the runs of its trace</a>' in page


def test_live_patch_the_store_did_not_commit_changes_nothing(replayed: ReplayedRuns) -> None:
    # Decimal("12.5") == Decimal("12.50") and True == 1: Junjo records a patch for
    # each write, but keeps the store's state and revision, as its end state shows.
    runs, server = replayed("ledger")
    run = runs["ledger"]
    assert run["final_state"] == {"amount": "12.50", "flag": 1}
    detail = server.get_json(f"/api/executions/{run['run_id']}")
    assert detail["verdict"] == "verified", detail["diagnostics"]
    assert [(d["code"], d["severity"], d["sequence"]) for d in detail["diagnostics"]] == [
        ("patch_not_committed", "info", 2), ("patch_not_committed", "info", 4),
    ]
    assert '"value":"12.5"' in detail["diagnostics"][0]["message"]
    for sequence, expected in [(1, "12.50"), (2, "12.50")]:
        state = server.get_json(f"/api/executions/{run['run_id']}/state?sequence={sequence}")
        assert (state["state"]["amount"], state["verified"]) == (expected, True)
    flag = server.get_json(f"/api/executions/{run['run_id']}/state?sequence=4")["state"]["flag"]
    assert flag == 1 and flag is not True
    provenance = server.get_json(f"/api/executions/{run['run_id']}/provenance?path=/amount")
    assert [(w["sequence"], w["after"]) for w in provenance["writes"]] == [(1, "12.50")]
    timeline = server.get_json(f"/api/executions/{run['run_id']}/timeline")["transitions"]
    assert [(t["sequence"], t["changed_paths"]) for t in timeline] == [
        (1, ["/amount"]), (2, []), (3, ["/flag"]), (4, []),
    ]
    # The step's page says why it changed nothing, quoting the patch received.
    page = unescape(httpx.get(f"{server.url}/executions/{run['run_id']}?step=2").text)
    assert 'No change: Transition 2 (action \'set_amount\'' in page
    assert "as replayed: the store did not commit the one received" in page


def _banner(html: str) -> str:
    """The outcome banner's text, tags dropped and whitespace collapsed."""
    return _block_text(html, 'id="outcome"', "</div>")


def _block_text(html: str, opening: str, closing: str) -> str:
    """The text of the element whose start tag holds `opening`, up to `closing`."""
    start = html.index(opening)
    block = html[start : html.index(closing, start)]
    return " ".join(unescape(re.sub(r"<[^>]+>", "", block.split(">", 1)[1])).split())


def test_live_failed_and_cancelled_runs_say_on_their_page_how_they_ended(
    replayed: ReplayedRuns,
) -> None:
    runs, server = replayed("failing", "failing_subflow", "cancelled", "cancelled_deep")

    def page(run_id: str) -> str:
        return httpx.get(f"{server.url}/executions/{run_id}").text

    # A node raised: the banner names it and links its span on the page.
    failing = page(runs["failing"]["run_id"])
    assert _banner(failing) == (
        "RuntimeError: payment provider returned 502 Raised in node Explode."
    )
    (span,) = re.findall(r'Raised in node <a href="#span-([0-9a-f]+)">Explode</a>', failing)
    assert f'id="span-{span}"' in failing
    # A subflow's node raised: the parent's error wraps the child's; the banner
    # opens the child run and tells its own error and node.
    parent_id = runs["failing_subflow"]["run_id"]
    detail = server.get_json(f"/api/executions/{parent_id}")
    (child,) = detail["children"]
    assert child["status"] == "error" and child["error_type"] == "RuntimeError"
    html = page(parent_id)
    assert _banner(html) == (
        "WorkflowExecutionError: Workflow execution failed for Failing Review."
        " Raised in subflow Failing Review: caused by RuntimeError:"
        " payment provider returned 502 in node Explode of Failing Review."
    )
    assert f'subflow <a href="/executions/{child["id"]}">Failing Review</a>' in html
    # The waterfall flags the workflow span with the exception's class name, its module
    # path in the tooltip, so the span's own name keeps the room.
    flag = re.search(r'<span class="x-exc-flag" title="([^"]*)">([^<]*)</span>', html)
    assert flag is not None and flag.group(2) == "WorkflowExecutionError"
    assert flag.group(1).startswith("junjo.") and ".WorkflowExecutionError: " in flag.group(1)
    (through,) = detail["outcome"]["culprits"]
    assert (through["kind"], through["run_id"]) == ("subflow", child["id"])
    assert (through["cause"]["name"], through["cause"]["error_type"]) == ("Explode", "RuntimeError")
    # Cancelled from outside while a node waited: why, and what was running.
    cancelled_id = runs["cancelled"]["run_id"]
    cancelled = server.get_json(f"/api/executions/{cancelled_id}")
    assert (cancelled["status"], cancelled["cancelled_reason"]) == ("cancelled", "cancelled")
    html = page(cancelled_id)
    assert _banner(html) == "Cancelled (reason: cancelled) while node AwaitBank was running."
    assert [c["name"] for c in cancelled["outcome"]["culprits"]] == ["AwaitBank"]
    assert 'class="x-outcome is-cancelled"' in html
    # Two subflows deep: every run between the top and the node is named.
    deep = page(runs["cancelled_deep"]["run_id"])
    assert _banner(deep) == (
        "Cancelled (reason: cancelled) while subflow Outer Review (in it, subflow Inner Review,"
        " in which node AwaitBank) was running."
    )


def test_live_run_that_raised_between_its_nodes_says_how_far_it_got(
    replayed: ReplayedRuns,
) -> None:
    # The edge condition after LoadOrder raises: no node did, so the banner says
    # the workflow itself raised, after the node that ended last.
    runs, server = replayed("failing_condition")
    run_id = runs["failing_condition"]["run_id"]
    assert "loyalty_tier" in runs["failing_condition"]["error"]
    found = server.get_json(f"/api/executions/{run_id}")["outcome"]
    assert (found["error_type"], found["culprits"]) == ("KeyError", [])
    assert (found["after"]["name"], found["after"]["kind"]) == ("LoadOrder", "node")
    html = httpx.get(f"{server.url}/executions/{run_id}").text
    assert _banner(html) == (
        "KeyError: 'loyalty_tier' No node raised it, as far as the spans that arrived show;"
        " the last to end was node LoadOrder. It came from the workflow itself, while"
        " choosing the next node (an edge condition raised, or no edge applied)."
    )
    assert f'node <a href="#span-{found["after"]["span_id"]}">LoadOrder</a>' in html


def test_live_failure_is_traced_to_the_node_not_to_a_library_span_inside_it(
    replayed: ReplayedRuns,
) -> None:
    # Two nodes each call a model through a client span the SDK marks ERROR; the
    # first catches the timeout, the second does not. The run failed in the
    # second node: neither client span is a culprit, nor is the node that recovered.
    runs, server = replayed("llm_failure")
    run_id = runs["llm_failure"]["run_id"]
    html = httpx.get(f"{server.url}/executions/{run_id}").text
    assert _banner(html) == "TimeoutError: model timed out Raised in node AskModel."
    culprits = server.get_json(f"/api/executions/{run_id}")["outcome"]["culprits"]
    assert [(c["name"], c["kind"], c["error_type"]) for c in culprits] == [
        ("AskModel", "node", "TimeoutError")
    ]
    (span,) = re.findall(r'Raised in node <a href="#span-([0-9a-f]+)">AskModel</a>', html)
    assert span == culprits[0]["span_id"] and f'id="span-{span}"' in html


def test_live_failed_agent_names_the_tool_that_raised_as_an_operation(
    replayed: ReplayedRuns,
) -> None:
    # An agent's tool span carries no junjo.span_type: it is an agent operation, not a node.
    runs, server = replayed("failing_agent")
    run_id = runs["failing_agent"]["run_id"]
    (agent,) = server.get_json(f"/api/executions/{run_id}")["children"]
    assert (agent["kind"], agent["status"]) == ("agent", "error")
    (culprit,) = server.get_json(f"/api/executions/{agent['id']}")["outcome"]["culprits"]
    assert (culprit["name"], culprit["kind"]) == ("tool record_note", "operation")
    banner = _banner(httpx.get(f"{server.url}/executions/{agent['id']}").text)
    assert banner.endswith("Raised in operation tool record_note.")
    # From the workflow's page: the agent's own culprit, inside the agent's run.
    (through,) = server.get_json(f"/api/executions/{run_id}")["outcome"]["culprits"]
    assert (through["kind"], through["run_id"]) == ("agent", agent["id"])
    assert (through["cause"]["name"], through["cause"]["kind"]) == ("tool record_note", "operation")
    assert "in operation tool record_note of Refund Triage Agent" in _banner(
        httpx.get(f"{server.url}/executions/{run_id}").text
    )


def test_live_large_state_loop_split_over_requests_is_verified(replayed: ReplayedRuns) -> None:
    # g2_large_state_loop's shape: a looping node grows a ~100 KB state, and its
    # spans are exported halfway through, so the workflow span comes requests later.
    runs, server = replayed("large_state_loop")
    run = runs["large_state_loop"]
    detail = server.get_json(f"/api/executions/{run['run_id']}")
    assert detail["verdict"] == "verified", detail["diagnostics"]
    assert detail["received_transitions"] == detail["transition_count"] == 30 * 21 + 1
    state = server.get_json(f"/api/executions/{run['run_id']}/state")
    assert state["verified"]
    assert state["state"] == run["final_state"]
    assert len(run["final_state"]["messages"]) == 30 * 20 + 1
    server.stop()
    with duckdb.connect(str(server.db), read_only=True) as connection:
        row = connection.execute(
            "SELECT count(DISTINCT chunk_id) FROM spans WHERE trace_id = ?", [detail["trace_id"]]
        ).fetchone()
    # One chunk per export: the run really did arrive in several requests.
    assert row is not None and row[0] > 1


def test_live_agent_in_node_is_a_child_run_and_its_tool_writes_the_workflow(
    replayed: ReplayedRuns,
) -> None:
    # j_agent_in_node's shape (SCHEMA.md 2.4): an Agent run inside a node names
    # the node as its parent, and its tool writes the workflow's store from the
    # tool span, among the events of the agent's private store.
    runs, server = replayed("agent_in_node")
    run = runs["agent_in_node"]
    workflow, agent = _verified_with_one_child(server, run, "agent", "Refund Triage Agent")
    assert agent["store_id"] != workflow["store_id"]
    detail = server.get_json(f"/api/executions/{agent['id']}")
    assert detail["parent"]["id"] == run["run_id"]
    # Its tool's one write to the workflow's store, which the agent span bounds.
    assert detail["application_store"] == {
        "id": workflow["store_id"], "transition_start": 1, "transition_end": 2,
        "run_id": f"{agent['id']}:application",
    }
    page = urllib.request.urlopen(f"{server.url}/executions/{agent['id']}").read().decode()
    assert f'href="/executions/{run["run_id"]}?step=2"' in page
    assert ">step 2 of Agent Refund Workflow</a>" in page
    provenance = server.get_json(f"/api/executions/{run['run_id']}/provenance?path=/notes/0")
    (write,) = provenance["writes"]
    assert (write["node"], write["action"], write["after"]) == (
        "tool record_note", "note", "carrier confirmed damage",
    )
    assert write["verified"]
    # The agent's second model request, as the real Agent sent it, read as a conversation.
    rows = re.findall(r'id="span-([0-9a-f]{16})">(.*?)</summary>', page, re.S)
    (span_id,) = [span for span, summary in rows if 'title="model request 2"' in summary]
    span_page = unescape(httpx.get(f"{server.url}/executions/{agent['id']}/spans/{span_id}").text)
    roles = re.findall(r'class="x-llm-role">(.*?)<', span_page)
    assert roles == ["system", "input", "assistant", "tool", "assistant"]
    assert '<code class="x-llm-call-name">record_note</code>' in span_page
    assert '"reason": "damaged in transit"' in span_page
    assert "<dt>Total tokens</dt><dd>184</dd>" in span_page


def _application_run(server: Server, agent_id: str) -> tuple[dict[str, Any], str]:
    """An agent's application-store run, verified, and the agent's page."""
    detail = server.get_json(f"/api/executions/{agent_id}")
    run_id = detail["application_store"]["run_id"]
    (child,) = detail["children"]
    assert (child["id"], child["kind"]) == (run_id, "application_store")
    assert child["verdict"] == "verified"
    quoted = urllib.parse.quote(run_id, safe="")
    application = server.get_json(f"/api/executions/{quoted}")
    assert application["store_id"] == detail["application_store"]["id"] != detail["store_id"]
    assert application["parent"]["id"] == agent_id
    page = httpx.get(f"{server.url}/executions/{agent_id}").text
    return application, page


def test_live_agent_on_a_store_no_workflow_owns_has_that_store_history_as_a_run(
    replayed: ReplayedRuns,
) -> None:
    # An agent given a store of its own, at the top level (`execute(store=...)`,
    # the store set up beforehand) or in a node (its `store_factory`): no other
    # run owns the store, so the agent's application-store run is its history.
    runs, server = replayed("top_level_agent", "own_store_agent")
    top = runs["top_level_agent"]
    application, page = _application_run(server, top["run_id"])
    quoted = run_id_segment(application["id"])
    # The setup write had no span: the run starts after it, with its value.
    assert (application["transition_start"], application["transition_end"]) == (1, 2)
    start = server.get_json(f"/api/executions/{quoted}/state?sequence=1")
    assert start["state"]["order_id"] == "B-2002"
    end = server.get_json(f"/api/executions/{quoted}/state")
    assert end["verified"] and end["state"] == top["final_state"]
    provenance = server.get_json(f"/api/executions/{quoted}/provenance?path=/notes/0")
    assert [(w["node"], w["action"], w["after"]) for w in provenance["writes"]] == [
        ("tool record_note", "note", "carrier confirmed damage")
    ]
    # The agent's page leads to that history at the tool's step; that run's page
    # says where its start state came from (the agent's span, not a workflow's).
    assert f'href="/executions/{quoted}?step=2"' in page
    own_page = unescape(httpx.get(f"{server.url}/executions/{quoted}").text)
    assert "start state (as recorded on the run's own span)" in own_page
    # The start of the agent's id, typed in the filter box, still names one run:
    # the agent (its application-store run's id starts the same).
    typed = httpx.get(f"{server.url}/", params={"where": top["run_id"][:10]})
    assert (typed.status_code, typed.headers["location"]) == (303, f"/executions/{top['run_id']}")
    # In a node: the workflow's store is another one, and the agent's page
    # leads to the agent's own application-store run, not to the workflow.
    workflow = server.get_json(f"/api/executions/{runs['own_store_agent']['run_id']}")
    (agent,) = workflow["children"]
    application, page = _application_run(server, agent["id"])
    assert application["store_id"] != workflow["store_id"]
    quoted = run_id_segment(application["id"])
    end = server.get_json(f"/api/executions/{quoted}/state")
    assert end["verified"]
    assert end["state"] == {
        "order_id": "A-1001", "notes": ["carrier confirmed damage"], "decision": None,
    }
    assert f'href="/executions/{quoted}?step=1"' in page
    assert server.get_json(f"/api/executions/{workflow['id']}/state")["state"] == (
        runs["own_store_agent"]["final_state"]
    )


def test_live_awkward_keys_rebuild_every_step_as_the_application_saw_it(
    replayed: ReplayedRuns,
) -> None:
    # Keys JSON Pointer escapes ("a/b", "~x"), that look like indexes ("0", "10"),
    # empty, non-ASCII and markup, written by three concurrent nodes, then
    # rewritten, reordered, removed and cleared by one: each
    # step's state, each field's last writer and the list's filter agree with the
    # states the application's store itself committed.
    runs, server = replayed("awkward_keys")
    run = runs["awkward_keys"]
    run_id, states = run["run_id"], run["states"]
    api = f"/api/executions/{urllib.parse.quote(run_id)}"
    detail = server.get_json(api)
    assert detail["verdict"] == "verified", detail["diagnostics"]
    assert detail["received_transitions"] == detail["transition_count"] == len(states) == 12 + 8
    # The concurrent writers' steps interleaved: not one writer's four, then the next's.
    assert len(set(run["writers"][:3])) > 1, run["writers"]
    for sequence, committed in enumerate(states, start=1):
        step = server.get_json(f"{api}/state?sequence={sequence}")
        assert (step["state"], step["verified"]) == (committed, True), sequence
    assert server.get_json(f"{api}/state")["state"] == run["final_state"] == states[-1]

    before: list[dict[str, Any]] = [{"data": {}, "items": []}, *states]
    absent = object()
    for key in run["final_state"]["data"]:
        changed = [
            sequence for sequence in range(1, len(before))
            if before[sequence]["data"].get(key, absent)
            != before[sequence - 1]["data"].get(key, absent)
        ]
        pointer = pointer_text(("data", key))
        found = server.get_json(f"{api}/provenance?path={urllib.parse.quote(pointer)}")
        assert found["last_writer"]["sequence"] == changed[-1], key
        writer = "TallyAwkwardKeys" if key.rsplit("/", 1)[0] in ("x/y", "~0", "1") else (
            "RewriteAwkwardKeys")
        assert found["last_writer"]["node"] == writer, key

    def listed(where: str) -> list[str]:
        query = urllib.parse.urlencode({"where": where})
        return [e["id"] for e in server.get_json(f"/api/executions?{query}")["executions"]]

    assert listed('data."~x"[0] = "changed"') == [run_id]
    assert listed('data[0][2] = 3') == [run_id]
    assert listed('data."" = "empty" and data."ü ñ" = "unicode"') == [run_id]
    assert listed('data."a/b" exists') == []
    assert listed('ever data."a/b" = 1') == [run_id]
    assert listed('data."~1" = null and data."10" = false') == [run_id]
    page = httpx.get(f"{server.url}/executions/{urllib.parse.quote(run_id)}")
    assert page.status_code == 200
    assert "<script>alert(1)</script>" not in page.text


# Seeds drawn once; any other seed is a new run of the same checks:
# RANDOM_SEEDS="1 2 3" pytest tests/test_live_junjo.py -k random
RANDOM_SEEDS = seeds("RANDOM_SEEDS", 20261202, 7)


def _canonical(value: Any) -> str:
    # JSON's own equality: `true` is not `1`, `1` is not `1.0`; absent is neither.
    return json.dumps(value, sort_keys=True)


def _at(state: Any, tokens: tuple[str, ...]) -> str:
    """Canonical text of the value at `tokens`, or "absent"."""
    for token in tokens:
        if isinstance(state, dict) and token in state:
            state = state[token]
        elif isinstance(state, list) and token.isdigit() and int(token) < len(state):
            state = state[int(token)]
        else:
            return "absent"
    return _canonical(state)


def _value(state: Any, tokens: tuple[str, ...]) -> Any:
    text = _at(state, tokens)
    return None if text == "absent" else json.loads(text)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _compares(found: Any, op: str, number: float) -> bool:
    """What `path > number` (or `<=`) means: only numbers compare with a number."""
    return _is_number(found) and (found > number if op == ">" else found <= number)


def _contains(found: Any, element: Any) -> bool:
    """What `path contains element` means: an equal element of an array, or a substring."""
    if isinstance(found, list):
        return _canonical(element) in map(_canonical, found)
    return isinstance(found, str) and isinstance(element, str) and element in found


def _pointers(state: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [prefix] if prefix else []
    if isinstance(state, dict):
        for key, child in state.items():
            found.extend(_pointers(child, (*prefix, key)))
    elif isinstance(state, list):
        for index, child in enumerate(state):
            found.extend(_pointers(child, (*prefix, str(index))))
    return found


def _state_if_any(server: Server, path: str) -> dict[str, Any] | None:
    """A state from the API; None where it says none can be rebuilt (its start state was cut)."""
    try:
        state: dict[str, Any] = server.get_json(path)
    except urllib.error.HTTPError as exc:
        if exc.code != 404 or "no state can be rebuilt" not in exc.read().decode():
            raise
        return None
    return state


def _recorded_executions(server: Server, runs: Runs) -> dict[str, dict[str, Any]]:
    """What each store committed, by the id of the execution that owns the store."""
    recorded: dict[str, dict[str, Any]] = {}
    for run in runs.values():
        recorded[run["run_id"]] = run
        below, named = [run["run_id"]], dict[str, str]()
        while below:
            children = server.get_json(f"/api/executions/{below.pop()}")["children"]
            named |= {child["workflow"]: child["id"] for child in children}
            below += [child["id"] for child in children]
        assert set(named) == set(run["subflows"]), run["scenario"]
        recorded |= {named[name]: sub for name, sub in run["subflows"].items()}
    return recorded


def _assert_history_as_committed(
    server: Server, execution_id: str, recorded: dict[str, Any], pick: random.Random
) -> None:
    """Every step's state, and the last writer of sampled fields, as the store committed them."""
    name, states, writers = recorded["name"], recorded["states"], recorded["writers"]
    api = f"/api/executions/{urllib.parse.quote(execution_id)}"
    detail = server.get_json(api)
    assert detail["verdict"] == "verified", (name, detail["diagnostics"])
    assert detail["received_transitions"] == detail["transition_count"] == len(states), name
    history = [recorded["start_state"], *states]
    for sequence, committed in enumerate(history):
        step = server.get_json(f"{api}/state?sequence={sequence}")
        assert (step["state"], step["verified"]) == (committed, True), (name, sequence)

    everywhere = sorted({tokens for state in history for tokens in _pointers(state)})
    for tokens in pick.sample(everywhere, min(12, len(everywhere))):
        changed = [
            sequence for sequence in range(1, len(history))
            if _at(history[sequence], tokens) != _at(history[sequence - 1], tokens)
        ]
        pointer = pointer_text(tokens)
        found = server.get_json(f"{api}/provenance?path={urllib.parse.quote(pointer)}")
        writer = found["last_writer"]
        expected = (changed[-1], writers[changed[-1] - 1]) if changed else None
        assert (writer and (writer["sequence"], writer["node"])) == expected, (name, pointer)


@pytest.mark.parametrize("seed", RANDOM_SEEDS, ids=seed_id)
def test_live_random_runs_rebuild_every_step_and_writer_as_the_application_saw_it(
    replayed: ReplayedRuns, seed: int
) -> None:
    # Random graphs (chains of nodes, RunConcurrent stages and subflows two deep,
    # some ending in a failed node) commit random edits (JSON Pointer's awkward
    # keys, I-JSON's largest integers, list inserts, removals and shuffles that
    # JSON Patch diffs into shifts and moves) over random start states. Every
    # step's state, the last writer of fields that exist or once existed, and
    # filters on final and past values are checked against what each store,
    # the workflow's and every subflow's, itself committed.
    runs, server = replayed("random", env={"RANDOM_RUNS_SEED": str(seed)})
    pick = random.Random(seed)
    recorded = _recorded_executions(server, runs)
    for execution_id, committed in recorded.items():
        _assert_history_as_committed(server, execution_id, committed, pick)
    for run in runs.values():
        detail = server.get_json(f"/api/executions/{urllib.parse.quote(run['run_id'])}")
        assert detail["status"] == ("error" if run["error"] else "ok"), run["scenario"]

    def listed(where: str) -> set[str]:
        query = urllib.parse.urlencode({"where": where, "limit": 100})
        return {e["id"] for e in server.get_json(f"/api/executions?{query}")["executions"]}

    finals = {execution_id: run["final_state"] for execution_id, run in recorded.items()}
    everything = {
        execution_id: [run["start_state"], *run["states"]]
        for execution_id, run in recorded.items()
    }
    leaves = sorted({
        (tokens, _at(state, tokens)) for state in finals.values() for tokens in _pointers(state)
        if not _at(state, tokens).startswith(("{", "["))
    })
    for tokens, value in pick.sample(leaves, min(20, len(leaves))):
        path = format_path(FieldPath(tokens))
        assert listed(f"{path} = {value}") == {
            run_id for run_id, final in finals.items() if _at(final, tokens) == value
        }, (path, value)
        assert listed(f"ever {path} = {value}") == {
            run_id for run_id, states in everything.items()
            if any(_at(state, tokens) == value for state in states)
        }, (path, value)
        assert listed(f"{path} exists") == {
            run_id for run_id, final in finals.items() if _at(final, tokens) != "absent"
        }, path
        assert listed(f"{path} != {value}") == {
            run_id for run_id, final in finals.items()
            if _at(final, tokens) not in ("absent", value)
        }, (path, value)
        if _is_number(json.loads(value)):
            for op in (">", "<="):
                assert listed(f"{path} {op} {value}") == {
                    run_id for run_id, final in finals.items()
                    if _compares(_value(final, tokens), op, json.loads(value))
                }, (path, op, value)
    # `contains`: an element of an array, or a substring of text.
    arrays = sorted({
        (tokens, _canonical(element)) for state in finals.values() for tokens in _pointers(state)
        if isinstance(found := _value(state, tokens), list)
        for element in found if not isinstance(element, dict | list)
    })
    for tokens, element in pick.sample(arrays, min(8, len(arrays))):
        path = format_path(FieldPath(tokens))
        assert listed(f"{path} contains {element}") == {
            run_id for run_id, final in finals.items()
            if _contains(_value(final, tokens), json.loads(element))
        }, (path, element)


@pytest.mark.parametrize("limits", [
    {"OTEL_SPAN_EVENT_COUNT_LIMIT": "1"},
    {"OTEL_SPAN_EVENT_COUNT_LIMIT": "2"},
    {"OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT": "120"},
], ids=["1-event", "2-events", "120-char-values"])
def test_live_random_runs_that_lost_evidence_never_vouch_for_a_wrong_state(
    replayed: ReplayedRuns, limits: dict[str, str]
) -> None:
    # SDK limits lose evidence: events past the count are dropped (histories
    # with holes anywhere), values past the length are cut (patches and states
    # that no longer parse). Whatever statetrail then shows, it may call
    # verified only what the store really committed, and no run that lost
    # evidence is verified as a whole.
    runs, server = replayed("random", env={"RANDOM_RUNS_SEED": str(RANDOM_SEEDS[0]), **limits})
    recorded = _recorded_executions(server, runs)
    lost = vouched = 0
    for execution_id, run in recorded.items():
        api = f"/api/executions/{urllib.parse.quote(execution_id)}"
        detail = server.get_json(api)
        history = [run["start_state"], *run["states"]]
        shown = [_state_if_any(server, f"{api}/state?sequence={n}") for n in range(len(history))]
        for sequence, (step, committed) in enumerate(zip(shown, history, strict=True)):
            if step is not None and step["verified"]:
                vouched += 1
                assert step["state"] == committed, (run["name"], sequence)
        wholly = detail["received_transitions"] == len(run["states"]) and all(
            step is not None and step["state"] == committed
            for step, committed in zip(shown, history, strict=True)
        )
        lost += not wholly
        if not wholly:
            assert detail["verdict"] != "verified", run["name"]
    assert lost and vouched, (lost, vouched)
