"""Numbered schema migrations, applied in order and recorded in `_migrations`.

A released migration is never edited: a change to the schema is a new function
at the end of the list. Each runs inside the transaction that records it, so a
crash leaves either the old schema or the new one.
"""

from __future__ import annotations

from collections.abc import Callable

import duckdb
import pyarrow as pa

from collector.encode.documents import packed_column
from collector.encode.rows import chunk_pieces_table
from collector.index.query_ast import shape_of
from collector.store.filters import key64
from collector.store.transactions import transaction

Migration = Callable[[duckdb.DuckDBPyConnection], None]
MIGRATIONS: list[Migration] = []


def migration(function: Migration) -> Migration:
    MIGRATIONS.append(function)
    return function


def apply_migrations(connection: duckdb.DuckDBPyConnection) -> list[str]:
    """Apply every migration not yet recorded; return the names applied now.

    Raises StoreError if one fails; the migrations before it stay applied.
    """
    connection.execute(
        "CREATE TABLE IF NOT EXISTS _migrations ("
        " name VARCHAR PRIMARY KEY, applied_at TIMESTAMP WITH TIME ZONE DEFAULT now())"
    )
    applied = {row[0] for row in connection.execute("SELECT name FROM _migrations").fetchall()}
    done = []
    for function in MIGRATIONS:
        name = function.__name__
        if name in applied:
            continue
        with transaction(connection, f"could not apply migration {name}"):
            function(connection)
            connection.execute("INSERT INTO _migrations (name) VALUES (?)", [name])
        done.append(name)
    return done


@migration
def m001_spans_executions_transitions(connection: duckdb.DuckDBPyConnection) -> None:
    connection.execute(
        """
        CREATE TABLE resources (
            resource_key VARCHAR PRIMARY KEY,
            service_name VARCHAR NOT NULL,
            scope_name VARCHAR NOT NULL,
            scope_version VARCHAR NOT NULL,
            attributes JSON NOT NULL
        )
        """
    )
    # Every span, Junjo or not. The queryable columns are decoded at ingest; the
    # rest (attributes, events, links) stays as the span's own protobuf bytes.
    connection.execute(
        """
        CREATE TABLE spans (
            trace_id VARCHAR NOT NULL,
            span_id VARCHAR NOT NULL,
            parent_span_id VARCHAR NOT NULL,
            name VARCHAR NOT NULL,
            kind TINYINT NOT NULL,
            start_unix_nano BIGINT NOT NULL,
            end_unix_nano BIGINT NOT NULL,
            status_code TINYINT NOT NULL,
            status_message VARCHAR NOT NULL,
            resource_key VARCHAR NOT NULL,
            service_name VARCHAR NOT NULL,
            scope_name VARCHAR NOT NULL,
            span_type VARCHAR,
            junjo_runtime_id VARCHAR,
            junjo_parent_runtime_id VARCHAR,
            dropped_attributes_count UINTEGER NOT NULL,
            dropped_events_count UINTEGER NOT NULL,
            dropped_links_count UINTEGER NOT NULL,
            event_count UINTEGER NOT NULL,
            received_unix_nano BIGINT NOT NULL,
            raw BLOB NOT NULL,
            PRIMARY KEY (trace_id, span_id)
        )
        """
    )
    connection.execute(
        """
        CREATE TABLE executions (
            run_id VARCHAR PRIMARY KEY,
            kind VARCHAR NOT NULL,
            name VARCHAR NOT NULL,
            service VARCHAR NOT NULL,
            trace_id VARCHAR NOT NULL,
            span_id VARCHAR NOT NULL,
            parent_span_id VARCHAR NOT NULL,
            parent_run_id VARCHAR,
            status VARCHAR NOT NULL,
            status_message VARCHAR NOT NULL,
            error_type VARCHAR,
            start_unix_nano BIGINT NOT NULL,
            end_unix_nano BIGINT NOT NULL,
            store_id VARCHAR,
            parent_store_id VARCHAR,
            state_start VARCHAR,
            state_start_mode VARCHAR,
            state_start_policy VARCHAR,
            state_end VARCHAR,
            state_end_mode VARCHAR,
            state_end_policy VARCHAR,
            revision_start BIGINT,
            revision_end BIGINT,
            transition_start BIGINT,
            transition_end BIGINT,
            transition_count BIGINT,
            reconstructable BOOLEAN,
            graph_snapshot VARCHAR,
            contract_version INTEGER,
            definition_id VARCHAR,
            structural_id VARCHAR,
            cancelled_reason VARCHAR,
            received_unix_nano BIGINT NOT NULL
        )
        """
    )
    # One row per set_state event wherever it sat; joined to its owner execution
    # by store id and sequence interval when read, so arrival order never matters.
    # No key index: (trace_id, span_id, event_index) is unique because a span's
    # events are inserted only with the span itself, which is keyed.
    connection.execute(
        """
        CREATE TABLE transitions (
            trace_id VARCHAR NOT NULL,
            span_id VARCHAR NOT NULL,
            event_index INTEGER NOT NULL,
            store_id VARCHAR NOT NULL,
            sequence BIGINT,
            store_name VARCHAR NOT NULL,
            action VARCHAR NOT NULL,
            revision_before BIGINT,
            revision_after BIGINT,
            patch VARCHAR NOT NULL,
            patch_mode VARCHAR NOT NULL,
            patch_policy VARCHAR NOT NULL,
            event_id VARCHAR NOT NULL,
            time_unix_nano BIGINT NOT NULL,
            contract_version INTEGER,
            span_name VARCHAR NOT NULL,
            received_unix_nano BIGINT NOT NULL
        )
        """
    )
    connection.execute("CREATE INDEX transitions_by_store ON transitions (store_id, sequence)")
    connection.execute("CREATE INDEX executions_by_store ON executions (store_id)")


@migration
def m002_api_keys(connection: duckdb.DuckDBPyConnection) -> None:
    # Managed ingestion keys (`statetrail keys`): only the SHA-256 digest is kept.
    connection.execute(
        """
        CREATE TABLE api_keys (
            key_digest VARCHAR PRIMARY KEY,
            name VARCHAR NOT NULL,
            created_unix_nano BIGINT NOT NULL,
            last_used_unix_nano BIGINT,
            revoked_unix_nano BIGINT
        )
        """
    )


@migration
def m003_replays(connection: duckdb.DuckDBPyConnection) -> None:
    # The outcome of replaying each execution (rewritten whenever late evidence
    # arrives): what lists and filters show without replaying at query time.
    connection.execute(
        """
        CREATE TABLE execution_replays (
            run_id VARCHAR PRIMARY KEY,
            verdict VARCHAR NOT NULL,
            diagnostics JSON NOT NULL,
            error_count INTEGER NOT NULL,
            warning_count INTEGER NOT NULL,
            received_transitions INTEGER NOT NULL,
            index_truncated BOOLEAN NOT NULL,
            replayed_unix_nano BIGINT NOT NULL
        )
        """
    )


@migration
def m004_field_index(connection: duckdb.DuckDBPyConnection) -> None:
    # The field-value index behind `where` filters (collector/store/filters.py
    # explains the hashed sort keys). Rows are rebuilt whenever an execution is
    # replayed again.
    connection.execute(
        """
        CREATE TABLE field_values (
            run_id VARCHAR NOT NULL,
            parent_key BIGINT NOT NULL,
            path_key BIGINT NOT NULL,
            kind VARCHAR NOT NULL CHECK (kind IN ('null', 'bool', 'number', 'string',
                                                  'object', 'array')),
            num DOUBLE,
            str_key BIGINT,
            str VARCHAR,
            bool_val BOOLEAN,
            is_final BOOLEAN NOT NULL,
            path VARCHAR NOT NULL,
            parent VARCHAR NOT NULL
        )
        """
    )


@migration
def m005_run_keys(connection: duckdb.DuckDBPyConnection) -> None:
    # A dense integer per execution, copied onto its field-index and replay rows:
    # filters and lists join on it instead of on the run id string, whose hashing
    # was most of a wide filter's time (bench/bench_filter_store.py). Keys grow with
    # arrival, so zone maps skip old row groups when a page joins on them.
    connection.execute("CREATE SEQUENCE run_keys START 1")
    connection.execute("ALTER TABLE executions ADD COLUMN run_key BIGINT")
    connection.execute("UPDATE executions SET run_key = nextval('run_keys')")
    connection.execute(
        "ALTER TABLE executions ALTER COLUMN run_key SET DEFAULT nextval('run_keys')"
    )
    for table in ("field_values", "execution_replays"):
        connection.execute(f"ALTER TABLE {table} ADD COLUMN run_key BIGINT")
        connection.execute(
            f"UPDATE {table} t SET run_key = e.run_key FROM executions e WHERE e.run_id = t.run_id"
        )


@migration
def m006_replay_snapshots(connection: duckdb.DuckDBPyConnection) -> None:
    # What the replayer found for a long history (collector/replay/snapshot.py), so the
    # first view after a restart need not apply 10,000 patches again. Rewritten
    # with the execution's replay row; no key index: only long runs have a row.
    connection.execute(
        """
        CREATE TABLE replay_snapshots (
            run_key BIGINT,
            run_id VARCHAR NOT NULL,
            transitions_seen BIGINT NOT NULL,
            latest_span_unix_nano BIGINT NOT NULL,
            verdict VARCHAR NOT NULL,
            start_sequence BIGINT NOT NULL,
            end_sequence BIGINT,
            diagnostics_json VARCHAR NOT NULL,
            steps_json VARCHAR NOT NULL,
            checkpoint_steps BIGINT[] NOT NULL,
            checkpoint_states VARCHAR[] NOT NULL
        )
        """
    )


@migration
def m007_field_ranges(connection: duckdb.DuckDBPyConnection) -> None:
    # The least and greatest number each numeric path held in each execution
    # (collector/store/filters.py), so an `ever` range reads one row per run
    # rather than every value a counter ever took. Filled from the field index
    # already stored; written and deleted with field_values from now on.
    connection.execute(
        """
        CREATE TABLE field_ranges (
            run_id VARCHAR NOT NULL,
            run_key BIGINT,
            parent_key BIGINT NOT NULL,
            path_key BIGINT NOT NULL,
            path VARCHAR NOT NULL,
            lo DOUBLE NOT NULL,
            hi DOUBLE NOT NULL
        )
        """
    )
    connection.execute(
        """
        INSERT INTO field_ranges (run_id, run_key, parent_key, path_key, path, lo, hi)
        SELECT run_id, any_value(run_key), parent_key, path_key, path, min(num), max(num)
        FROM field_values WHERE kind = 'number'
        GROUP BY run_id, parent_key, path_key, path
        ORDER BY parent_key, path_key, max(num)
        """
    )


@migration
def m008_spool_position(connection: duckdb.DuckDBPyConnection) -> None:
    # How far the extractor has stored the intake spool (collector/intake/spool.py).
    # Written in the same transaction as the rows it stored: exactly once.
    connection.execute(
        "CREATE TABLE spool_position (segment BIGINT NOT NULL, byte_offset BIGINT NOT NULL)"
    )
    connection.execute("INSERT INTO spool_position VALUES (1, 0)")


@migration
def m009_pack_documents(connection: duckdb.DuckDBPyConnection) -> None:
    # Executions' start and end states and graph snapshot become compressed
    # BLOBs (collector/encode/documents.py says why). DuckDB has no zlib, so the
    # text is packed here, a slice of run keys at a time to bound memory, into
    # new columns; m010 swaps them in. (DuckDB refuses to commit a transaction
    # that updates a table and then drops one of its columns.)
    for name in _PACKED_COLUMNS:
        connection.execute(f"ALTER TABLE executions ADD COLUMN {name}_packed BLOB")
    low, high = connection.execute(
        "SELECT coalesce(min(run_key), 0), coalesce(max(run_key), -1) FROM executions"
    ).fetchone() or (0, -1)
    for first in range(low, high + 1, _PACK_SLICE_RUNS):
        texts = connection.execute(
            f"SELECT run_key, {', '.join(_PACKED_COLUMNS)} FROM executions"
            " WHERE run_key BETWEEN ? AND ?",
            [first, first + _PACK_SLICE_RUNS - 1],
        ).fetchall()
        packed = pa.table(
            {"run_key": pa.array([row[0] for row in texts], pa.int64())}
            | {
                name: packed_column(row[1 + i] for row in texts)
                for i, name in enumerate(_PACKED_COLUMNS)
            }
        )
        connection.register("_packed", packed)
        try:
            assignments = ", ".join(f"{name}_packed = p.{name}" for name in _PACKED_COLUMNS)
            connection.execute(
                f"UPDATE executions e SET {assignments} FROM _packed p"
                " WHERE e.run_key = p.run_key"
            )
        finally:
            connection.unregister("_packed")


# Spelled out rather than taken from documents.COLUMNS: a released migration
# must keep meaning what it did when it ran.
_PACKED_COLUMNS = ("state_start", "state_end", "graph_snapshot")
# Executions packed per statement in m009 (several KB of text each).
_PACK_SLICE_RUNS = 10_000


@migration
def m010_swap_packed_documents(connection: duckdb.DuckDBPyConnection) -> None:
    # The packed columns of m009 take the text columns' names. An index on the
    # table blocks dropping any of its columns, so it is rebuilt around the swap.
    connection.execute("DROP INDEX executions_by_store")
    for name in _PACKED_COLUMNS:
        connection.execute(f"ALTER TABLE executions DROP COLUMN {name}")
        connection.execute(f"ALTER TABLE executions RENAME COLUMN {name}_packed TO {name}")
    connection.execute("CREATE INDEX executions_by_store ON executions (store_id)")


@migration
def m011_span_chunks(connection: duckdb.DuckDBPyConnection) -> None:
    # Spans' bytes move into compressed chunks, one per export
    # (collector/encode/span_bytes.py says why). Rows stored before keep their
    # bytes in `raw` (NOT NULL stays: new rows store an empty one), so nothing
    # is rewritten here. No key index on chunk_id: ids are handed out by the
    # one writer, grow with arrival (zone maps find a chunk), and an index
    # would cost every insert.
    connection.execute(
        """
        CREATE TABLE span_chunks (
            chunk_id BIGINT NOT NULL,
            codec VARCHAR NOT NULL,
            raw_size BIGINT NOT NULL,
            body BLOB NOT NULL
        )
        """
    )
    connection.execute("ALTER TABLE spans ADD COLUMN chunk_id BIGINT")
    connection.execute("ALTER TABLE spans ADD COLUMN chunk_offset BIGINT")
    connection.execute("ALTER TABLE spans ADD COLUMN chunk_length BIGINT")


@migration
def m012_correlation(connection: duckdb.DuckDBPyConnection) -> None:
    # The application's identity for a run (`junjo.correlation.type`/`.id`, from
    # `execute(correlation=...)`), to list the runs of one ticket or order.
    # Executions stored before keep NULL: their owner spans still hold it.
    connection.execute("ALTER TABLE executions ADD COLUMN correlation_type VARCHAR")
    connection.execute("ALTER TABLE executions ADD COLUMN correlation_id VARCHAR")


@migration
def m013_application_store(connection: duckdb.DuckDBPyConnection) -> None:
    # An agent's writes to the application store it was given: that store's id
    # and the agent's interval of its sequences (SCHEMA.md 2.4). NULL elsewhere,
    # and for agents stored before.
    connection.execute("ALTER TABLE executions ADD COLUMN application_store_id VARCHAR")
    connection.execute("ALTER TABLE executions ADD COLUMN application_transition_start BIGINT")
    connection.execute("ALTER TABLE executions ADD COLUMN application_transition_end BIGINT")


@migration
def m014_field_index_layout(connection: duckdb.DuckDBPyConnection) -> None:
    # How much of the field index is in sort order (collector/store/field_layout.py):
    # one row. Rows indexed before were appended in arrival order.
    connection.execute(
        "CREATE TABLE field_index_layout"
        " (sorted_rows BIGINT NOT NULL, appended_rows BIGINT NOT NULL)"
    )
    connection.execute(
        "INSERT INTO field_index_layout SELECT 0, count(*) FROM field_values"
    )


@migration
def m015_resource_bytes(connection: duckdb.DuckDBPyConnection) -> None:
    # The Resource's and the InstrumentationScope's own protobuf bytes and both
    # schema URLs, kept as spans keep theirs (collector/decode/otlp.py, ResourceRecord):
    # the JSON `attributes` lost types, repeated keys, scope attributes and the
    # dropped counts. Rows stored before keep NULL; their keys were digests of
    # the JSON, so a resource seen again now is a new row, never a mix of both.
    connection.execute("ALTER TABLE resources ADD COLUMN resource_raw BLOB")
    connection.execute("ALTER TABLE resources ADD COLUMN resource_schema_url VARCHAR")
    connection.execute("ALTER TABLE resources ADD COLUMN scope_raw BLOB")
    connection.execute("ALTER TABLE resources ADD COLUMN scope_schema_url VARCHAR")


@migration
def m016_slimmer_field_index(connection: duckdb.DuckDBPyConnection) -> None:
    # The field index names its execution by run key alone (m005 copied it on),
    # as every filter and list already joined, and keeps no parent pointer: a
    # path implies its parent (collector/store/filters.py, `_children_of`).
    # field_values is the widest table by far, and these were two of its
    # widest columns: ~55 of the ~190 bytes a row held in DuckDB's memory
    # until a checkpoint, and a like share of the bytes each row added to the
    # WAL (bench/README.md). Rows whose run was gone when m005 ran have no
    # key and no execution: no filter could reach them. Twins of a rewrite that
    # never finished (collector/store/field_layout.py) are remade from the
    # tables' new definitions by the next one. (DuckDB refuses to commit an
    # ALTER after a DELETE of the same table in one transaction, not the reverse.)
    for table in ("field_values", "field_ranges"):
        for leftover in (f"{table}_compacting", f"{table}_staged"):
            connection.execute(f"DROP TABLE IF EXISTS {leftover}")
        connection.execute(f"ALTER TABLE {table} DROP COLUMN run_id")
        if table == "field_values":
            connection.execute(f"ALTER TABLE {table} DROP COLUMN parent")
        connection.execute(f"DELETE FROM {table} WHERE run_key IS NULL")


@migration
def m017_spans_without_key_index(connection: duckdb.DuckDBPyConnection) -> None:
    # Neither index paid for its memory. DuckDB keeps an index as an ART that
    # it never evicts, and random ids (what exporters send) spread inserts
    # over all of it: ~70 bytes a stored span for the spans key
    # (bench/bench_key_index.py), as much again for transitions_by_store. A
    # write now finds its spans stored already by their start time's zone
    # maps (collector/store/writes.py, `stored_copies`), and DuckDB never
    # used a two-column index to read (it scans with a filter either way).
    # DuckDB cannot drop a primary key, so the table is copied without one
    # (columns, types and NOT NULLs as they are), in the order it was
    # written, which is what keeps its zone maps narrow.
    connection.execute("DROP INDEX IF EXISTS transitions_by_store")
    connection.execute("CREATE TABLE spans_unkeyed AS FROM spans WITH NO DATA")
    not_null = connection.execute(
        "SELECT column_name FROM duckdb_columns()"
        " WHERE table_name = 'spans' AND NOT is_nullable ORDER BY column_index"
    ).fetchall()
    for (column,) in not_null:
        connection.execute(f'ALTER TABLE spans_unkeyed ALTER COLUMN "{column}" SET NOT NULL')
    connection.execute("INSERT INTO spans_unkeyed FROM spans")
    connection.execute("DROP TABLE spans")
    connection.execute("ALTER TABLE spans_unkeyed RENAME TO spans")


@migration
def m018_span_chunk_pieces(connection: duckdb.DuckDBPyConnection) -> None:
    # A chunk's BLOB becomes rows of short pieces, stored uncompressed
    # (collector/encode/span_bytes.py says why: whole, a row group of them made
    # checkpoints hold their bytes outside DuckDB's memory limit, or fail). The
    # chunks stored before are cut here, a slice of them at a time.
    connection.execute(
        """
        CREATE TABLE span_chunk_pieces (
            chunk_id BIGINT NOT NULL,
            piece INTEGER NOT NULL,
            codec VARCHAR NOT NULL,
            raw_size BIGINT NOT NULL,
            body BLOB NOT NULL USING COMPRESSION uncompressed
        )
        """
    )
    sizes = connection.execute(
        "SELECT chunk_id, octet_length(body) FROM span_chunks ORDER BY chunk_id"
    ).fetchall()
    for first, last in _slices(sizes, _CUT_SLICE_BYTES):
        chunks = connection.execute(
            "SELECT chunk_id, codec, raw_size, body FROM span_chunks"
            " WHERE chunk_id BETWEEN ? AND ?",
            [first, last],
        ).fetchall()
        pieces = chunk_pieces_table(chunks)  # noqa: F841 (read by name below)
        connection.execute("INSERT INTO span_chunk_pieces FROM pieces ORDER BY chunk_id, piece")
    connection.execute("DROP TABLE span_chunks")


@migration
def m019_state_evidence_convention(connection: duckdb.DuckDBPyConnection) -> None:
    # Runs of the state-evidence convention (docs/convention.md,
    # collector/producers/convention.py) beside Junjo's, in the same tables: what
    # Junjo's rows lack is NULL for them. Rollbacks and rejections are transition
    # rows with a `note_kind` and no sequence. A run's start event leaves before
    # its owner span, so it waits in `run_starts` until the owner's row takes its
    # start state and graph from there (collector/store/writes.py).
    for column, kind in (
        ("framework", "VARCHAR"),
        ("framework_version", "VARCHAR"),
        ("convention_version", "INTEGER"),
        ("run_status", "VARCHAR"),
        ("error_action", "VARCHAR"),
        ("state_start_digest", "VARCHAR"),
        ("state_end_digest", "VARCHAR"),
    ):
        connection.execute(f"ALTER TABLE executions ADD COLUMN {column} {kind}")
    for column, kind in (
        ("run_id", "VARCHAR"),
        ("state_digest", "VARCHAR"),
        ("superstep", "BIGINT"),
        ("writes", "VARCHAR"),
        ("writes_mode", "VARCHAR"),
        ("reducers", "VARCHAR"),
        ("transaction_id", "VARCHAR"),
        ("transaction_begin_unix_nano", "BIGINT"),
        ("note_kind", "VARCHAR"),
        ("note_after_sequence", "BIGINT"),
        ("note_field", "VARCHAR"),
        ("note_message", "VARCHAR"),
    ):
        connection.execute(f"ALTER TABLE transitions ADD COLUMN {column} {kind}")
    connection.execute(
        """
        CREATE TABLE run_starts (
            run_id VARCHAR NOT NULL,
            trace_id VARCHAR NOT NULL,
            span_id VARCHAR NOT NULL,
            name VARCHAR NOT NULL,
            kind VARCHAR NOT NULL,
            parent_run_id VARCHAR,
            framework VARCHAR,
            framework_version VARCHAR,
            store_id VARCHAR NOT NULL,
            sequence_start BIGINT,
            revision_start BIGINT,
            state_start BLOB,
            state_start_mode VARCHAR,
            state_start_policy VARCHAR,
            state_start_digest VARCHAR,
            graph_snapshot BLOB,
            convention_version INTEGER NOT NULL,
            time_unix_nano BIGINT NOT NULL,
            received_unix_nano BIGINT NOT NULL
        )
        """
    )


@migration
def m020_field_index_shape_keys(connection: duckdb.DuckDBPyConnection) -> None:
    # Filters on `[*]` paths (collector/store/filters.py): each field-index row
    # gets the key of its parent's shape (its index tokens written `~*`), the
    # new first column of the index's sort key. Computed per distinct parent
    # (a few thousand at most, whatever the row count) and spread by a join on
    # the parent's key. Every run is then marked for a replay (its replay
    # older than any evidence), which rewrites its rows with the second rows
    # of last elements that `[-1]` reads; until then its `[*]` and every
    # existing filter answer from the rows it has. The layout is marked
    # unsorted so the idle server's next rewrite orders it by the new key.
    # (The column stays nullable: DuckDB refuses a NOT NULL after an UPDATE of
    # the table in one transaction; every write sets it.)
    connection.execute("ALTER TABLE field_values ADD COLUMN parent_shape_key BIGINT")
    parents = connection.execute(
        "SELECT DISTINCT parent_key, regexp_extract(path, '^(.*)/[^/]*$', 1) FROM field_values"
    ).fetchall()
    shapes = pa.table(
        {
            "parent_key": pa.array([key for key, _ in parents], pa.int64()),
            "shape_key": pa.array([key64(shape_of(parent)) for _, parent in parents], pa.int64()),
        }
    )
    connection.register("_parent_shapes", shapes)
    try:
        connection.execute(
            "UPDATE field_values SET parent_shape_key = s.shape_key FROM _parent_shapes s"
            " WHERE field_values.parent_key = s.parent_key"
        )
    finally:
        connection.unregister("_parent_shapes")
    connection.execute(
        "UPDATE field_index_layout SET appended_rows = appended_rows + sorted_rows,"
        " sorted_rows = 0"
    )
    connection.execute("UPDATE execution_replays SET replayed_unix_nano = 0")


# Chunk bytes read at once while m018 cuts them.
_CUT_SLICE_BYTES = 16 * 1024 * 1024


def _slices(sizes: list[tuple[int, int]], most: int) -> list[tuple[int, int]]:
    """(first id, last id) ranges of ascending (id, size) pairs, each of at most `most`
    bytes (or one id, if that alone is more)."""
    slices: list[tuple[int, int]] = []
    total = 0
    for chunk_id, size in sizes:
        if slices and total + size <= most:
            slices[-1] = (slices[-1][0], chunk_id)
            total += size
        else:
            slices.append((chunk_id, chunk_id))
            total = size
    return slices
