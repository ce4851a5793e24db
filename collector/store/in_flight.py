"""SQL for runs in flight: known from their nodes' spans while their owner span is missing.

A run's owner span ends last, often in a later export (SCHEMA.md section 7), so until
then the run is only spans naming it as their parent run. Which span types those are
is the producer's convention, passed in by the caller and bound as parameters.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import duckdb

from collector.store.listing import ExecutionQuery

IN_FLIGHT_WINDOW_NANOS: Final = 24 * 3600 * 1_000_000_000
# A list asking for runs started since a time older than the window looks back to
# then, less this margin: spans reach this server after they start, unless the
# producer's clock runs that far ahead of the server's.
CLOCK_SKEW_NANOS: Final = 3600 * 1_000_000_000
# An in-flight run whose trace received nothing for this long has probably stopped
# (its process died, or its owner span was lost): the studio shows "no activity since"
# instead of waiting. Junjo exports spans as they end, in frequent batches
# (SCHEMA.md section 0), so a quiet trace means no span of it ended for that long.
IN_FLIGHT_QUIET_NANOS: Final = 600 * 1_000_000_000


@dataclass(frozen=True, slots=True)
class InFlightRow:
    """A run whose owner span has not arrived, known from its nodes' spans."""

    run_id: str
    trace_id: str
    service: str
    first_unix_nano: int
    last_unix_nano: int
    span_count: int
    store_ids: tuple[str, ...]
    transition_count: int
    # Receipt times are this server's clock, not the producer's.
    last_received_unix_nano: int = 0
    own_store_id: str | None = None
    # The newest span of its trace of any type (a model call's inside a running node).
    last_activity_unix_nano: int = 0

    def is_quiet(self, now_unix_nano: int) -> bool:
        """Nothing arrived in its trace for IN_FLIGHT_QUIET_NANOS: its process probably died,
        or its owner span was lost. Evidence arriving later makes it active again."""
        return now_unix_nano - self.latest_activity_unix_nano > IN_FLIGHT_QUIET_NANOS

    @property
    def latest_activity_unix_nano(self) -> int:
        """When the run's trace last received anything (what "no activity since" names)."""
        return max(self.last_activity_unix_nano, self.last_received_unix_nano)


# In flight: spans of the `{in_run}` types name the run as parent and its owner span
# has not arrived; `{not_run}` parents (RunConcurrent) are excluded. Last activity is
# any span of its trace (a node waiting on a model call sends nothing until it ends).
# The run's own store is the one most of those events wrote once each carrier's own
# store (a subflow's) is left out (SCHEMA.md section 7.1).
_IN_FLIGHT_SQL: Final = """
    WITH parents AS (
        SELECT s.junjo_parent_runtime_id AS run_id, s.trace_id, s.span_id, s.service_name,
               s.start_unix_nano, s.end_unix_nano, s.received_unix_nano,
               carrier.store_id AS carrier_store_id
        FROM spans s
        LEFT JOIN executions carrier ON carrier.run_id = s.junjo_runtime_id
        WHERE s.received_unix_nano >= $since
          AND s.junjo_parent_runtime_id IS NOT NULL
          AND s.span_type IN ({in_run})
          AND s.junjo_parent_runtime_id NOT IN (
              SELECT junjo_runtime_id FROM spans
              WHERE received_unix_nano >= $since
                AND span_type IN ({not_run}) AND junjo_runtime_id IS NOT NULL)
          AND s.junjo_parent_runtime_id NOT IN (SELECT run_id FROM executions)
          {span_conditions}
    ),
    flights AS (
        SELECT p.run_id, any_value(p.trace_id) AS trace_id, any_value(p.service_name) AS service,
               min(p.start_unix_nano) AS first_start, max(p.end_unix_nano) AS last_end,
               count(DISTINCT p.span_id) AS span_count,
               list(DISTINCT t.store_id) FILTER (WHERE t.store_id IS NOT NULL) AS store_ids,
               count(t.store_id) AS transition_count, max(p.received_unix_nano) AS received,
               mode(t.store_id) FILTER (
                   WHERE t.store_id IS DISTINCT FROM p.carrier_store_id
               ) AS own_store_id
        FROM parents p
        LEFT JOIN transitions t ON t.trace_id = p.trace_id AND t.span_id = p.span_id
        GROUP BY p.run_id
        {run_conditions}
        ORDER BY min(p.start_unix_nano) DESC
        LIMIT $limit
    ),
    trace_activity AS (
        SELECT trace_id, max(received_unix_nano) AS received FROM spans
        WHERE received_unix_nano >= $since AND trace_id IN (SELECT trace_id FROM flights)
        GROUP BY trace_id
    )
    SELECT f.*, greatest(f.received, coalesce(a.received, 0))
    FROM flights f LEFT JOIN trace_activity a ON a.trace_id = f.trace_id
    ORDER BY f.first_start DESC
"""


def could_match(query: ExecutionQuery) -> bool:
    """Whether a run in flight can be one of the runs `query` asks for: none can match a
    workflow name, status, kind, correlation, field, search or verdict, which it has not yet."""
    unknowable = (
        query.where, query.text, query.workflow, query.status, query.kind, query.correlation
    )
    return all(value is None for value in unknowable) and query.verdict in (None, "in_flight")


def in_flight(
    cursor: duckdb.DuckDBPyConnection,
    *,
    in_run_types: Sequence[str],
    not_run_types: Sequence[str],
    limit: int = 50,
    run_id: str | None = None,
    matching: ExecutionQuery | None = None,
    received_since: int | None = None,
) -> list[InFlightRow]:
    """Runs whose nodes reported but whose owner span has not.

    `in_run_types` name their run as parent; `not_run_types` are parents that are
    never runs. `matching` keeps what the query's service, trace, store and time
    range admit (check `could_match` first). Only spans received since
    `received_since` are read (zone maps skip the rest), by default `window_start`.
    """
    if received_since is None:
        received_since = window_start(time.time_ns(), matching)
    params: dict[str, object] = {"limit": limit, "since": received_since}
    in_run = _bind_each(params, "in_run", in_run_types)
    not_run = _bind_each(params, "not_run", not_run_types)
    span_conditions: list[str] = []
    run_conditions: list[str] = []
    if run_id is not None:
        span_conditions.append("s.junjo_parent_runtime_id = $run_id")
        params["run_id"] = run_id
    if matching is not None:
        _add_query_conditions(matching, span_conditions, run_conditions, params)
    sql = _IN_FLIGHT_SQL.format(
        in_run=in_run,
        not_run=not_run,
        span_conditions="".join(f" AND {c}" for c in span_conditions),
        run_conditions=f"HAVING {' AND '.join(run_conditions)}" if run_conditions else "",
    )
    rows = cursor.execute(sql, params).fetchall()
    return [
        InFlightRow(
            r[0], r[1], r[2], r[3], r[4], r[5], tuple(sorted(r[6] or ())), r[7], r[8], r[9],
            r[10],
        )
        for r in rows
    ]


def window_start(now_unix_nano: int, matching: ExecutionQuery | None) -> int:
    """The oldest receipt time a list of runs in flight looks at: the last IN_FLIGHT_WINDOW,
    or the list's own older `since` (so `since=7d` finds a run that died a week ago)."""
    start = now_unix_nano - IN_FLIGHT_WINDOW_NANOS
    if matching is None:
        return start
    if matching.trace_id is not None:
        return 0  # one trace's spans, however old
    if matching.since_unix_nano is not None:
        return min(start, matching.since_unix_nano - CLOCK_SKEW_NANOS)
    return start


def _add_query_conditions(
    query: ExecutionQuery,
    span_conditions: list[str],
    run_conditions: list[str],
    params: dict[str, object],
) -> None:
    """The filters of `query` a run in flight can be tested by: service and trace per span,
    store and start (its first node's) for the run as a whole."""
    tests: tuple[tuple[list[str], str, str, object], ...] = (
        (span_conditions, "service", "s.service_name = $service", query.service),
        (span_conditions, "trace_id", "s.trace_id = $trace_id", query.trace_id),
        (run_conditions, "store_id", "count(*) FILTER (WHERE t.store_id = $store_id) > 0",
         query.store_id),
        (run_conditions, "started_since", "min(p.start_unix_nano) >= $started_since",
         query.since_unix_nano),
        (run_conditions, "started_until", "min(p.start_unix_nano) < $started_until",
         query.until_unix_nano),
    )
    for conditions, name, condition, value in tests:
        if value is not None:
            conditions.append(condition)
            params[name] = value


def _bind_each(params: dict[str, object], name: str, values: Sequence[str]) -> str:
    """Placeholders `$name0, $name1, ...` for `values`, each bound in `params`: a constant
    IN list DuckDB plans with, unlike one list parameter. An empty list matches nothing."""
    if not values:
        return "NULL"
    names = [f"{name}{index}" for index in range(len(values))]
    params.update(zip(names, values, strict=True))
    return ", ".join(f"${key}" for key in names)
