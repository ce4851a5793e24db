"""Numbered migrations upgrade a file written by an earlier statetrail in place."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pytest
from support.servers import fixture_requests

from collector.encode import span_bytes
from collector.encode.exports import batch_from_export
from collector.index.fields import ABSENT, JsonValue, index_rows
from collector.index.query import parse_query
from collector.store import Store, migrations
from collector.store.filters import compile_filter, key64
from collector.store.listing import ExecutionQuery
from collector.store.migrations import MIGRATIONS, apply_migrations
from studio.render.span import sent_under


def _file_before(path: Path, migration_name: str) -> None:
    """A database as the release before `migration_name` left it, with two runs indexed."""
    names = [function.__name__ for function in MIGRATIONS]
    connection = duckdb.connect(str(path))
    try:
        connection.execute(
            "CREATE TABLE _migrations (name VARCHAR PRIMARY KEY,"
            " applied_at TIMESTAMP WITH TIME ZONE DEFAULT now())"
        )
        for function in MIGRATIONS[: names.index(migration_name)]:
            function(connection)
            connection.execute("INSERT INTO _migrations (name) VALUES (?)", [function.__name__])
        for number, run_id in enumerate(("old-a", "old-b")):
            connection.execute(
                "INSERT INTO executions (run_id, kind, name, service, trace_id, span_id,"
                " parent_span_id, status, status_message, start_unix_nano, end_unix_nano,"
                " received_unix_nano) VALUES (?, 'workflow', 'W', 's', ?, ?, '', 'ok', '',"
                " ?, ?, 0)",
                [run_id, f"{number:032x}", f"{number:016x}", number, number + 1],
            )
        connection.execute(
            "INSERT INTO execution_replays (run_id, verdict, diagnostics, error_count,"
            " warning_count, received_transitions, index_truncated, replayed_unix_nano)"
            " VALUES ('old-b', 'verified', '[]', 0, 0, 0, FALSE, 0)"
        )
        earlier = names[: names.index(migration_name)]
        for run_id, attempts in (("old-a", 1), ("old-b", 5)):
            for row in index_rows(run_id, ABSENT, {"attempts": attempts}).rows:
                if "m016_slimmer_field_index" in earlier:
                    # Rows name their run by key alone, and keep no parent.
                    connection.execute(
                        "INSERT INTO field_values (run_key, parent_key, path_key, kind, num,"
                        " is_final, path) SELECT run_key, ?, ?, ?, ?, ?, ? FROM executions"
                        " WHERE run_id = ?",
                        [key64(row.parent), key64(row.path), row.kind, row.num, row.is_final,
                         row.path, run_id],
                    )
                    continue
                connection.execute(
                    "INSERT INTO field_values (run_id, parent_key, path_key, kind, num,"
                    " is_final, path, parent) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        run_id, key64(row.parent), key64(row.path), row.kind, row.num,
                        row.is_final, row.path, row.parent,
                    ],
                )
        if "m005_run_keys" in earlier and "m016_slimmer_field_index" not in earlier:
            # As that release's writer did: index rows carry their run's key.
            connection.execute(
                "UPDATE field_values f SET run_key = e.run_key FROM executions e"
                " WHERE e.run_id = f.run_id"
            )
    finally:
        connection.close()


def test_run_keys_migration_keys_existing_runs_and_their_index_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    _file_before(path, "m005_run_keys")

    Store(path).close()  # opening applies what is missing

    connection = duckdb.connect(str(path))
    try:
        assert apply_migrations(connection) == []  # recorded: nothing runs twice
        keys = dict(connection.execute("SELECT run_id, run_key FROM executions").fetchall())
        assert set(keys) == {"old-a", "old-b"} and len(set(keys.values())) == 2
        assert None not in keys.values()
        # The index names runs by key alone since m016.
        index_keys = connection.execute("SELECT DISTINCT run_key FROM field_values").fetchall()
        assert {key for (key,) in index_keys} == set(keys.values())
        replayed = connection.execute("SELECT run_id, run_key FROM execution_replays")
        assert replayed.fetchall() == [("old-b", keys["old-b"])]
        # A run added after the upgrade gets a key of its own.
        connection.execute(
            "INSERT INTO executions (run_id, kind, name, service, trace_id, span_id,"
            " parent_span_id, status, status_message, start_unix_nano, end_unix_nano,"
            " received_unix_nano) VALUES ('new', 'workflow', 'W', 's', 't', 's', '', 'ok', '',"
            " 9, 10, 0)"
        )
        new_key = connection.execute("SELECT run_key FROM executions WHERE run_id = 'new'")
        assert new_key.fetchall()[0][0] not in {None, *keys.values()}
        # Filters join on the key, so the old rows still answer.
        where, params = compile_filter(parse_query("attempts > 2"))
        found = connection.execute(f"SELECT e.run_id FROM executions e WHERE {where}", params)
        assert found.fetchall() == [("old-b",)]
    finally:
        connection.close()


def test_field_ranges_migration_fills_ranges_from_the_stored_index(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    _file_before(path, "m007_field_ranges")

    Store(path).close()

    connection = duckdb.connect(str(path))
    try:
        ranges = connection.execute(
            "SELECT e.run_id, r.path, r.lo, r.hi"
            " FROM field_ranges r JOIN executions e USING (run_key) ORDER BY e.run_id"
        ).fetchall()
        assert ranges == [("old-a", "/attempts", 1.0, 1.0),
                          ("old-b", "/attempts", 5.0, 5.0)]  # fmt: skip
        where, params = compile_filter(parse_query("ever attempts > 2"))
        found = connection.execute(f"SELECT e.run_id FROM executions e WHERE {where}", params)
        assert found.fetchall() == [("old-b",)]
    finally:
        connection.close()


def test_packed_documents_migration_keeps_every_document_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.duckdb"
    _file_before(path, "m009_pack_documents")
    documents = {
        # Non-ASCII text, a state larger than any one compression block, and NULLs.
        "old-a": ('{"note": "café ✓"}', '{"note": "done"}', None),
        "old-b": (None, '{"big": "' + "xyz" * 40_000 + '"}', '{"nodes": [], "edges": []}'),
    }
    connection = duckdb.connect(str(path))
    try:
        connection.execute("UPDATE executions SET store_id = 'S'")
        for run_id, (start, end, graph) in documents.items():
            connection.execute(
                "UPDATE executions SET state_start = ?, state_end = ?, graph_snapshot = ?"
                " WHERE run_id = ?",
                [start, end, graph, run_id],
            )
    finally:
        connection.close()
    # One execution per slice, so the migration's slicing is exercised.
    monkeypatch.setattr(migrations, "_PACK_SLICE_RUNS", 1)

    store = Store(path)
    try:
        for run_id, expected in documents.items():
            execution = store.get_execution(run_id)
            assert execution is not None
            assert (execution.state_start, execution.state_end, execution.graph_snapshot) == (
                expected
            )
        # The store-id index was rebuilt around the column swap.
        assert {e.run_id for e in store.executions_for_stores(["S"])} == set(documents)
    finally:
        store.close()
    connection = duckdb.connect(str(path))
    try:
        types = connection.execute(
            "SELECT column_name, data_type FROM information_schema.columns"
            " WHERE table_name = 'executions' AND column_name IN"
            " ('state_start', 'state_end', 'graph_snapshot')"
        ).fetchall()
        assert sorted(types) == [
            ("graph_snapshot", "BLOB"), ("state_end", "BLOB"), ("state_start", "BLOB")
        ]
        indexes = connection.execute("SELECT index_name FROM duckdb_indexes()").fetchall()
        assert ("executions_by_store",) in indexes
    finally:
        connection.close()


def test_span_chunks_migration_keeps_older_spans_readable_beside_new_ones(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.duckdb"
    _file_before(path, "m011_span_chunks")
    old_raw = b"\x0a\x10" + bytes(range(16))  # stored bytes, whatever they are
    connection = duckdb.connect(str(path))
    try:
        connection.execute(
            "INSERT INTO spans (trace_id, span_id, parent_span_id, name, kind,"
            " start_unix_nano, end_unix_nano, status_code, status_message, resource_key,"
            " service_name, scope_name, dropped_attributes_count, dropped_events_count,"
            " dropped_links_count, event_count, received_unix_nano, raw)"
            " VALUES (?, 'aa', '', 'old', 1, 1, 2, 0, '', 'r', 's', 'junjo', 0, 0, 0, 0, 0, ?)",
            [f"{0:032x}", old_raw],
        )
    finally:
        connection.close()

    store = Store(path)
    try:
        (batch,) = (batch_from_export(body) for body, _ in fixture_requests("a_linear")[:1])
        store.write([batch])
        assert [row.raw for row in store.spans_of_trace(f"{0:032x}")] == [old_raw]
        new_trace = batch.spans[0].trace_id
        expected = {s.span_id: s.raw for s in batch.spans if s.trace_id == new_trace}
        assert {r.span_id: r.raw for r in store.spans_of_trace(new_trace)} == expected
    finally:
        store.close()


def test_correlation_migration_keeps_older_runs_listed_without_one(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    _file_before(path, "m012_correlation")
    store = Store(path)
    try:
        (batch,) = (batch_from_export(body) for body, _ in fixture_requests("b_graph_loop")[:1])
        store.write([batch])
        found = {row.run_id: row for row in store.search(ExecutionQuery(limit=10))}
        assert found["old-a"].correlation_id is None
        (new,) = found.keys() - {"old-a", "old-b"}
        assert (found[new].correlation_type, found[new].correlation_id) == (
            "research.ticket", "TICKET-42",
        )
        ticket = store.search(ExecutionQuery(correlation="TICKET-42"))
        assert [row.run_id for row in ticket] == [new]
    finally:
        store.close()


def test_resource_bytes_migration_keeps_older_resources_beside_ones_kept_as_sent(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.duckdb"
    _file_before(path, "m015_resource_bytes")
    old_trace = f"{0:032x}"
    connection = duckdb.connect(str(path))
    try:
        connection.execute(
            "INSERT INTO resources VALUES ('old-key', 'old-service', 'junjo', '1.0',"
            " '{\"service.name\": \"old-service\", \"blob\": \"00ff\"}')"
        )
        connection.execute(
            "INSERT INTO spans (trace_id, span_id, parent_span_id, name, kind,"
            " start_unix_nano, end_unix_nano, status_code, status_message, resource_key,"
            " service_name, scope_name, dropped_attributes_count, dropped_events_count,"
            " dropped_links_count, event_count, received_unix_nano, raw)"
            " VALUES (?, 'aa', '', 'old', 1, 1, 2, 0, '', 'old-key', 'old-service', 'junjo',"
            " 0, 0, 0, 0, 0, '')",
            [old_trace],
        )
    finally:
        connection.close()

    store = Store(path)
    try:
        (body, _), *_ = fixture_requests("a_linear")
        batch = batch_from_export(body)
        store.write([batch])
        old = store.resource_of_span(old_trace, "aa")
        assert old is not None
        assert (old.service_name, old.scope_name, old.scope_version) == (
            "old-service", "junjo", "1.0",
        )
        assert (old.resource_raw, old.resource_schema_url, old.scope_raw) == (None, None, None)
        shown = sent_under(old)
        assert not shown.recorded and shown.resource.schema_url is None
        assert [(a.key, a.value_type, a.text) for a in shown.resource.attributes] == [
            ("blob", "", "00ff"), ("service.name", "", "old-service"),
        ]
        span = batch.spans[0]
        new = store.resource_of_span(span.trace_id, span.span_id)
        assert new is not None and new.resource_raw == span.resource.resource_raw
        assert sent_under(new).recorded
    finally:
        store.close()


def test_field_index_migration_drops_run_ids_and_parents(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    _file_before(path, "m016_slimmer_field_index")
    connection = duckdb.connect(str(path))
    try:
        # A row of a run gone before it was keyed (m005 left it without a key),
        # and the twin of a rewrite that never finished, in the old layout.
        connection.execute(
            "INSERT INTO field_values (run_id, parent_key, path_key, kind, num, is_final,"
            " path, parent) VALUES ('gone', 0, 0, 'number', 1, TRUE, '/attempts', '')"
        )
        connection.execute("CREATE TABLE field_values_compacting AS FROM field_values")
    finally:
        connection.close()

    Store(path).close()

    connection = duckdb.connect(str(path))
    try:
        for table in ("field_values", "field_ranges"):
            columns = connection.execute(
                "SELECT column_name FROM duckdb_columns() WHERE table_name = ?", [table]
            ).fetchall()
            assert ("run_key",) in columns and ("run_id",) not in columns
            assert ("parent",) not in columns
        assert connection.execute(
            "SELECT count(*) FROM field_values WHERE run_key IS NULL"
        ).fetchall() == [(0,)]
        assert connection.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'field_values_compacting'"
        ).fetchall() == [(0,)]
        for query, expected in (
            ("attempts > 2", [("old-b",)]),
            ("attempts < 2", [("old-a",)]),
            ("attempts exists", [("old-a",), ("old-b",)]),
        ):
            where, params = compile_filter(parse_query(query))
            found = connection.execute(
                f"SELECT e.run_id FROM executions e WHERE {where} ORDER BY e.run_id", params
            ).fetchall()
            assert found == expected
    finally:
        connection.close()


def test_spans_migration_drops_the_key_index_and_keeps_every_span(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    _file_before(path, "m017_spans_without_key_index")
    connection = duckdb.connect(str(path))
    try:
        for number in range(3):
            connection.execute(
                "INSERT INTO spans (trace_id, span_id, parent_span_id, name, kind,"
                " start_unix_nano, end_unix_nano, status_code, status_message, resource_key,"
                " service_name, scope_name, dropped_attributes_count, dropped_events_count,"
                " dropped_links_count, event_count, received_unix_nano, raw)"
                " VALUES (?, ?, '', ?, 1, ?, ?, 0, '', 'r', 's', 'scope', 0, 0, 0, 0, 0, ?)",
                [f"{number:032x}", f"{number:016x}", f"span {number}", number, number + 1,
                 bytes([number])],
            )
        before = connection.execute("SELECT * FROM spans").fetchall()
    finally:
        connection.close()

    store = Store(path)
    # The rows are those of before; a stored span delivered again is still found.
    (body, _), *_ = fixture_requests("a_linear")
    batch = batch_from_export(body)
    store.write([batch])
    store.write([batch])
    assert store.counts()["spans"] == len(before) + len(batch.spans)
    store.close()

    connection = duckdb.connect(str(path))
    try:
        assert connection.execute(
            "SELECT * FROM spans WHERE resource_key = 'r'"
        ).fetchall() == before
        assert connection.execute(
            "SELECT constraint_type FROM duckdb_constraints() WHERE table_name = 'spans'"
            " AND constraint_type IN ('PRIMARY KEY', 'UNIQUE')"
        ).fetchall() == []
        # The columns keep their NOT NULLs: a span without ids is still refused.
        with pytest.raises(duckdb.ConstraintException):
            connection.execute("UPDATE spans SET trace_id = NULL WHERE resource_key = 'r'")
        assert connection.execute(
            "SELECT index_name FROM duckdb_indexes() ORDER BY index_name"
        ).fetchall() == [("executions_by_store",)]
    finally:
        connection.close()


def test_chunk_pieces_migration_cuts_stored_chunks_and_keeps_their_spans_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.duckdb"
    _file_before(path, "m018_span_chunk_pieces")
    # Three chunks, one span each; incompressible bytes, so bodies of several pieces.
    raws = [os.urandom(size) for size in (10_000, 100, 9_000)]
    connection = duckdb.connect(str(path))
    try:
        for chunk_id, raw in enumerate(raws, start=1):
            body, size = span_bytes.pack([raw])
            connection.execute(
                "INSERT INTO span_chunks VALUES (?, ?, ?, ?)",
                [chunk_id, span_bytes.CODEC, size, body],
            )
            connection.execute(
                "INSERT INTO spans (trace_id, span_id, parent_span_id, name, kind,"
                " start_unix_nano, end_unix_nano, status_code, status_message, resource_key,"
                " service_name, scope_name, dropped_attributes_count, dropped_events_count,"
                " dropped_links_count, event_count, received_unix_nano, raw, chunk_id,"
                " chunk_offset, chunk_length) VALUES (?, 'aa', '', 'old', 1, 1, 2, 0, '', 'r',"
                " 's', 'scope', 0, 0, 0, 0, 0, '', ?, 0, ?)",
                [f"{chunk_id:032x}", chunk_id, len(raw)],
            )
    finally:
        connection.close()

    # Slices of ~one chunk, so that the migration reads them in several.
    monkeypatch.setattr(migrations, "_CUT_SLICE_BYTES", 9_500)
    store = Store(path)
    try:
        for chunk_id, raw in enumerate(raws, start=1):
            assert [row.raw for row in store.spans_of_trace(f"{chunk_id:032x}")] == [raw]
        # A new export's chunk takes the next id.
        (body, _), *_ = fixture_requests("a_linear")
        batch = batch_from_export(body)
        store.write([batch])
        trace_id = batch.spans[0].trace_id
        expected = {s.span_id: s.raw for s in batch.spans if s.trace_id == trace_id}
        assert {r.span_id: r.raw for r in store.spans_of_trace(trace_id)} == expected
    finally:
        store.close()

    connection = duckdb.connect(str(path), read_only=True)
    try:
        assert connection.execute(
            "SELECT chunk_id, count(*), max(octet_length(body)) <= ?"
            " FROM span_chunk_pieces GROUP BY ALL ORDER BY chunk_id",
            [span_bytes.PIECE_BYTES],
        ).fetchall() == [(1, 3, True), (2, 1, True), (3, 3, True), (4, 1, True)]
        assert connection.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'span_chunks'"
        ).fetchone() == (0,)
    finally:
        connection.close()


def test_shape_keys_migration_lets_old_rows_answer_any_element_filters(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    _file_before(path, "m020_field_index_shape_keys")
    connection = duckdb.connect(str(path))
    try:
        # old-a's items as that release indexed them: no second row of the last element.
        state: JsonValue = {"items": [{"sku": "laser"}, {"sku": "toner"}], "grid": [[1, 2], [3]]}
        for row in index_rows("old-a", ABSENT, state).rows:
            if "~-1" not in row.path:
                connection.execute(
                    "INSERT INTO field_values (run_key, parent_key, path_key, kind, num,"
                    " str_key, str, is_final, path) SELECT run_key, ?, ?, ?, ?, ?, ?, ?, ?"
                    " FROM executions WHERE run_id = 'old-a'",
                    [key64(row.parent), key64(row.path), row.kind, row.num,
                     None if row.text is None else key64(row.text), row.text, row.is_final,
                     row.path],
                )
        connection.execute("UPDATE execution_replays SET replayed_unix_nano = 5")
        connection.execute("UPDATE field_index_layout SET sorted_rows = 7, appended_rows = 3")
    finally:
        connection.close()

    Store(path).close()

    connection = duckdb.connect(str(path))
    try:
        assert connection.execute(
            "SELECT count(*) FROM field_values WHERE parent_shape_key IS NULL"
        ).fetchall() == [(0,)]
        for query, expected in (
            ('items[*].sku = "laser"', [("old-a",)]),
            ('items[*].sku != "laser"', [("old-a",)]),
            ("grid[*][*] = 3", [("old-a",)]),
            ("grid[1][0] = 3", [("old-a",)]),
            ("attempts > 2", [("old-b",)]),
        ):
            where, params = compile_filter(parse_query(query))
            found = connection.execute(
                f"SELECT e.run_id FROM executions e WHERE {where} ORDER BY e.run_id", params
            ).fetchall()
            assert found == expected, query
        # Every run is replayed again (its rows then gain what `[-1]` reads), and the
        # next rewrite sorts the index by the new key.
        assert connection.execute(
            "SELECT replayed_unix_nano FROM execution_replays"
        ).fetchall() == [(0,)]
        assert connection.execute("SELECT * FROM field_index_layout").fetchall() == [(0, 10)]
    finally:
        connection.close()
