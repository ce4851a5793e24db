"""SQL about the DuckDB database as a whole: its settings, checkpoints, and how much it holds."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb

from collector.private_files import tighten

# How DuckDB prints a size setting ("122.0 MiB"): powers of 1024.
_PRINTED_SIZE = re.compile(r"([0-9.]+)\s*(bytes|KiB|MiB|GiB|TiB)")
WAL_SUFFIX = ".wal"
# DuckDB's default temp_directory, where it spills what does not fit in memory.
TEMP_SUFFIX = ".tmp"
_UNIT_BYTES = {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def connect(
    path: str,
    *,
    read_only: bool,
    memory_limit: str | None,
    threads: int | None,
    checkpoint_threshold: str | None,
) -> duckdb.DuckDBPyConnection:
    """A connection to the file with this process's settings; None keeps DuckDB's default.

    `checkpoint_threshold` is None for a read-only connection, which never checkpoints.
    The memory limit and threads come with the connection rather than a SET after it:
    opening replays a leftover WAL into memory, at DuckDB's default limit (80% of RAM)
    unless given here.
    """
    settings: dict[str, str | bool | int | float | list[str]] = {}
    if memory_limit is not None:
        settings["memory_limit"] = memory_limit
    if threads is not None:
        settings["threads"] = threads
    if not read_only:
        # Files an older version created readable by every local user; new
        # ones are owner-only by the umask the commands run under.
        for own in (path, path + WAL_SUFFIX, path + TEMP_SUFFIX):
            tighten(Path(own))
    connection = duckdb.connect(path, read_only=read_only, config=settings)
    # DuckDB's allocator keeps what a query freed for reuse, outside memory_limit;
    # replay's queries grew serve's RSS by that much through a catch-up.
    connection.execute("SET allocator_flush_threshold = '8MB'")
    connection.execute("SET allocator_background_threads = true")
    # The Python client draws a progress bar on stdout for a query past 2 s on
    # a connection (its cursors start without one): a long migration or
    # checkpoint at start-up would draw it into serve's log.
    connection.execute("SET enable_progress_bar = false")
    if checkpoint_threshold is not None:
        connection.execute("SET checkpoint_threshold = ?", [checkpoint_threshold])
    return connection


def set_memory_limit(cursor: duckdb.DuckDBPyConnection, limit: str) -> None:
    """Lowering the limit evicts cached blocks; DuckDB refuses if it cannot free enough."""
    cursor.execute("SET memory_limit = ?", [limit])


def memory_limit(cursor: duckdb.DuckDBPyConnection) -> str:
    """DuckDB's memory limit now, as DuckDB prints it ("122.0 MiB")."""
    row = cursor.execute("SELECT current_setting('memory_limit')").fetchone()
    return str(row[0]) if row else ""


def checkpoint_threshold_bytes(cursor: duckdb.DuckDBPyConnection) -> int | None:
    """The WAL size at which DuckDB checkpoints on commit, as it reads its setting."""
    row = cursor.execute("SELECT current_setting('checkpoint_threshold')").fetchone()
    printed = _PRINTED_SIZE.fullmatch(str(row[0]).strip()) if row else None
    if printed is None:
        return None
    return int(float(printed[1]) * _UNIT_BYTES[printed[2]])


def checkpoint(cursor: duckdb.DuckDBPyConnection) -> None:
    """Fold the write-ahead log into the file."""
    cursor.execute("CHECKPOINT")


def counts(cursor: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """How many spans, executions and transitions are stored."""
    row = cursor.execute(
        "SELECT (SELECT count(*) FROM spans), (SELECT count(*) FROM executions),"
        " (SELECT count(*) FROM transitions)"
    ).fetchone()
    assert row is not None
    return {"spans": row[0], "executions": row[1], "transitions": row[2]}
