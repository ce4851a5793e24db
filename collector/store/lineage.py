"""SQL for linking an execution to the run it ran inside (found by collector/replay/lineage.py)."""

from __future__ import annotations

from collections.abc import Sequence

import duckdb


def link(cursor: duckdb.DuckDBPyConnection, pairs: Sequence[tuple[str, str]]) -> None:
    """Set each child's parent run, if both runs are stored and the child has none yet.

    Both look-ups are by primary key. A child linked before keeps its parent:
    extraction's direct link, or an earlier walk's, is never overwritten.
    """
    if not pairs:
        return
    cursor.executemany(
        "UPDATE executions SET parent_run_id = ? WHERE run_id = ? AND parent_run_id IS NULL"
        " AND EXISTS (SELECT 1 FROM executions p WHERE p.run_id = ?)",
        [(parent, child, parent) for child, parent in pairs],
    )
