"""Keeping the field index in sort order, so that zone maps prune filters.

Replay appends each batch's rows sorted, but a row group holds a few dozen batches,
so appended row groups each span every path and a filter reads all of them. So the
idle replayer rewrites both tables in order once enough rows were appended
(`CompactionPolicy`: "enough" grows with the index, so rewriting stays a constant
multiple of the rows ever appended). The sorted copy is built beside the live tables a
piece at a time, then swapped in (`begin`, `copy_piece`, `refresh_runs`, `swap`;
rewrite.py runs them under the store's locks), so no export waits for a whole copy.
On DuckLake this would rather be `SET SORTED BY` (docs/ducklake.md). Measurements:
docs/benchmarks.md, "the field index's sort".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import duckdb

from collector.store.filters import RANGES, RANGES_SORT_KEY, SORT_KEY, TABLE, without_execution

LAYOUT_TABLE: Final = "field_index_layout"
# Rows sorted at once (a piece), sized so its sort fits the burst's lower memory
# limit (docs/memory.md, "The field index's rewrite after a burst"). Pieces are
# copied under the write lock, so this also bounds how long storing can wait for one.
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


# Each live table gets a twin, filled a piece (a range of `ORDER_KEYS`) at a time;
# runs changed meanwhile get their live rows again before the swap (rewrite.py).
TWIN_SUFFIX: Final = "_compacting"
# Each table's sort key, then the run key, so a piece can end inside rows the sort key
# ties. Coalesced, never NULL (bounds compare with `=`/`>`): within one path and kind
# num (or str_key) is set on every row or none, so the order is kept.
ORDER_KEYS: Final = {
    TABLE: ("parent_shape_key", "parent_key", "path_key", "kind", "coalesce(num, 0)",
            "coalesce(str_key, 0)", "coalesce(run_key, 0)"),
    RANGES: ("parent_key", "path_key", "coalesce(hi, 0)", "coalesce(run_key, 0)"),
}
SORT_KEYS: Final = {TABLE: f"{SORT_KEY}, run_key", RANGES: f"{RANGES_SORT_KEY}, run_key"}
# Sampled rows per piece when planning the pieces' bounds.
SAMPLES_PER_PIECE: Final = 100

# An index mostly in arrival order has every path in every row group, so a piece of
# paths would read the whole table: it is first copied sorted a run-key range at a
# time (zone maps find each) into staging tables, then merged into the twin.
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
    """Create empty twins of both tables (from DuckDB's own definitions, so the schema is
    kept exactly) and plan the pieces that fill them, in order; or stage an index
    mostly in arrival order first, for `plan_merge`. Leftover twins are dropped first."""
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
    # Plain comparisons of the first keys let zone maps skip row groups; `_beyond` is
    # exact. The first piece gets none: a coalesced first key's NULLs compare as 0.
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
    """Ascending values of `order` that cut the table into pieces of about CHUNK_ROWS rows,
    from a sample (one scan of the key columns, a sort of the sample alone)."""
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
    """Give the runs with these keys their live rows in the twins; return the field_values
    rows copied. With `sweep`, also drop rows of runs no longer stored, as retention did."""
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
    """Put the twins in their tables' places; return the field_values rows now stored
    (`refreshed_rows`, copied out of order, are counted as appended)."""
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
