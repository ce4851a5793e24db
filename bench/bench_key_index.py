"""How much of DuckDB's memory the spans table's primary key holds, random ids against sequential.

`spans` is keyed by (trace_id, span_id) (collector/store/migrations.py m001),
and DuckDB keeps that key as an ART index. After a restart the index is read
from the file lazily, as inserts reach its nodes, and DuckDB does not evict
those nodes to make room in its pool. Ids whose prefixes follow arrival (what
bench_ingest's consecutive tokens make) reach one end of the index; random ids
(what OpenTelemetry SDKs and Junjo make) reach all of it.

This builds a file holding `--stored` spans' keys, reopens it at `--memory-limit`
(serve's limit during a burst by default), and commits new spans `--batch` at a
time, as exports are committed, for `--commits` commits: once with ids that
follow the stored ones (the baseline), once with random ids. It prints the
index's part of DuckDB's memory (`duckdb_memory()`, tag ART_INDEX) after the
commits, and the commit that ran out of memory, if one did. No target: the
figure says how many spans a store can hold before its key index crowds out
everything else, and is what a change to the dedup key would be measured by.

    .venv/bin/python bench/bench_key_index.py
    .venv/bin/python bench/bench_key_index.py --stored 3000000 --memory-limit 128MB
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb

MIB = 2**20
# Random ids: 32 and 16 hex digits of md5, as random as an SDK's. Sequential
# ids: a counter at the end of a fixed prefix, as bench_ingest's tokens are.
_RANDOM_IDS = "md5(i // 10 || 't'), substr(md5(i::VARCHAR), 1, 16)"
_SEQUENTIAL_IDS = "printf('%032x', i // 10), printf('%016x', i)"


@dataclass(frozen=True, slots=True)
class Result:
    ids: str
    index_mib: float
    commits_done: int
    seconds: float
    failure: str | None


def _build(path: Path, ids: str, stored: int) -> None:
    with duckdb.connect(str(path), config={"memory_limit": "4GB"}) as connection:
        connection.execute(
            "CREATE TABLE spans (trace_id VARCHAR NOT NULL, span_id VARCHAR NOT NULL,"
            " PRIMARY KEY (trace_id, span_id))"
        )
        step = 200_000
        for start in range(0, stored, step):
            connection.execute(
                f"INSERT INTO spans SELECT {ids} FROM range(?, ?) r(i)",
                [start, min(start + step, stored)],
            )
        connection.execute("CHECKPOINT")


def _index_mib(connection: duckdb.DuckDBPyConnection) -> float:
    row = connection.execute(
        "SELECT memory_usage_bytes FROM duckdb_memory() WHERE tag = 'ART_INDEX'"
    ).fetchone()
    return (row[0] if row else 0) / MIB


def _measure(name: str, ids: str, args: argparse.Namespace, folder: Path) -> Result:
    path = folder / f"{name}.duckdb"
    _build(path, ids, args.stored)
    config = {"memory_limit": args.memory_limit, "threads": 1}
    started = time.perf_counter()
    failure = None
    done = 0
    with duckdb.connect(str(path), config=config) as connection:
        # Checkpoints would write the index back and let its blocks go: serve
        # checkpoints at 128 MB of WAL, which these commits stay below.
        connection.execute("SET checkpoint_threshold = '1GB'")
        for done in range(args.commits):
            first = args.stored + done * args.batch
            try:
                connection.execute(
                    f"INSERT INTO spans SELECT {ids} FROM range(?, ?) r(i)",
                    [first, first + args.batch],
                )
            except duckdb.Error as exc:
                failure = f"commit {done + 1}: {str(exc).splitlines()[0]}"
                break
        else:
            done = args.commits
        index = _index_mib(connection)
    return Result(name, index, done, time.perf_counter() - started, failure)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--stored", type=int, default=1_300_000, help="spans already stored")
    parser.add_argument("--commits", type=int, default=200, help="commits after the restart")
    parser.add_argument("--batch", type=int, default=512, help="spans a commit")
    parser.add_argument("--memory-limit", default="96MB", help="DuckDB's limit after the restart")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="statetrail-keys-") as tmp:
        results = [
            _measure("sequential", _SEQUENTIAL_IDS, args, Path(tmp)),
            _measure("random", _RANDOM_IDS, args, Path(tmp)),
        ]
    print(f"{args.stored:,} spans stored; {args.commits} commits of {args.batch} new spans "
          f"at memory_limit {args.memory_limit}")
    print(f"{'ids':>12} {'ART MiB':>9} {'commits':>8} {'seconds':>8}  out of memory")
    for result in results:
        print(f"{result.ids:>12} {result.index_mib:9.1f} {result.commits_done:8d} "
              f"{result.seconds:8.1f}  {result.failure or '-'}")
    sequential, scattered = results
    if sequential.index_mib:
        print(f"random/sequential index memory: {scattered.index_mib / sequential.index_mib:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
