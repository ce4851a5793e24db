"""SQL for replay: loading an execution's evidence and saving what replay found.

The evidence for one execution is its owner span's trace plus every span, in
any trace, that carried a transition of its store (SCHEMA.md section 7: events
sit on many span kinds and even other traces). What replay found (verdict,
diagnostics, field index) is saved per run id and rewritten whenever late
evidence arrives, in one transaction, so a reader never sees half of it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import duckdb
import pyarrow as pa

from collector.encode.documents import execution_from_row, unpack
from collector.index.fields import FieldIndex
from collector.model import EvidenceSpan, Execution, RunStart, Transition
from collector.replay.snapshot import Snapshot
from collector.store import field_layout
from collector.store.filters import delete_field_rows, insert_field_rows
from collector.store.run_keys import insert_with_run_keys, stored_runs
from collector.store.transactions import read_snapshot

EXECUTION_COLUMNS = tuple(field.name for field in fields(Execution))
EXECUTION_SELECT = ", ".join(f"e.{name}" for name in EXECUTION_COLUMNS)
# The dataclass says `patch_json` (text as received); the column is `patch`.
TRANSITION_SELECT = ", ".join(
    "patch AS patch_json" if name == "patch_json" else name for name in Transition._fields
)
SNAPSHOT_COLUMNS = tuple(field.name for field in fields(Snapshot))
# Rows per Arrow batch where a result is read through Arrow: at DuckDB's default, a
# million, it reserves buffers for a million rows whatever the result holds
# (docs/memory.md, "The extraction worker and threads").
ARROW_BATCH_ROWS = 10_000
# A run no store's replay finds: it names none (an empty id names none either,
# as WriteResult has it), so it is replayed by run id.
_STORELESS = "coalesce(e.store_id, '') = ''"


@dataclass(frozen=True, slots=True)
class SpanLink:
    """An evidence span with its parent, so the owner's subtree can be walked."""

    span: EvidenceSpan
    parent_span_id: str
    received_unix_nano: int
    # The run an owner span is (`junjo_runtime_id`), for collector/replay/lineage.py.
    runtime_id: str | None = None

    @property
    def trace_id(self) -> str:
        return self.span.trace_id

    @property
    def span_id(self) -> str:
        return self.span.span_id

    @property
    def span_type(self) -> str | None:
        return self.span.span_type


@dataclass(frozen=True, slots=True)
class ReplayRecord:
    """What one replay found, as stored for lists and filters."""

    run_id: str
    verdict: str
    diagnostics: Sequence[dict[str, Any]]
    error_count: int
    warning_count: int
    received_transitions: int
    index_truncated: bool
    replayed_unix_nano: int


def execution(cursor: duckdb.DuckDBPyConnection, run_id: str) -> Execution | None:
    row = cursor.execute(
        f"SELECT {EXECUTION_SELECT} FROM executions e WHERE e.run_id = ?", [run_id]
    ).fetchone()
    return execution_from_row(row) if row else None


def executions_for_stores(
    cursor: duckdb.DuckDBPyConnection, store_ids: Iterable[str]
) -> list[Execution]:
    return [execution for execution, _ in _keyed_executions_for_stores(cursor, store_ids)]


def _keyed_executions_for_stores(
    cursor: duckdb.DuckDBPyConnection, store_ids: Iterable[str]
) -> list[tuple[Execution, int]]:
    # A semi-join, not list_contains, which compares each row with every id of the list.
    rows = cursor.execute(
        f"SELECT {EXECUTION_SELECT}, e.run_key FROM executions e"
        " WHERE e.store_id IN (SELECT unnest(?::VARCHAR[]))",
        [sorted(store_ids)],
    ).fetchall()
    return [(execution_from_row(row[:-1]), int(row[-1])) for row in rows]


def _keyed_storeless_executions(
    cursor: duckdb.DuckDBPyConnection, run_ids: Iterable[str]
) -> list[tuple[Execution, int]]:
    """These runs, if they name no store (the ones no store's replay would find), with keys."""
    rows = cursor.execute(
        f"SELECT {EXECUTION_SELECT}, e.run_key FROM executions e"
        f" WHERE {_STORELESS} AND e.run_id IN (SELECT unnest(?::VARCHAR[]))",
        [sorted(run_ids)],
    ).fetchall()
    return [(execution_from_row(row[:-1]), int(row[-1])) for row in rows]


def transitions_for_stores(
    cursor: duckdb.DuckDBPyConnection, store_ids: Sequence[str]
) -> dict[str, list[Transition]]:
    """Every transition of these stores, grouped by store, in replay order."""
    table = cursor.execute(
        f"SELECT {TRANSITION_SELECT} FROM transitions"
        " WHERE store_id IN (SELECT unnest(?::VARCHAR[]))"
        " ORDER BY store_id, sequence NULLS LAST, time_unix_nano, trace_id, span_id, event_index",
        [list(store_ids)],
    ).to_arrow_table(batch_size=ARROW_BATCH_ROWS)
    grouped: dict[str, list[Transition]] = {store_id: [] for store_id in store_ids}
    # Column-wise through Arrow: half the cost of fetchall() on a long history.
    columns = [column.to_pylist() for column in table.columns]
    for transition in map(Transition, *columns):
        grouped[transition.store_id].append(transition)
    return grouped


@dataclass(frozen=True, slots=True)
class StoreRun:
    """One convention run of a store, for a run's place among its store's runs."""

    run_id: str
    name: str
    transition_start: int | None
    transition_end: int | None
    run_status: str | None
    start_unix_nano: int


def store_runs(cursor: duckdb.DuckDBPyConnection, store_id: str) -> list[StoreRun]:
    """The convention runs of one store, in the order they took its sequences."""
    rows = cursor.execute(
        "SELECT run_id, name, transition_start, transition_end, run_status, start_unix_nano"
        " FROM executions WHERE store_id = ? AND convention_version IS NOT NULL"
        " ORDER BY transition_start NULLS LAST, start_unix_nano, run_id",
        [store_id],
    ).fetchall()
    return [StoreRun(*row) for row in rows]


RUN_START_SELECT = ", ".join(RunStart._fields)


def run_start(cursor: duckdb.DuckDBPyConnection, run_id: str) -> RunStart | None:
    """A convention run's start event (the first stored), its documents unpacked."""
    row = cursor.execute(
        f"SELECT {RUN_START_SELECT} FROM run_starts WHERE run_id = ?"
        " ORDER BY received_unix_nano LIMIT 1",
        [run_id],
    ).fetchone()
    if row is None:
        return None
    values = list(row)
    for name in ("state_start", "graph_snapshot"):
        index = RunStart._fields.index(name)
        values[index] = unpack(values[index])
    return RunStart(*values)


def store_transitions_between(
    cursor: duckdb.DuckDBPyConnection, store_id: str, after: int, through: int
) -> list[Transition]:
    """The transitions of one store with `after < sequence <= through`, in replay order.

    What the studio reads to find who wrote a store between two runs that
    borrowed it (studio/render/start_writer.py), without reading the whole store.
    """
    table = cursor.execute(
        f"SELECT {TRANSITION_SELECT} FROM transitions"
        " WHERE store_id = ? AND sequence > ? AND sequence <= ?"
        " ORDER BY sequence, time_unix_nano, trace_id, span_id, event_index",
        [store_id, after, through],
    ).to_arrow_table(batch_size=ARROW_BATCH_ROWS)
    return list(map(Transition, *(column.to_pylist() for column in table.columns)))


def evidence_spans_for(
    cursor: duckdb.DuckDBPyConnection,
    trace_ids: Sequence[str],
    carriers: Iterable[tuple[str, str]],
) -> list[SpanLink]:
    """The spans of these traces, plus these carrier spans (trace id, span id) elsewhere.

    One query for a whole batch of executions: the replayer pays one scan of
    the spans table per batch, not per execution. The caller names the carriers
    from the transitions it already read, so the transitions table is not
    scanned again to find them.
    """
    traces = set(trace_ids)
    elsewhere = sorted({carrier for carrier in carriers if carrier[0] not in traces})
    select = (
        "SELECT s.trace_id, s.span_id, s.name, s.span_type, s.dropped_attributes_count,"
        " s.dropped_events_count, s.dropped_links_count, s.parent_span_id,"
        " s.received_unix_nano, s.junjo_runtime_id, s.scope_name FROM spans s"
    )
    sql = f"{select} WHERE s.trace_id IN (SELECT unnest(?::VARCHAR[]))"
    params: list[object] = [sorted(traces)]
    if elsewhere:
        # Most carriers sit in their execution's own trace; the rest are few.
        sql += (
            f" UNION {select} JOIN (SELECT unnest(?::VARCHAR[]) AS trace_id,"
            " unnest(?::VARCHAR[]) AS span_id) c"
            " ON c.trace_id = s.trace_id AND c.span_id = s.span_id"
        )
        params += [[t for t, _ in elsewhere], [s for _, s in elsewhere]]
    rows = cursor.execute(sql, params).fetchall()
    return [
        SpanLink(EvidenceSpan._make((*row[:7], row[10])), row[7], row[8], row[9])
        for row in rows
    ]


@dataclass(frozen=True, slots=True)
class ReplayBatch:
    """Everything a batch of executions is replayed from, read in one snapshot.

    `run_keys` maps each execution's run id to its `executions.run_key`, so that
    saving the batch needs no join with the executions table. `versions` holds
    the parts of `Store.evidence_version` (transitions per store, latest span
    arrival per trace) counted from this very evidence: read in the same
    snapshot, they claim exactly what was replayed, without another read.
    """

    executions: list[Execution]
    run_keys: dict[str, int]
    transitions: dict[str, list[Transition]]
    links: list[SpanLink]

    @property
    def versions(self) -> tuple[dict[str, int], dict[str, int]]:
        """(transitions per store, latest span arrival per trace); a part with none is absent."""
        per_store = {store_id: len(received) for store_id, received in self.transitions.items()
                     if received}  # fmt: skip
        per_trace: dict[str, int] = {}
        for link in self.links:
            latest = per_trace.get(link.trace_id, 0)
            if link.received_unix_nano > latest:
                per_trace[link.trace_id] = link.received_unix_nano
        return per_store, per_trace


def replay_batch(
    cursor: duckdb.DuckDBPyConnection, store_ids: Sequence[str], storeless_runs: Sequence[str]
) -> ReplayBatch:
    """The executions owning these stores, plus these storeless runs, with their evidence.

    One snapshot (no commit between the reads can make them disagree) and four
    statements at most for the whole batch; the carriers are named from the
    transitions just read, so the transitions table is scanned once.
    """
    with read_snapshot(cursor):
        keyed = _keyed_executions_for_stores(cursor, store_ids) if store_ids else []
        if storeless_runs:
            keyed += _keyed_storeless_executions(cursor, storeless_runs)
        executions = [execution for execution, _ in keyed]
        owned = sorted({e.store_id for e in executions if e.store_id})
        transitions = transitions_for_stores(cursor, owned) if owned else {}
        carriers = {(t.trace_id, t.span_id) for received in transitions.values() for t in received}
        traces = sorted({e.trace_id for e in executions})
        links = evidence_spans_for(cursor, traces, carriers) if executions else []
    return ReplayBatch(executions, {e.run_id: key for e, key in keyed}, transitions, links)


def evidence_version(
    cursor: duckdb.DuckDBPyConnection, store_id: str | None, trace_id: str
) -> tuple[int, int]:
    """Transitions of a store and latest span arrival in a trace: changes with new evidence.

    Plain equality predicates (not list_contains) let DuckDB prune by zone
    maps: the check runs before every cached page view.
    """
    row = cursor.execute(
        "SELECT (SELECT count(*) FROM transitions WHERE store_id = ?),"
        " (SELECT coalesce(max(received_unix_nano), 0) FROM spans WHERE trace_id = ?)",
        [store_id, trace_id],
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def stale_store_ids(cursor: duckdb.DuckDBPyConnection) -> list[str]:
    """Stores with an execution never replayed, or replayed before evidence arrived.

    What a crash between a commit and its replay leaves behind; replayed at start-up.
    Runs that name no store are `stale_storeless_run_ids`'.
    """
    rows = cursor.execute(
        f"""
        SELECT DISTINCT e.store_id
        FROM executions e
        LEFT JOIN execution_replays r ON r.run_key = e.run_key
        LEFT JOIN (SELECT store_id, max(received_unix_nano) AS latest
                   FROM transitions GROUP BY store_id) t ON t.store_id = e.store_id
        WHERE NOT {_STORELESS}
          AND (r.run_id IS NULL OR r.replayed_unix_nano < e.received_unix_nano
               OR r.replayed_unix_nano < coalesce(t.latest, 0))
        """
    ).fetchall()
    return [store_id for (store_id,) in rows]


def stale_storeless_run_ids(cursor: duckdb.DuckDBPyConnection) -> list[str]:
    """Runs naming no store that were never replayed since their owner span arrived.

    Their evidence is their own trace's spans only, and the owner span ends
    last, so its arrival is what a replay must follow.
    """
    rows = cursor.execute(
        f"""
        SELECT e.run_id
        FROM executions e
        LEFT JOIN execution_replays r ON r.run_key = e.run_key
        WHERE {_STORELESS}
          AND (r.run_id IS NULL OR r.replayed_unix_nano < e.received_unix_nano)
        """
    ).fetchall()
    return [run_id for (run_id,) in rows]


def snapshot(cursor: duckdb.DuckDBPyConnection, run_id: str) -> Snapshot | None:
    row = cursor.execute(
        f"SELECT {', '.join(SNAPSHOT_COLUMNS)} FROM replay_snapshots WHERE run_id = ?", [run_id]
    ).fetchone()
    return Snapshot(*row) if row else None


def save(
    cursor: duckdb.DuckDBPyConnection,
    records: Sequence[ReplayRecord],
    indexes: Sequence[FieldIndex],
    snapshots: Sequence[Snapshot] = (),
    run_keys: Mapping[str, int] | None = None,
) -> set[int]:
    """Replace the stored replay of each record's run id (the caller owns the transaction).

    Returns the keys of the runs whose field-index rows it may have changed.

    `run_keys` are the runs' keys as read with their evidence (`ReplayBatch`):
    then the runs are found by key, which zone maps make cheap however many
    runs are stored (`run_keys.stored_runs`). Runs no longer stored are skipped.
    Most replays are first replays (the owner span just arrived), which have no
    old rows; only re-replays pay for deleting, which scans the field index.
    """
    runs = stored_runs(
        cursor, {record.run_id for record in records} | {index.run_id for index in indexes},
        run_keys,
    )
    replayed_before = sorted(
        run_id for run_id in (r.run_id for r in records) if run_id in runs and runs[run_id].replayed
    )
    if replayed_before:
        cursor.execute(
            "DELETE FROM execution_replays WHERE run_id IN (SELECT unnest(?::VARCHAR[]))",
            [replayed_before],
        )
        delete_field_rows(cursor, [runs[run_id].run_key for run_id in replayed_before])
        cursor.execute(
            "DELETE FROM replay_snapshots WHERE run_id IN (SELECT unnest(?::VARCHAR[]))",
            [replayed_before],
        )
    insert_with_run_keys(cursor, "execution_replays", _records_table(records), runs)
    field_layout.note_appended(cursor, insert_field_rows(cursor, indexes, runs))
    if snapshots:
        insert_with_run_keys(cursor, "replay_snapshots", _snapshots_table(snapshots), runs)
    return {run.run_key for run in runs.values()}


def _records_table(records: Sequence[ReplayRecord]) -> pa.Table:
    return pa.table(
        {
            "run_id": [r.run_id for r in records],
            "verdict": [r.verdict for r in records],
            "diagnostics": [json.dumps(list(r.diagnostics)) for r in records],
            "error_count": pa.array([r.error_count for r in records], pa.int32()),
            "warning_count": pa.array([r.warning_count for r in records], pa.int32()),
            "received_transitions": pa.array(
                [r.received_transitions for r in records], pa.int32()
            ),
            "index_truncated": pa.array([r.index_truncated for r in records], pa.bool_()),
            "replayed_unix_nano": pa.array([r.replayed_unix_nano for r in records], pa.int64()),
        }
    )


def _snapshots_table(snapshots: Sequence[Snapshot]) -> pa.Table:
    columns = {name: [getattr(s, name) for s in snapshots] for name in SNAPSHOT_COLUMNS}
    types = {
        "transitions_seen": pa.int64(),
        "latest_span_unix_nano": pa.int64(),
        "start_sequence": pa.int64(),
        "end_sequence": pa.int64(),
        "checkpoint_steps": pa.list_(pa.int64()),
        "checkpoint_states": pa.list_(pa.large_string()),
        "steps_json": pa.large_string(),
    }
    return pa.table(
        {name: pa.array(values, types.get(name)) for name, values in columns.items()}
    )
