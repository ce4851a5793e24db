"""Opening a file folds in the WAL a crash left, within the store's memory limit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from collector.store import Store

pytestmark = pytest.mark.slow

# Rows committed one small transaction at a time, as exports are, so they go to
# the WAL; a checkpoint threshold no commit reaches keeps them there, and the
# process exits without closing the database, as a crash does.
_LEAVE_A_WAL = """
import os, sys, duckdb
connection = duckdb.connect(sys.argv[1])
connection.execute("SET checkpoint_threshold = '10GB'")
connection.execute("CREATE TABLE ballast (a VARCHAR, b BIGINT, s VARCHAR)")
for n in range(150):
    connection.execute(
        "INSERT INTO ballast SELECT md5(i::VARCHAR), i, repeat('x', 60) || i"
        " FROM range(?, ?) r(i)", [n * 10_000, (n + 1) * 10_000])
os._exit(0)
"""

_OPEN_AND_REPORT_PEAK = """
import resource, sys
from collector.store import Store
store = Store(sys.argv[1], memory_limit="64MB")
store.close()
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def _peak_rss_opening(path: Path) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _OPEN_AND_REPORT_PEAK, str(path)],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    return int(done.stdout.split()[-1])


def test_a_crash_left_wal_is_replayed_within_the_memory_limit(tmp_path: Path) -> None:
    crashed, fresh = tmp_path / "crashed.duckdb", tmp_path / "fresh.duckdb"
    for path in (crashed, fresh):
        Store(path).close()
    subprocess.run([sys.executable, "-c", _LEAVE_A_WAL, str(crashed)], check=True, timeout=120)
    wal_bytes = Path(f"{crashed}.wal").stat().st_size
    assert wal_bytes > 100 * 2**20

    grown = _peak_rss_opening(crashed) - _peak_rss_opening(fresh)

    # At DuckDB's default limit (80% of RAM) the whole WAL is replayed into memory.
    assert grown < wal_bytes / 2, (grown, wal_bytes)
    store = Store(crashed)
    try:
        with store._cursor() as cursor:
            counted = cursor.execute("SELECT count(*) FROM ballast").fetchall()
        assert counted == [(1_500_000,)]
    finally:
        store.close()
