"""SQL for linking an execution to the one it ran inside, through the spans between.

A subflow names its parent run directly (`junjo.parent_executable_runtime_id`
on a workflow or subflow parent), and extraction stores that. An Agent run in
a node, or a Workflow executed inside a node or an agent tool, names the
*node* instead (SCHEMA.md 2.1, 2.4): a node's runtime id is not a run id, and
user or library spans can sit between. Its parent execution is the nearest
owner span (workflow, subflow, agent) above it in its trace.

That owner span is exported after everything inside it, often in a later
request, so the link cannot be made when the child arrives. It is made when
either of them is replayed (collector/replayer.py): the walk up is retried for
every unlinked execution of the traces a replay batch touched that can hold
one (`collector.replayer.traces_with_nested_owners`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import duckdb

from collector.junjo import OWNER_SPAN_TYPES

# Telemetry can claim any parent, even a cycle: the walk stops this far up.
MAX_DEPTH: Final = 64

# Seeds: executions of these traces with no parent run but a parent span.
# Each step moves from a span that owns no execution to its parent span; the
# walk ends at the first owner span, at a root, or at a span not stored yet.
_ENCLOSING_RUNS_SQL: Final = f"""
WITH RECURSIVE climb(run_id, trace_id, span_id, depth) AS (
    SELECT run_id, trace_id, parent_span_id, 1
    FROM executions
    WHERE parent_run_id IS NULL AND parent_span_id <> ''
      AND list_contains($traces, trace_id)
  UNION ALL
    SELECT c.run_id, c.trace_id, s.parent_span_id, c.depth + 1
    FROM climb c JOIN spans s ON s.trace_id = c.trace_id AND s.span_id = c.span_id
    WHERE NOT list_contains($owners, coalesce(s.span_type, ''))
      AND s.parent_span_id <> '' AND c.depth < {MAX_DEPTH}
)
SELECT c.run_id, s.junjo_runtime_id
FROM climb c JOIN spans s ON s.trace_id = c.trace_id AND s.span_id = c.span_id
WHERE list_contains($owners, s.span_type)
  AND s.junjo_runtime_id IS NOT NULL AND s.junjo_runtime_id <> c.run_id
"""


def enclosing_runs(
    cursor: duckdb.DuckDBPyConnection, trace_ids: Sequence[str]
) -> list[tuple[str, str]]:
    """(child run id, enclosing run id) for unlinked executions of these traces."""
    if not trace_ids:
        return []
    found = cursor.execute(
        _ENCLOSING_RUNS_SQL, {"traces": list(trace_ids), "owners": list(OWNER_SPAN_TYPES)}
    ).fetchall()
    return [(child, parent) for child, parent in found]


def link(cursor: duckdb.DuckDBPyConnection, pairs: Sequence[tuple[str, str]]) -> None:
    """Set each child's parent run, unless something linked it meanwhile."""
    cursor.executemany(
        "UPDATE executions SET parent_run_id = ? WHERE run_id = ? AND parent_run_id IS NULL",
        [(parent, child) for child, parent in pairs],
    )
