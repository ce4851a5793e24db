"""Keeping the field index in sort order, so that zone maps prune filters.

Stage: storage. Replay appends each batch's rows sorted (collector/store/filters.py),
but a row group holds a few dozen batches, so appended row groups each span
every path, and a filter reads all of them. Measured with bench_filter_store
at 200,000 executions (6.5M index rows): a `final` equality filter took 38 ms
on rows in arrival order, 12 ms once they were rewritten in sort order.

So the replayer, once it has nothing else to do, asks whether enough rows were
appended since the last rewrite, and if so rewrites both tables in order
(`compact`). "Enough" grows with the index (`CompactionPolicy`): rewriting costs
time proportional to the whole index, so the rows rewritten stay a constant
multiple of the rows ever appended, while what is out of order stays a bounded
share of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import duckdb

from collector.store.filters import RANGES, RANGES_SORT_KEY, SORT_KEY, TABLE

LAYOUT_TABLE: Final = "field_index_layout"
# Rows sorted at once. One sort of a whole 32.5M-row index ran out of serve's
# 128 MB (bench_filter_store at 1M runs); a range of paths at a time does not.
CHUNK_ROWS: Final = 2_000_000


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


def compact(cursor: duckdb.DuckDBPyConnection) -> int:
    """Rewrite both field-index tables in sort order; return the rows now sorted.

    Runs in the caller's transaction. Each table is copied in order into a
    table made from its own definition (as DuckDB reports it, so the schema
    the migrations built is kept exactly), which then takes its place.
    """
    _rewrite_sorted(cursor, TABLE, SORT_KEY)
    _rewrite_sorted(cursor, RANGES, RANGES_SORT_KEY)
    counted = cursor.execute(f"SELECT count(*) FROM {TABLE}").fetchone()
    rows = int(counted[0]) if counted else 0
    cursor.execute(f"UPDATE {LAYOUT_TABLE} SET sorted_rows = ?, appended_rows = 0", [rows])
    return rows


def _rewrite_sorted(cursor: duckdb.DuckDBPyConnection, table: str, sort_key: str) -> None:
    """Copy `table` in sort order into a twin that replaces it, a range of paths at a time.

    Both tables' sort keys start with (parent_key, path_key), so copying
    consecutive ranges of those, each sorted, leaves the whole copy sorted.
    """
    staging = f"{table}_compacting"
    found = cursor.execute(
        "SELECT sql FROM duckdb_tables() WHERE schema_name = 'main' AND table_name = ?",
        [table],
    ).fetchone()
    assert found is not None, f"no table {table}"
    definition = str(found[0])
    prefix = f"CREATE TABLE {table}("
    assert definition.startswith(prefix), definition
    cursor.execute(f"DROP TABLE IF EXISTS {staging}")
    cursor.execute(f"CREATE TABLE {staging}(" + definition[len(prefix):])
    for first, last in _path_ranges(cursor, table):
        cursor.execute(
            f"INSERT INTO {staging} BY NAME SELECT * FROM {table}"
            " WHERE (parent_key > $p0 OR (parent_key = $p0 AND path_key >= $k0))"
            " AND (parent_key < $p1 OR (parent_key = $p1 AND path_key <= $k1))"
            f" ORDER BY {sort_key}",
            {"p0": first[0], "k0": first[1], "p1": last[0], "k1": last[1]},
        )
    cursor.execute(f"DROP TABLE {table}")
    cursor.execute(f"ALTER TABLE {staging} RENAME TO {table}")


PathKey = tuple[int, int]  # (parent_key, path_key)


def _path_ranges(cursor: duckdb.DuckDBPyConnection, table: str) -> list[tuple[PathKey, PathKey]]:
    """Consecutive (first, last) ranges of the table's paths, about CHUNK_ROWS rows each.

    A path with more rows than that is a range of its own.
    """
    counts = cursor.execute(
        f"SELECT parent_key, path_key, count(*) FROM {table}"
        " GROUP BY parent_key, path_key ORDER BY parent_key, path_key"
    ).fetchall()
    ranges: list[tuple[PathKey, PathKey]] = []
    first: PathKey | None = None
    rows = 0
    for parent_key, path_key, count in counts:
        first = first or (parent_key, path_key)
        rows += count
        if rows >= CHUNK_ROWS:
            ranges.append((first, (parent_key, path_key)))
            first, rows = None, 0
    if first is not None:
        ranges.append((first, (counts[-1][0], counts[-1][1])))
    return ranges
