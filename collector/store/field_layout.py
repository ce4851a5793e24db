"""Keeping the field index in sort order, so that zone maps prune filters.

Stage: storage. Replay appends each batch's rows sorted (collector/store/filters.py),
but a row group holds a few dozen batches, so appended row groups each span
every path, and a filter reads all of them. Measured with bench_filter_store
at 200,000 executions (6.5M index rows): a `final` equality filter took 38 ms
on rows in arrival order, 12 ms once they were rewritten in sort order.

So the replayer, once it has nothing else to do, asks whether enough rows were
appended since the last rewrite, and if so rewrites both tables in order.
"Enough" grows with the index (`CompactionPolicy`): rewriting costs time
proportional to the whole index, so the rows rewritten stay a constant
multiple of the rows ever appended, while what is out of order stays a bounded
share of it.

The rewrite is a sorted copy built beside the live tables, a piece at a time,
then swapped in (`begin`, `copy_piece`, `refresh_runs`, `swap`; rewrite.py
runs them, under the store's locks: Store.compact_field_index_if_due). At 1M runs
copying the index took 70-90 s in one transaction, during which no export
could be stored. The SQL uses nothing docs/ducklake.md found DuckLake to lack
(no RETURNING, constraints or indexes; not run on DuckLake), but there the
rewrite would rather be `SET SORTED BY` and `ducklake_merge_adjacent_files`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import duckdb

from collector.store.filters import RANGES, RANGES_SORT_KEY, SORT_KEY, TABLE, without_execution

LAYOUT_TABLE: Final = "field_index_layout"
# Rows sorted at once (a piece). One sort of a whole 32.5M-row index ran out of
# serve's 128 MB (bench_filter_store at 1M runs). At 128 MB a piece of 500,000
# rows peaked at 119 MB in the sort alone (duckdb_memory()), and one of 1.1M
# rows (a single path's, on an index sorted before) ran out; at 100,000 rows
# the sort took 34-38 MB. serve sorts at a burst's lower limit (then 80 MB,
# now 64: collector/jobs/replayer.py), where pieces of 200,000 rows ran out of
# memory 376 times in one bench_ingest run, and pieces of 100,000 3-442 times
# in four (each then copied again at 128 MB; December 2026): the burst had
# left ~50 MB of the pool pinned. Let go of since (Store.release_memory), none
# ran out in five runs at 80 MB, nor in three at 64. At 128 MB, halving the
# pieces did not lower serve's peak (415 MB): the cache fills the limit either
# way. Pieces are copied under the write lock (no write beside them competes
# for that memory), so their size is also how long storing can wait for one
# that may not be preempted.
CHUNK_ROWS: Final = 100_000


@dataclass(frozen=True, slots=True)
class IndexLayout:
    """How the field index's rows are ordered: `sorted_rows` by the last rewrite, then
    `appended_rows` in arrival order (rows deleted since are still counted)."""

    sorted_rows: int
    appended_rows: int


@dataclass(frozen=True, slots=True)
class CompactionPolicy:
    """When appended rows are worth a rewrite of the whole index."""

    # Fewer appended rows than this are a few row groups: reading them costs
    # less than rewriting the index would be worth...
    min_appended_rows: int = 1_000_000
    # ... and past that, rewrite once they are this share of the sorted rows.
    appended_share: float = 0.1

    def due(self, layout: IndexLayout) -> bool:
        threshold = max(self.min_appended_rows, self.appended_share * layout.sorted_rows)
        return layout.appended_rows >= max(threshold, 1)


DEFAULT_COMPACTION: Final = CompactionPolicy()


def note_appended(cursor: duckdb.DuckDBPyConnection, rows: int) -> None:
    """Count rows just appended to the field index (in the caller's transaction)."""
    if rows:
        cursor.execute(
            f"UPDATE {LAYOUT_TABLE} SET appended_rows = appended_rows + ?", [rows]
        )


def layout(cursor: duckdb.DuckDBPyConnection) -> IndexLayout:
    row = cursor.execute(f"SELECT sorted_rows, appended_rows FROM {LAYOUT_TABLE}").fetchone()
    assert row is not None, "migration m014 writes the one layout row"
    return IndexLayout(int(row[0]), int(row[1]))


# The rewrite is built beside the live tables and swapped in: each live table
# gets a twin, filled a piece at a time in transactions of its own. A piece is
# a range of the table's order (`ORDER_KEYS`), bounded so that its sort fits in
# a fraction of DuckDB's memory limit whatever the index's size. Replays and
# prunes that change a run's rows meanwhile are noted (rewrite.Rewrite.touched);
# before the swap those runs' rows in the twin are replaced by their live ones,
# so every run has exactly its live rows in the twin, whichever snapshot each
# piece read.
TWIN_SUFFIX: Final = "_compacting"
# Each table's sort key, then the run key, which orders rows the sort key ties
# (a boolean path's rows all tie), so that a piece can end inside them. Each
# column as compared, never NULL (a piece's bounds are compared with `=`/`>`):
# within one path and kind, num (or str_key) is either set on every row or on
# none, so coalescing it keeps the sort key's order.
ORDER_KEYS: Final = {
    TABLE: ("parent_shape_key", "parent_key", "path_key", "kind", "coalesce(num, 0)",
            "coalesce(str_key, 0)", "coalesce(run_key, 0)"),
    RANGES: ("parent_key", "path_key", "coalesce(hi, 0)", "coalesce(run_key, 0)"),
}
SORT_KEYS: Final = {TABLE: f"{SORT_KEY}, run_key", RANGES: f"{RANGES_SORT_KEY}, run_key"}
# Sampled rows per piece when planning: piece sizes come out within ~20% of CHUNK_ROWS.
SAMPLES_PER_PIECE: Final = 100

# An index mostly in arrival order (the first rewrite of a big one) holds
# every path in every row group, so a piece of paths would read the whole
# table. Then the rewrite first copies it a range of run keys at a time (run
# keys follow arrival: zone maps find each range) into a staging table, each
# range sorted, and then merges those sorted stretches, a piece of the order at
# a time, into the twin.
STAGED_SUFFIX: Final = "_staged"
RUN_ORDER: Final = ("coalesce(run_key, 0)",)
_COLUMNS: Final = {RUN_ORDER[0]: "run_key"}  # the column a coalesced key compares

OrderKey = tuple[object, ...]  # values of a Piece's keys


@dataclass(frozen=True, slots=True)
class Piece:
    """The rows of `source` whose `keys` lie in (after, upto] (None: unbounded),
    to be appended to `target` in `table`'s sort order."""

    table: str
    source: str
    target: str
    keys: tuple[str, ...]
    after: OrderKey | None
    upto: OrderKey | None


def twin(table: str) -> str:
    return table + TWIN_SUFFIX


def staged(table: str) -> str:
    return table + STAGED_SUFFIX


def begin(cursor: duckdb.DuckDBPyConnection) -> list[Piece]:
    """Create empty twins of both tables and plan the pieces that fill them, in order.

    Each twin is made from its table's own definition (as DuckDB reports it,
    so the schema the migrations built is kept exactly). Twins left by a
    rewrite that never finished are dropped first. An index mostly in arrival
    order is copied to staging tables first (STAGED_SUFFIX): `plan_merge`
    plans the rest once that is done.
    """
    arrival = _mostly_in_arrival_order(cursor)
    pieces: list[Piece] = []
    for table in (TABLE, RANGES):
        definition = _definition(cursor, table)
        assert definition is not None, f"no table {table}"
        prefix = f"CREATE TABLE {table}("
        assert definition.startswith(prefix), definition
        columns = definition[len(prefix):]
        target = staged(table) if arrival else twin(table)
        for made in (twin(table), staged(table)):
            cursor.execute(f"DROP TABLE IF EXISTS {made}")
        for made in {twin(table), target}:
            cursor.execute(f"CREATE TABLE {made}(" + columns)
        keys = RUN_ORDER if arrival else ORDER_KEYS[table]
        pieces += _pieces(cursor, table, table, target, keys)
    return pieces


def plan_merge(cursor: duckdb.DuckDBPyConnection) -> list[Piece]:
    """The pieces that merge the staging tables into the twins; none if `begin` staged none."""
    pieces: list[Piece] = []
    for table in (TABLE, RANGES):
        if _definition(cursor, staged(table)) is not None:
            pieces += _pieces(cursor, table, staged(table), twin(table), ORDER_KEYS[table])
    return pieces


def _definition(cursor: duckdb.DuckDBPyConnection, table: str) -> str | None:
    """The table's CREATE statement as DuckDB reports it; None if there is no such table."""
    found = cursor.execute(
        "SELECT sql FROM duckdb_tables()"
        " WHERE database_name = current_database() AND schema_name = 'main'"
        " AND table_name = ?",
        [table],
    ).fetchone()
    return None if found is None else str(found[0])


def _mostly_in_arrival_order(cursor: duckdb.DuckDBPyConnection) -> bool:
    now = layout(cursor)
    return now.appended_rows > now.sorted_rows


def _pieces(
    cursor: duckdb.DuckDBPyConnection, table: str, source: str, target: str,
    keys: tuple[str, ...],
) -> list[Piece]:  # fmt: skip
    bounds = _boundaries(cursor, source, keys)
    return [
        Piece(table, source, target, keys, after, upto)
        for after, upto in zip([None, *bounds], [*bounds, None], strict=True)
    ]


def copy_piece(cursor: duckdb.DuckDBPyConnection, piece: Piece) -> None:
    """Append a piece's rows, in its table's sort order, to its target.

    Pieces of one order copied in order leave their target sorted.
    """
    keys, after, upto = piece.keys, piece.after, piece.upto
    conditions = ["TRUE"]
    params: list[object] = []
    # Plain comparisons of the first key's column (and of the second, within
    # one value of the first) let zone maps skip row groups; `_beyond` is exact.
    # A coalesced first key's NULLs compare as 0, in the first piece: that one
    # gets no plain comparison.
    column = _COLUMNS.get(keys[0], keys[0])
    if after is not None:
        conditions.append(f"{column} >= ?")
        params.append(after[0])
    if upto is not None and (after is not None or column == keys[0]):
        conditions.append(f"{column} <= ?")
        params.append(upto[0])
    if len(keys) > 1 and after is not None and upto is not None and after[0] == upto[0]:
        conditions.append(f"{keys[1]} >= ? AND {keys[1]} <= ?")
        params += [after[1], upto[1]]
    if piece.after is not None:
        conditions.append(_beyond(keys, piece.after, params))
    if piece.upto is not None:
        conditions.append(f"NOT {_beyond(keys, piece.upto, params)}")
    cursor.execute(
        f"INSERT INTO {piece.target} BY NAME SELECT * FROM {piece.source}"
        f" WHERE {' AND '.join(conditions)} ORDER BY {SORT_KEYS[piece.table]}",
        params,
    )


def _beyond(keys: tuple[str, ...], bound: OrderKey, params: list[object]) -> str:
    """SQL true where the row's keys come after `bound`, compared in order (appends params)."""
    alternatives = []
    for i, key in enumerate(keys):
        equal = [f"{earlier} = ?" for earlier in keys[:i]]
        alternatives.append("(" + " AND ".join([*equal, f"{key} > ?"]) + ")")
        params.extend([*bound[:i], bound[i]])
    return "(" + " OR ".join(alternatives) + ")"


def _boundaries(
    cursor: duckdb.DuckDBPyConnection, table: str, order: tuple[str, ...]
) -> list[OrderKey]:
    """Ascending values of `order` that cut the table into pieces of about CHUNK_ROWS rows.

    Taken from a sample, which costs one scan of the key columns and a sort of
    the sample alone.
    """
    counted = cursor.execute(f"SELECT count(*) FROM {table}").fetchone()
    pieces = -(-int(counted[0]) // CHUNK_ROWS) if counted else 0
    if pieces <= 1:
        return []
    keys = ", ".join(order)
    sampled = cursor.execute(
        f"SELECT * FROM (SELECT {keys} FROM {table}"
        f" USING SAMPLE {int(pieces * SAMPLES_PER_PIECE)} ROWS (reservoir, 42))"
        " ORDER BY ALL"
    ).fetchall()
    bounds: list[OrderKey] = []
    for row in sampled[SAMPLES_PER_PIECE::SAMPLES_PER_PIECE]:
        if not bounds or tuple(row) != bounds[-1]:
            bounds.append(tuple(row))
    return bounds


def refresh_runs(cursor: duckdb.DuckDBPyConnection, run_keys: set[int], sweep: bool) -> int:
    """Give the runs with these keys their live rows in the twins; return the
    field_values rows copied.

    With `sweep`, also drop the twins' rows of runs no longer stored, as the
    orphan sweep did to the live tables (collector/store/retention.py).
    Each statement scans its table, so none runs without a reason to.
    """
    copied = 0
    listed = sorted(run_keys)
    for table in (TABLE, RANGES):
        if listed:
            cursor.execute(
                f"DELETE FROM {twin(table)} WHERE run_key IN (SELECT unnest(?::BIGINT[]))",
                [listed],
            )
            cursor.execute(
                f"INSERT INTO {twin(table)} BY NAME SELECT * FROM {table}"
                f" WHERE run_key BETWEEN ? AND ? AND run_key IN (SELECT unnest(?::BIGINT[]))"
                f" ORDER BY {SORT_KEYS[table]}",
                [listed[0], listed[-1], listed],
            )
            # DuckDB answers an INSERT with one row holding the number of rows inserted.
            inserted = cursor.fetchone()
            if table == TABLE and inserted:
                copied = int(inserted[0])
        if sweep:
            cursor.execute(
                f"DELETE FROM {twin(table)} WHERE {without_execution(twin(table))}"
            )
    return copied


def swap(cursor: duckdb.DuckDBPyConnection, refreshed_rows: int) -> int:
    """Put the twins in their tables' places; return the field_values rows now stored.

    `refreshed_rows` of them were copied by `refresh_runs`, after the sorted
    pieces: the layout counts them as appended.
    """
    for table in (TABLE, RANGES):
        cursor.execute(f"DROP TABLE IF EXISTS {staged(table)}")
        cursor.execute(f"DROP TABLE {table}")
        cursor.execute(f"ALTER TABLE {twin(table)} RENAME TO {table}")
    counted = cursor.execute(f"SELECT count(*) FROM {TABLE}").fetchone()
    rows = int(counted[0]) if counted else 0
    appended = min(refreshed_rows, rows)
    cursor.execute(
        f"UPDATE {LAYOUT_TABLE} SET sorted_rows = ?, appended_rows = ?", [rows - appended, appended]
    )
    return rows


def abandon(cursor: duckdb.DuckDBPyConnection) -> None:
    """Drop the twins (and staging tables) of a rewrite that will not finish."""
    for table in (TABLE, RANGES):
        cursor.execute(f"DROP TABLE IF EXISTS {twin(table)}")
        cursor.execute(f"DROP TABLE IF EXISTS {staged(table)}")


def compact(cursor: duckdb.DuckDBPyConnection) -> int:
    """The whole rewrite in the caller's transaction; return the rows now sorted."""
    for piece in begin(cursor):
        copy_piece(cursor, piece)
    for piece in plan_merge(cursor):
        copy_piece(cursor, piece)
    return swap(cursor, 0)
