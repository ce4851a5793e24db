"""What finding a redelivered span costs in a large store: the old key against the lookup.

Until m017 `spans` was keyed by (trace_id, span_id), and DuckDB keeps a key as
an ART index. After a restart the index is read from the file lazily, as
inserts reach its nodes, and DuckDB does not evict those nodes to make room in
its pool. Ids whose prefixes follow arrival (what bench_ingest's consecutive
tokens make) reach one end of the index; random ids (what OpenTelemetry SDKs
and Junjo make) reach all of it. Now the table has no key, and a write looks
its spans up by start time first (collector/store/writes.py, `stored_copies`).

This builds a file of `--stored` spans with the real schema, reopens it at
`--memory-limit` (serve's limit during a burst by default), and commits new
spans `--batch` at a time, as exports are committed, for `--commits` commits,
three ways:

- keyed, sequential ids: the schema before m017, ids that follow the stored
  ones: the old key at its best, and the baseline;
- keyed, random ids: the schema before m017, as real exporters fill it;
- lookup, random ids: today's schema and write (`stored_copies`, then insert),
  every commit also carrying one span of the commit before, delivered again.

It prints DuckDB's memory after the commits (all of it, and the ART_INDEX part),
the commit that ran out of memory if one did, and the lookup's time per commit
as a ratio of the baseline's. Targets: the lookup commits every batch, holds
no index memory, and stays within 1.5x of the baseline's time per commit.

    .venv/bin/python bench/bench_key_index.py
    .venv/bin/python bench/bench_key_index.py --stored 3000000 --memory-limit 128MB
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa

from collector.store import migrations, writes

MIB = 2**20
# Stored spans start a millisecond apart, in the order they were written.
START_STEP_NANOS = 1_000_000
LOOKUP_TARGET_RATIO = 1.5
# Random ids: 32 and 16 hex digits of md5, as random as an SDK's. Sequential
# ids: a counter at the end of a fixed prefix, as bench_ingest's tokens are.
_RANDOM_IDS = "md5(i // 10 || 't'), substr(md5(i::VARCHAR), 1, 16)"
_SEQUENTIAL_IDS = "printf('%032x', i // 10), printf('%016x', i)"


@dataclass(frozen=True, slots=True)
class Way:
    name: str
    keyed: bool
    random_ids: bool


@dataclass(frozen=True, slots=True)
class Result:
    way: Way
    memory_mib: float
    index_mib: float
    commits_done: int
    seconds: float
    failure: str | None

    @property
    def seconds_per_commit(self) -> float:
        return self.seconds / max(self.commits_done, 1)


WAYS = (
    Way("keyed, sequential ids", keyed=True, random_ids=False),
    Way("keyed, random ids", keyed=True, random_ids=True),
    Way("lookup, random ids", keyed=False, random_ids=True),
)


def _schema(connection: duckdb.DuckDBPyConnection, keyed: bool) -> None:
    """The real schema: up to m016 (spans keyed) or all of it."""
    names = [function.__name__ for function in migrations.MIGRATIONS]
    upto = names.index("m017_spans_without_key_index") if keyed else len(names)
    for function in migrations.MIGRATIONS[:upto]:
        function(connection)


def _build(path: Path, way: Way, stored: int) -> None:
    ids = _RANDOM_IDS if way.random_ids else _SEQUENTIAL_IDS
    with duckdb.connect(str(path), config={"memory_limit": "4GB"}) as connection:
        _schema(connection, way.keyed)
        step = 200_000
        for start in range(0, stored, step):
            connection.execute(
                f"INSERT INTO spans (trace_id, span_id, parent_span_id, name, kind,"
                f" start_unix_nano, end_unix_nano, status_code, status_message, resource_key,"
                f" service_name, scope_name, dropped_attributes_count, dropped_events_count,"
                f" dropped_links_count, event_count, received_unix_nano, raw, chunk_id,"
                f" chunk_offset, chunk_length)"
                f" SELECT {ids}, '', 'node', 1, i * {START_STEP_NANOS},"
                f" i * {START_STEP_NANOS} + 500, 0, '', 'r', 'svc', 'junjo', 0, 0, 0, 2,"
                f" i * {START_STEP_NANOS}, '', i // 512, (i % 512) * 900, 900"
                f" FROM range(?, ?) r(i)",
                [start, min(start + step, stored)],
            )
        connection.execute("CHECKPOINT")


def _batch(first: int, count: int, random_ids: bool) -> pa.Table:
    """`count` new spans numbered from `first`, as a write's Arrow rows."""
    numbers = range(first, first + count)
    if random_ids:
        trace_ids = [os.urandom(16).hex() for _ in numbers]
        span_ids = [os.urandom(8).hex() for _ in numbers]
    else:
        trace_ids = [f"{i // 10:032x}" for i in numbers]
        span_ids = [f"{i:016x}" for i in numbers]
    starts = [i * START_STEP_NANOS for i in numbers]
    constant: Callable[[object], list[object]] = lambda value: [value] * count  # noqa: E731
    return pa.table({
        "trace_id": trace_ids, "span_id": span_ids, "parent_span_id": constant(""),
        "name": constant("node"), "kind": pa.array(constant(1), pa.int8()),
        "start_unix_nano": pa.array(starts, pa.int64()),
        "end_unix_nano": pa.array([s + 500 for s in starts], pa.int64()),
        "status_code": pa.array(constant(0), pa.int8()), "status_message": constant(""),
        "resource_key": constant("r"), "service_name": constant("svc"),
        "scope_name": constant("junjo"),
        "dropped_attributes_count": pa.array(constant(0), pa.uint32()),
        "dropped_events_count": pa.array(constant(0), pa.uint32()),
        "dropped_links_count": pa.array(constant(0), pa.uint32()),
        "event_count": pa.array(constant(2), pa.uint32()),
        "received_unix_nano": pa.array(starts, pa.int64()), "raw": pa.array(constant(b"")),
        "chunk_id": pa.array(constant(first // 512), pa.int64()),
        "chunk_offset": pa.array([n * 900 for n in range(count)], pa.int64()),
        "chunk_length": pa.array(constant(900), pa.int64()),
    })


def _commit(connection: duckdb.DuckDBPyConnection, batch: pa.Table, keyed: bool) -> None:
    """One commit of a write's spans: the old write (insert, the key refuses a
    repeat) or today's (look the spans up, insert the new ones)."""
    connection.execute("BEGIN TRANSACTION")
    try:
        if not keyed:
            repeated = writes.stored_copies(connection, batch)
            batch = batch.filter(pa.array(
                [(t, s) not in repeated for t, s in zip(
                    batch.column("trace_id").to_pylist(), batch.column("span_id").to_pylist(),
                    strict=True)],
                pa.bool_(),
            ))
        writes.insert(connection, "spans", batch)
        connection.execute("COMMIT")
    except BaseException:
        # A COMMIT that failed has ended the transaction already.
        with suppress(duckdb.Error):
            connection.execute("ROLLBACK")
        raise


def _memory(connection: duckdb.DuckDBPyConnection) -> tuple[float, float]:
    """DuckDB's memory in use and its ART_INDEX part, MiB."""
    total, index = connection.execute(
        "SELECT sum(memory_usage_bytes), sum(memory_usage_bytes) FILTER (tag = 'ART_INDEX')"
        " FROM duckdb_memory()"
    ).fetchone() or (0, 0)
    return (total or 0) / MIB, (index or 0) / MIB


def _measure(way: Way, args: argparse.Namespace, folder: Path) -> Result:
    path = folder / f"{way.name.replace(', ', '-').replace(' ', '_')}.duckdb"
    _build(path, way, args.stored)
    config = {"memory_limit": args.memory_limit, "threads": 1}
    failure = None
    done = 0
    seconds = 0.0
    previous: pa.Table | None = None
    with duckdb.connect(str(path), config=config) as connection:
        # Checkpoints would write the index back and let its blocks go: serve
        # checkpoints at 128 MB of WAL, which these commits stay below.
        connection.execute("SET checkpoint_threshold = '1GB'")
        for done in range(args.commits):
            batch = _batch(args.stored + done * args.batch, args.batch, way.random_ids)
            if previous is not None and not way.keyed:
                # A redelivery among new spans: the lookup must find it.
                batch = pa.concat_tables([batch, previous.slice(0, 1)])
            started = time.perf_counter()
            try:
                _commit(connection, batch, way.keyed)
            except duckdb.Error as exc:
                failure = f"commit {done + 1}: {str(exc).splitlines()[0]}"
                break
            seconds += time.perf_counter() - started
            previous = batch
        else:
            done = args.commits
        memory, index = _memory(connection)
        stored = connection.execute("SELECT count(*) FROM spans").fetchone()
    expected = args.stored + done * args.batch
    if stored and stored[0] != expected and failure is None:
        failure = f"{stored[0]:,} spans stored, {expected:,} expected"
    return Result(way, memory, index, done, seconds, failure)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--stored", type=int, default=1_300_000, help="spans already stored")
    parser.add_argument("--commits", type=int, default=200, help="commits after the restart")
    parser.add_argument("--batch", type=int, default=512, help="spans a commit")
    parser.add_argument("--memory-limit", default="96MB", help="DuckDB's limit after the restart")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="statetrail-keys-") as tmp:
        results = [_measure(way, args, Path(tmp)) for way in WAYS]
    print(f"{args.stored:,} spans stored; {args.commits} commits of {args.batch} new spans "
          f"at memory_limit {args.memory_limit}")
    print(f"{'':>22} {'memory MiB':>10} {'ART MiB':>8} {'commits':>8} {'ms/commit':>10}  failure")
    for r in results:
        print(f"{r.way.name:>22} {r.memory_mib:10.1f} {r.index_mib:8.1f} {r.commits_done:8d} "
              f"{r.seconds_per_commit * 1000:10.2f}  {r.failure or '-'}")
    baseline, _, lookup = results
    ratio = lookup.seconds_per_commit / baseline.seconds_per_commit
    passed = lookup.failure is None and lookup.index_mib == 0 and ratio <= LOOKUP_TARGET_RATIO
    print(f"lookup/baseline time per commit: {ratio:.2f} (target <= {LOOKUP_TARGET_RATIO}); "
          f"lookup index memory {lookup.index_mib:.1f} MiB (target 0): "
          f"{'PASS' if passed else 'FAIL'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
