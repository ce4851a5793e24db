"""The background replayer's cost per execution, by stage, on a small store and a large one.

Writes `--exports` of bench_ingest's exports (51 executions each, 10 spans and 20
transitions an execution, ~340 field-index rows once replayed) through
`Store.write`, as the extractor stores them, and replays them as `serve`'s
replayer does after a burst (`replay_stores`, `READ_BATCH_STORES` stores a call),
first on a store holding nothing else, then on one holding `--runs` runs more:
copies of one replayed export. Every export's ids are stamped with a random
token (`random_numbers`), as OTel trace ids and Junjo's ids are random, so that
no zone map or join filter narrows a look-up by id. The copies carry
no field-index rows (at ~340 rows a run they would be tens of millions; the
save only appends to that table) and no span bytes (never read here).

Each stage is timed in the replaying thread's CPU time (DuckDB runs on that
thread at `serve`'s one thread), so the figures hold on a busy machine:
  * read: `Store.replay_batch`, the executions, transitions and spans of a batch;
  * replay: replaying each execution and building its field index (pure Python);
  * save: `Store.save_replays`, one transaction per REPLAY_BATCH_STORES executions.
The baseline is the replay stage itself, measured in the same run: it does not
depend on the store's size, so read/replay and save/replay show what the store
adds, and how that grows with the store. Blocks of READ_BATCH_STORES stores
alternate between reading READ_BATCH_STORES stores at once and reading them
REPLAY_BATCH_STORES at a time (the batch size before), on one store.

Target (printed PASS/FAIL, never asserted): read + save per execution on the
large store within 2x of the small store's.

    .venv/bin/python -m bench.bench_replayer              # 40 exports, 200,000 more runs
    .venv/bin/python -m bench.bench_replayer --runs 50000  # a quicker large store
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, TypeVar

import duckdb
import pyarrow as pa

from bench.bench_ingest import RequestTemplate, build_request, request_token
from collector.encode.exports import batch_from_export
from collector.jobs import replayer
from collector.jobs.replayer import READ_BATCH_STORES, REPLAY_BATCH_STORES, Backlog, replay_stores
from collector.process.gc_settings import freeze_startup
from collector.store import Store

SPANS_PER_EXPORT: Final = 512
TOKENS: Final = 62**5  # request numbers bench_ingest can stamp (request_token)
SEED_NUMBER: Final = TOKENS - 1  # "zzzzz": no other part of an id looks like it
EXECUTIONS_PER_EXPORT: Final = 51  # whole ones in an export of 512 spans (and one cut off)
TARGET_GROWTH: Final = 2.0
STAGES: Final = ("read", "replay", "save")

_T = TypeVar("_T")


class StageClock:
    """CPU seconds spent in the store's read and save, while installed; the rest is replay."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def installed(self) -> Iterator[None]:
        originals: dict[str, Callable[..., Any]] = {
            "replay_batch": Store.replay_batch,
            "save_replays": Store.save_replays,
        }
        for name, stage in (("replay_batch", "read"), ("save_replays", "save")):
            setattr(Store, name, self._timed(originals[name], stage))
        try:
            yield
        finally:
            for name, original in originals.items():
                setattr(Store, name, original)

    def _timed(self, method: Callable[..., _T], stage: str) -> Callable[..., _T]:
        def timed(*args: Any, **kwargs: Any) -> _T:
            started = time.thread_time()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds[stage] += time.thread_time() - started

        return timed


def write_exports(store: Store, template: RequestTemplate, numbers: Sequence[int]) -> None:
    for number in numbers:
        store.write([batch_from_export(template.render(number))])


def random_numbers(rng: random.Random, count: int) -> list[int]:
    """Request numbers spread over the whole token range, so that ids are spread too.

    Real trace ids and Junjo's ids are random: a batch's least and greatest id
    then span nearly every stored id, and no min/max filter narrows a scan.
    Consecutive numbers would give one batch's ids a common prefix apart from
    the rest, which DuckDB's join filters would exploit as real ids never allow.
    """
    return rng.sample(range(1, TOKENS), count)


def seed(path: Path, template: RequestTemplate) -> None:
    """One export, replayed: the pattern the large store's extra runs are copies of."""
    store = Store(path)
    write_exports(store, template, [SEED_NUMBER])
    replay_stores(store, store.stale_store_ids())
    store.close()


def add_copies(path: Path, source: Path, tokens: Sequence[str]) -> None:
    """Copies of `source`'s runs, one per token, already replayed.

    Each copy is the seed export with its token replaced: in text ids as
    written, in hex ids (trace and span ids) as its hex.
    """
    Store(path).close()  # the schema
    conn = duckdb.connect(str(path))
    conn.execute(f"ATTACH '{source}' AS src (READ_ONLY)")
    conn.register("_tokens", pa.table({"token": list(tokens)}))
    conn.execute("CREATE TEMP TABLE tokens AS SELECT token, lower(hex(token)) AS hex FROM _tokens")
    seed_token = request_token(SEED_NUMBER).decode()
    seed_hex = seed_token.encode().hex()

    def text(column: str) -> str:
        return f"replace({column}, '{seed_token}', t.token)"

    def hexed(column: str) -> str:
        return f"replace({column}, '{seed_hex}', t.hex)"

    conn.execute(
        f"""INSERT INTO spans BY NAME SELECT s.* REPLACE (
            {hexed('trace_id')} AS trace_id, {hexed('span_id')} AS span_id,
            {hexed('parent_span_id')} AS parent_span_id,
            {text('junjo_runtime_id')} AS junjo_runtime_id,
            {text('junjo_parent_runtime_id')} AS junjo_parent_runtime_id, ''::BLOB AS raw)
        FROM src.spans s, tokens t ORDER BY t.token, s.received_unix_nano"""
    )
    conn.execute(
        f"""INSERT INTO executions BY NAME SELECT e.* EXCLUDE (run_key) REPLACE (
            {text('run_id')} AS run_id, {hexed('trace_id')} AS trace_id,
            {hexed('span_id')} AS span_id, {hexed('parent_span_id')} AS parent_span_id,
            {text('store_id')} AS store_id, {text('parent_run_id')} AS parent_run_id)
        FROM src.executions e, tokens t ORDER BY t.token, e.run_key"""
    )
    conn.execute(
        f"""INSERT INTO transitions BY NAME SELECT x.* REPLACE (
            {hexed('trace_id')} AS trace_id, {hexed('span_id')} AS span_id,
            {text('store_id')} AS store_id, {text('event_id')} AS event_id)
        FROM src.transitions x, tokens t ORDER BY t.token, x.received_unix_nano"""
    )
    conn.execute(
        f"""CREATE TEMP TABLE copied AS SELECT r.* EXCLUDE (run_key, run_id),
            {text('r.run_id')} AS run_id FROM src.execution_replays r, tokens t"""
    )
    conn.execute(
        """INSERT INTO execution_replays BY NAME SELECT c.*, e.run_key
        FROM copied c JOIN executions e USING (run_id) ORDER BY e.run_key"""
    )
    conn.execute("CHECKPOINT")
    conn.close()


def build(folder: Path, template: RequestTemplate, exports: int, runs: int) -> Path:
    """A store of `runs` runs more (copies, replayed), then `exports` exports (not replayed)."""
    rng = random.Random(42)
    path = folder / f"store-{runs}.duckdb"
    numbers = random_numbers(rng, exports + -(-runs // EXECUTIONS_PER_EXPORT))
    if runs:
        source = folder / "seed.duckdb"
        if not source.exists():
            seed(source, template)
        tokens = [request_token(number).decode() for number in numbers[exports:]]
        add_copies(path, source, tokens)
    store = Store(path)
    write_exports(store, template, numbers[:exports])
    store.close()
    return path


def _count(path: Path, sql: str) -> int:
    with duckdb.connect(str(path), read_only=True) as conn:
        row = conn.execute(sql).fetchone()
    return int(row[0]) if row else 0


def blocks(store: Store) -> list[tuple[list[str], list[str]]]:
    """The stale stores and runs as the replayer takes them, READ_BATCH_STORES a call."""
    pending = Backlog(set(store.stale_store_ids()), set(store.stale_storeless_run_ids()))
    taken = []
    while pending:
        batch = pending.take(READ_BATCH_STORES)
        taken.append((sorted(batch.stores), sorted(batch.runs)))
    return taken


class Figures:
    """CPU ms per execution by stage, for one way of reading."""

    def __init__(self) -> None:
        self.clock = StageClock()
        self.total = 0.0
        self.executions = 0

    def per_execution(self, stage: str) -> float:
        seconds = self.clock.seconds
        if stage == "replay":
            spent = self.total - seconds["read"] - seconds["save"]
        elif stage == "total":
            spent = self.total
        else:
            spent = seconds[stage]
        return spent / max(self.executions, 1) * 1e3


def measure(path: Path, copy: Path) -> dict[int, Figures]:
    """Alternate blocks between reads of READ_BATCH_STORES and of REPLAY_BATCH_STORES stores."""
    shutil.copy(path, copy)
    store = Store(copy, memory_limit="128MB", threads=1)
    figures = {READ_BATCH_STORES: Figures(), REPLAY_BATCH_STORES: Figures()}
    for number, (stores, runs) in enumerate(blocks(store)):
        size = READ_BATCH_STORES if number % 2 else REPLAY_BATCH_STORES
        measured = figures[size]
        with measured.clock.installed():
            started = time.thread_time()
            for first in range(0, max(len(stores), len(runs)), size):
                measured.executions += replay_stores(
                    store, stores[first : first + size], storeless_runs=runs[first : first + size]
                )
            measured.total += time.thread_time() - started
    store.close()
    return figures


def report(label: str, figures: dict[int, Figures]) -> None:
    now, before = figures[READ_BATCH_STORES], figures[REPLAY_BATCH_STORES]
    baseline = now.per_execution("replay")
    print(f"\n{label}: {now.executions} + {before.executions} executions replayed")
    smaller = f"reads of {REPLAY_BATCH_STORES}"
    print(f"  {'stage':<7} {'ms/exec':>8} {'x replay':>9}   {smaller:>11} {'x replay':>9}")
    for stage in (*STAGES, "total"):
        ms, old = now.per_execution(stage), before.per_execution(stage)
        print(f"  {stage:<7} {ms:8.3f} {ms / baseline:9.2f}   {old:11.3f} {old / baseline:9.2f}")
    ratio = now.per_execution("total") / before.per_execution("total")
    print(f"  total, reads of {READ_BATCH_STORES} / reads of {REPLAY_BATCH_STORES}: {ratio:.2f}")


def store_overhead(figures: dict[int, Figures]) -> float:
    now = figures[READ_BATCH_STORES]
    return now.per_execution("read") + now.per_execution("save")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--exports", type=int, default=40, help="exports replayed (51 runs each)")
    parser.add_argument("--runs", type=int, default=200_000, help="runs more in the large store")
    args = parser.parse_args(argv)
    # Two blocks at least: one read each way.
    fewest = -(-2 * READ_BATCH_STORES // EXECUTIONS_PER_EXPORT)
    if args.exports < fewest:
        parser.error(f"--exports must be at least {fewest} (two blocks of {READ_BATCH_STORES})")
    template = RequestTemplate(build_request(SPANS_PER_EXPORT))
    # As `serve` runs its replayer (collector/process/gc_settings.py).
    freeze_startup()
    print(
        f"read batches of {replayer.READ_BATCH_STORES} stores, saves of "
        f"{replayer.REPLAY_BATCH_STORES}; CPU time of the replaying thread"
    )
    with tempfile.TemporaryDirectory(prefix="bench-replayer-") as tmp:
        folder = Path(tmp)
        results = {}
        for runs in (0, args.runs):
            started = time.monotonic()
            path = build(folder, template, args.exports, runs)
            stored = _count(path, "SELECT count(*) FROM executions")
            print(f"built a store of {stored} runs in {time.monotonic() - started:.0f} s")
            results[runs] = measure(path, folder / "replayed.duckdb")
            report(f"store of {stored} runs", results[runs])
            path.unlink()
    growth = store_overhead(results[args.runs]) / store_overhead(results[0])
    verdict = "PASS" if growth <= TARGET_GROWTH else "FAIL"
    print(
        f"\nread + save per execution, large store / small store: {growth:.2f}"
        f" (target <= {TARGET_GROWTH:.1f}) {verdict}"
    )


if __name__ == "__main__":
    main()
