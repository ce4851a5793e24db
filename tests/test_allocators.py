"""The server's allocator settings, in a fresh interpreter (they are process-wide)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

# Frees 200 MB of heap blocks, then reports RSS before and after two trim intervals.
# MALLOC_TRIM_THRESHOLD_ keeps glibc from returning any of it by itself, as the
# ingest benchmark's setting does.
PROBE = textwrap.dedent(
    """
    import sys, time
    if sys.argv[1] == "tuned":
        from collector.process.allocators import tune_for_server
        tune_for_server()

    def rss_mb():
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) // 1024

    blocks = [bytearray(100_000) for _ in range(2_000)]
    before = rss_mb()
    del blocks
    time.sleep(2.5)
    print(before, rss_mb())
    """
)


def _probe(mode: str) -> tuple[int, int]:
    env = {**os.environ, "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}
    result = subprocess.run(
        [sys.executable, "-c", PROBE, mode], env=env, capture_output=True, text=True, check=True
    )
    before, later = (int(word) for word in result.stdout.split())
    return before, later


@pytest.mark.slow
@pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
    reason="malloc_trim is glibc's",
)
def test_the_server_gives_freed_memory_back_within_a_trim_interval() -> None:
    before, later = _probe("plain")
    assert later > before - 100, "without the trimmer glibc keeps what was freed"

    before, later = _probe("tuned")
    assert later < before - 150


# A DuckDB query that allocates ~300 MB and frees it, then RSS after an idle
# pause, with or without `release_free_memory`. DUCKDB_JE_MALLOC_CONF turns
# jemalloc's own decay off, so nothing but the release can give the pages back.
DUCKDB_PROBE = textwrap.dedent(
    """
    import sys, time
    import duckdb

    def rss_mb():
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) // 1024

    connection = duckdb.connect()
    connection.execute("SET threads = 1")
    # On a busy machine the query passes 2 s and a progress bar joins the output.
    connection.execute("SET enable_progress_bar = false")
    connection.execute(
        "SELECT count(DISTINCT s) FROM "
        "(SELECT repeat('x', 100) || range::VARCHAR AS s FROM range(2000000))"
    ).fetchall()
    after_query = rss_mb()
    time.sleep(0.5)
    if sys.argv[1] == "released":
        from collector.process.allocators import release_free_memory
        release_free_memory()
    print(after_query, rss_mb())
    """
)


def _duckdb_probe(mode: str) -> tuple[int, int]:
    env = {**os.environ, "DUCKDB_JE_MALLOC_CONF": "dirty_decay_ms:-1,muzzy_decay_ms:-1"}
    result = subprocess.run(
        [sys.executable, "-c", DUCKDB_PROBE, mode],
        env=env, capture_output=True, text=True, check=True,
    )
    after_query, later = (int(word) for word in result.stdout.split())
    return after_query, later


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="DuckDB has jemalloc on Linux")
def test_what_a_duckdb_query_freed_goes_back_to_the_system_when_released() -> None:
    after_query, later = _duckdb_probe("kept")
    assert later > after_query - 50, "without a release DuckDB's jemalloc keeps what was freed"

    after_query, later = _duckdb_probe("released")
    assert later < after_query - 200


# The same query, then the peak and RSS right after it with no release at all;
# with `return_duckdb_pages_at_once` jemalloc gives the pages back as it frees them.
AT_ONCE_PROBE = textwrap.dedent(
    """
    import sys
    import duckdb

    def status_mb(field):
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) // 1024

    connection = duckdb.connect()
    connection.execute("SET threads = 1")
    connection.execute("SET enable_progress_bar = false")
    if sys.argv[1] == "at_once":
        from collector.process.allocators import return_duckdb_pages_at_once
        return_duckdb_pages_at_once()
    connection.execute(
        "SELECT count(DISTINCT s) FROM "
        "(SELECT repeat('x', 100) || range::VARCHAR AS s FROM range(2000000))"
    ).fetchall()
    print(status_mb("VmHWM"), status_mb("VmRSS"))
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="DuckDB has jemalloc on Linux")
def test_duckdb_gives_freed_pages_back_at_once_when_told_to() -> None:
    env = {**os.environ, "DUCKDB_JE_MALLOC_CONF": "dirty_decay_ms:-1,muzzy_decay_ms:-1"}

    def peak_and_after(mode: str) -> tuple[int, int]:
        result = subprocess.run(
            [sys.executable, "-c", AT_ONCE_PROBE, mode],
            env=env, capture_output=True, text=True, check=True,
        )
        peak, after = (int(word) for word in result.stdout.split())
        return peak, after

    peak, after = peak_and_after("kept")
    assert after > peak - 50, "with decay off jemalloc keeps what the query freed"

    peak, after = peak_and_after("at_once")
    assert after < peak - 200
