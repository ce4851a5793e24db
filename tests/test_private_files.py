"""Private files: whatever statetrail writes beside its database is owner-only, whatever the umask.

A real `statetrail serve` runs under umask 000 (the most open there is), takes
exports over both transports, and every file and directory it made is read
back: 0600 files and 0700 directories, while it runs and after it stops. Files
an older version left open to others are tightened when the server opens them.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
from support.servers import Server, fixture_requests, send_scenario

from collector.intake.spool import QUARANTINE_DIR, START, Spool
from collector.private_files import DIRECTORY_MODE, FILE_MODE


@contextlib.contextmanager
def _umask(mask: int) -> Iterator[None]:
    # A child inherits the umask at fork, so a server started inside runs under it.
    previous = os.umask(mask)
    try:
        yield
    finally:
        os.umask(previous)


def _written(folder: Path) -> list[Path]:
    """Every path below `folder` but the server logs tests/support/servers.py writes there."""
    return [path for path in sorted(folder.rglob("*")) if path.suffix != ".log"]


def _modes(folder: Path) -> dict[str, int]:
    """Every path statetrail wrote below `folder` (relative) with its permission bits."""
    return {
        str(path.relative_to(folder)): stat.S_IMODE(path.lstat().st_mode)
        for path in _written(folder)
    }


def _open_to_others(folder: Path) -> list[str]:
    """Paths below `folder` that are not exactly 0600 (files) or 0700 (directories)."""
    wrong = []
    for path in _written(folder):
        mode = stat.S_IMODE(path.lstat().st_mode)
        expected = DIRECTORY_MODE if path.is_dir() else FILE_MODE
        if mode != expected:
            wrong.append(f"{path.relative_to(folder)}: {mode:o}")
    return wrong


def _shared_folder(tmp_path: Path) -> Path:
    """A folder anyone may write into: only statetrail's own modes protect what it holds."""
    folder = tmp_path / "data"
    folder.mkdir()
    folder.chmod(0o777)
    return folder


def _serve_and_export(server: Server) -> None:
    with _umask(0):
        server.start()
    send_scenario(server.grpc_target, "a_linear")
    body, metadata = fixture_requests("e_exception")[0]
    answer = httpx.post(
        server.url + "/v1/traces", content=body, timeout=30,
        headers={"content-type": "application/x-protobuf", **dict(metadata)},
    )
    assert answer.status_code == 200
    server.wait_replayed()


def test_serve_creates_every_file_owner_only_under_umask_000(tmp_path: Path) -> None:
    folder = _shared_folder(tmp_path)
    db = folder / "statetrail.duckdb"
    server = Server.on_free_ports(db)
    try:
        _serve_and_export(server)
        running = _modes(folder)
        assert {"statetrail.duckdb", "statetrail.duckdb.wal", "statetrail.duckdb.server.json",
                "statetrail.duckdb.spool"} <= set(running), running
        assert any(name.endswith(".seg") for name in running), running
        assert not _open_to_others(folder), _open_to_others(folder)
    finally:
        server.stop()
    assert {"statetrail.duckdb", "statetrail.duckdb.spool"} <= set(_modes(folder))
    assert not _open_to_others(folder), _open_to_others(folder)


def test_serve_tightens_files_an_older_version_left_open(tmp_path: Path) -> None:
    folder = _shared_folder(tmp_path)
    db = folder / "statetrail.duckdb"
    server = Server.on_free_ports(db)
    _serve_and_export(server)
    server.stop()
    for path in _written(folder):
        path.chmod(0o777 if path.is_dir() else 0o666)
    assert len(_open_to_others(folder)) >= 3
    try:
        with _umask(0):
            server.start()
        assert not _open_to_others(folder), _open_to_others(folder)
        assert server.get_json("/api/executions")["executions"]  # the data is all still there
    finally:
        server.stop()


def test_spool_segments_and_quarantine_are_owner_only_under_umask_000(tmp_path: Path) -> None:
    folder = _shared_folder(tmp_path)
    with _umask(0):
        spool = Spool(folder / "spool", START)
        try:
            spool.append([b"not an export request"], received_unix_nano=1)
            (record,), _ = spool.read(START, 1 << 20)
            kept = spool.quarantine(record, "could not be decoded")
        finally:
            spool.close()
    assert kept.read_bytes() == b"not an export request"
    names = set(_modes(folder))
    assert {"spool", f"spool/{QUARANTINE_DIR}", f"spool/{QUARANTINE_DIR}/{kept.name}",
            f"spool/{QUARANTINE_DIR}/{kept.with_suffix('.txt').name}"} <= names, names
    assert not _open_to_others(folder), _open_to_others(folder)

    # What an older version left open is tightened when the spool opens again.
    for path in _written(folder):
        path.chmod(0o777 if path.is_dir() else 0o666)
    Spool(folder / "spool", START).close()
    assert not _open_to_others(folder), _open_to_others(folder)
