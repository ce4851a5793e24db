"""Crash recovery: kill -9 under load, restart on the same file, lose no acknowledged span.

The heavy version (>= 20 kills) is bench/soak_crash.py; this one keeps CI short.
The seed picks the uptimes between kills and the exporters' pauses; try others
with LOAD_SEEDS="1 2 3".
"""

from __future__ import annotations

import random
import time

import pytest
from support.crashload import ExportLoad, stored_spans
from support.seeds import seed_id, seeds
from support.servers import MakeServer, Server

KILLS = 5
LOAD_SEEDS = seeds("LOAD_SEEDS", 1)


@pytest.mark.slow
@pytest.mark.parametrize("seed", LOAD_SEEDS, ids=seed_id)
def test_crash_recovery_keeps_every_acknowledged_span_exactly_once(
    make_server: MakeServer, seed: int
) -> None:
    server: Server = make_server()
    load = ExportLoad(server.grpc_target, exporters=4, spans_per_request=50, seed=seed).start()
    uptimes = random.Random(seed)
    kills = 0
    try:
        for _ in range(KILLS):
            time.sleep(uptimes.uniform(0.5, 2.0))
            server.kill()
            kills += 1
            server.start()
        time.sleep(1.0)
    finally:
        report = load.stop()
        server.stop()
    stored = stored_spans(server.db)
    missing = report.acked - stored.spans
    print(
        f"kills={kills} acknowledged_spans={len(report.acked)} found={len(stored.spans)} "
        f"missing={len(missing)} duplicates={stored.duplicates} "
        f"failed_attempts={report.failed_attempts}"
    )
    assert kills == KILLS
    assert report.requests_acked > KILLS, "the exporters must make progress between kills"
    assert not report.unexpected, report.unexpected[:5]
    assert stored.duplicates == 0
    assert not missing, f"{len(missing)} acknowledged spans lost, e.g. {sorted(missing)[:3]}"


@pytest.mark.parametrize("seed", LOAD_SEEDS, ids=seed_id)
def test_sigterm_under_load_finishes_acknowledged_exports_and_exits_cleanly(
    make_server: MakeServer, seed: int
) -> None:
    server: Server = make_server()
    load = ExportLoad(server.grpc_target, exporters=4, spans_per_request=50, seed=seed).start()
    try:
        time.sleep(1.5)
        started = time.monotonic()
        code = server.stop()
        stopped_in = time.monotonic() - started
    finally:
        report = load.stop()
    assert code in (0, -15), server.output()
    assert stopped_in < 30, "shutdown must not wait for a replay backlog"
    assert report.requests_acked > 0
    stored = stored_spans(server.db)
    assert stored.duplicates == 0
    assert report.acked <= stored.spans
    # A clean stop checkpoints: no write-ahead log is left behind.
    assert not server.db.with_name(server.db.name + ".wal").exists()
