"""Extraction in a child process, away from the receivers' interpreter lock.

Decoding, extracting and building the Arrow rows hold the interpreter lock for a
long time per span, and on the server's lock that starved the receivers under a
burst. The worker only prepares rows; reading the spool, every commit and every
failure path stay in the server. When the worker cannot answer (starting, raised,
died, hung), `collect` answers None and the extractor prepares the same records
itself, so the worker changes how fast a run is prepared, never what is stored. The
child imports no DuckDB.

The child is `python -m collector.intake.worker`, talking over its stdin
and stdout. Each message is a count of parts, each part's length (8 bytes
little-endian each) and the parts. A request's parts are one byte per export
(1: packed, a zstd frame as spooled; 0: protobuf bytes), then the exports,
which the child decompresses: they cross the pipe at a fraction of their
size, and the server never decompresses them. A reply's parts are a status
byte, then either an error message or a PreparedWrite pickled with its Arrow
buffers as parts of their own. The child ignores SIGINT and SIGTERM (the
server decides when it stops: after the extractor's drain, by closing the
child's stdin), and a server killed with SIGKILL closes that pipe too, so no
worker outlives its server.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from collector.encode.exports import batch_from_export
from collector.encode.rows import PreparedWrite, prepare_write
from collector.intake.spool import Export, Packed, export_bytes, payload, write_all
from collector.process.allocators import release_free_memory, tune_for_worker
from collector.process.gc_settings import collect_less_often, freeze_startup

logger = logging.getLogger(__name__)

# A worker that keeps dying (killed for memory, a broken installation) is
# given up after this many restarts; the extractor then prepares every run.
MAX_RESTARTS: Final = 3
# A run takes well under a second; one that takes this long is a hang.
REPLY_TIMEOUT_SECONDS: Final = 120.0
_LENGTH: Final = struct.Struct("<Q")
_READY: Final = b"R"
_PREPARED: Final = 0
_FAILED: Final = 1
# Where the `collector` package is, so the child imports this same copy.
_PACKAGE_ROOT: Final = str(Path(__file__).resolve().parent.parent)


class WorkerGone(Exception):
    """The child closed its pipe or did not answer in time."""


class ExtractionWorker:
    """One child process that prepares runs of spooled exports; used by one thread."""

    def __init__(self) -> None:
        self._restarts = 0
        self._child: subprocess.Popen[bytes] | None = _spawn()
        # The child was stopped for having nothing to do (`rest`), not given up.
        self._resting = False
        self._ready = False
        # A run was sent and its reply not yet read.
        self._submitted = False

    @property
    def pid(self) -> int | None:
        """The child's process id, while there is one."""
        return None if self._child is None else self._child.pid

    def prepare(self, exports: Sequence[Export]) -> PreparedWrite | None:
        """The rows of these exports, or None if the caller must prepare them itself."""
        return self.collect() if self.submit(exports) else None

    def submit(self, exports: Sequence[Export]) -> bool:
        """Start preparing these exports; False if the caller must prepare them itself.
        One run at a time: `collect` its rows before submitting the next."""
        assert not self._submitted, "collect the run submitted before"
        if self._resting:
            self._resting = False
            self._child = _spawn()
        child = self._child
        if child is None or not self._started(child):
            return False
        try:
            _send(child, exports)
        except OSError as exc:
            self._restart(f"{exc}")
            return False
        self._submitted = True
        return True

    def collect(self) -> PreparedWrite | None:
        """The rows of the run last submitted, or None if the caller must prepare it."""
        assert self._submitted and self._child is not None, "nothing was submitted"
        self._submitted = False
        try:
            status, parts = _receive(self._child, REPLY_TIMEOUT_SECONDS)
        except (OSError, WorkerGone) as exc:
            self._restart(f"{exc}")
            return None
        if status == _PREPARED:
            data, *buffers = parts
            prepared: PreparedWrite = pickle.loads(data, buffers=buffers)
            return prepared
        # A bug meeting hostile input, or an export that no longer decodes:
        # the extractor's own path says which record, and quarantines it.
        logger.debug("the extraction worker could not prepare a run: %s",
                     parts[0].decode(errors="replace"))
        return None

    def rest(self) -> None:
        """Stop the child while there is nothing to prepare, since an idle child still
        holds its imports and arenas; `submit` starts another (a fraction of a
        second of CPU, during which the extractor prepares runs itself)."""
        if self._child is None or self._submitted:
            return
        _stop(self._child)
        self._child = None
        self._ready = False
        self._resting = True

    def close(self) -> None:
        # A run still being prepared is dropped: it stays in the spool.
        if self._child is not None:
            _stop(self._child)
            self._child = None
        self._resting = False
        self._submitted = False

    def _started(self, child: subprocess.Popen[bytes]) -> bool:
        # Starting takes about a second (imports); runs prepared meanwhile are
        # prepared in the server rather than wait for it.
        if self._ready:
            return True
        assert child.stdout is not None
        if not select.select([child.stdout], [], [], 0)[0]:
            return False
        if os.read(child.stdout.fileno(), 1) != _READY:
            self._restart("it did not start")
            return False
        self._ready = True
        return True

    def _restart(self, why: str) -> None:
        assert self._child is not None
        _stop(self._child)
        self._ready = False
        self._submitted = False
        if self._restarts >= MAX_RESTARTS:
            logger.error(
                "the extraction worker stopped %d times (last: %s); extracting in the "
                "server process from now on", self._restarts + 1, why,
            )
            self._child = None
            return
        self._restarts += 1
        logger.warning("the extraction worker stopped (%s); restarting it", why)
        self._child = _spawn()


def _spawn() -> subprocess.Popen[bytes]:
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [_PACKAGE_ROOT, path]))}
    return subprocess.Popen(
        [sys.executable, "-m", "collector.intake.worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )


def _stop(child: subprocess.Popen[bytes]) -> None:
    """Close the child's stdin (it exits at end of file); kill it if it does not."""
    for pipe in (child.stdin, child.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    try:
        child.wait(timeout=5)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def _send(child: subprocess.Popen[bytes], exports: Sequence[Export]) -> None:
    assert child.stdin is not None
    packed = bytes(isinstance(export, Packed) for export in exports)
    _write_message(child.stdin.fileno(), [packed, *map(payload, exports)])


def _receive(child: subprocess.Popen[bytes], timeout: float) -> tuple[int, list[bytearray]]:
    assert child.stdout is not None
    status, *parts = _read_message(child.stdout.fileno(), timeout)
    return status[0], parts


def _write_message(descriptor: int, parts: list[bytes] | list[memoryview]) -> None:
    lengths = struct.pack(f"<{len(parts) + 1}Q", len(parts), *(len(part) for part in parts))
    write_all(descriptor, [lengths, *parts])


def _read_message(descriptor: int, timeout: float | None) -> list[bytearray]:
    (count,) = _LENGTH.unpack(_read_exactly(descriptor, _LENGTH.size, timeout))
    lengths = struct.unpack(f"<{count}Q", _read_exactly(descriptor, _LENGTH.size * count, timeout))
    return [_read_exactly(descriptor, length, timeout) for length in lengths]


def _read_exactly(descriptor: int, size: int, timeout: float | None) -> bytearray:
    buffer = bytearray(size)
    view = memoryview(buffer)
    done = 0
    while done < size:
        if timeout is not None and not select.select([descriptor], [], [], timeout)[0]:
            raise WorkerGone(f"no reply in {timeout:.0f} s")
        count = os.readv(descriptor, [view[done:]])
        if count == 0:
            raise WorkerGone("it exited")
        done += count
    return buffer


# -- the child ----------------------------------------------------------------


def prepare_exports(bodies: list[bytes]) -> PreparedWrite:
    """The rows of these export requests, as one write."""
    return prepare_write([batch_from_export(body) for body in bodies])


def _serve(requests: int, replies: int) -> None:
    write_all(replies, [_READY])
    while _answer_one(requests, replies):
        # Without a trim the child would keep the pages of its largest run for good.
        release_free_memory()


def _answer_one(requests: int, replies: int) -> bool:
    """Prepare one request and reply; False once the server closed the pipe."""
    try:
        packed, *parts = _read_message(requests, None)
    except WorkerGone:
        return False  # stopping, or the server is gone
    try:
        bodies = [
            export_bytes(Packed(bytes(part)) if is_packed else bytes(part))
            for is_packed, part in zip(packed, parts, strict=True)
        ]
        del parts
        rows = prepare_exports(bodies)
    except Exception as exc:
        failure = f"{type(exc).__name__}: {exc}".encode()
        _write_message(replies, [bytes([_FAILED]), failure])
        return True
    del bodies
    # The tables' buffers go out as they are (pickle's out-of-band buffers),
    # so neither side holds a second copy of them.
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(rows, protocol=5, buffer_callback=buffers.append)
    _write_message(replies, [memoryview(bytes([_PREPARED])), memoryview(data),
                             *(buffer.raw() for buffer in buffers)])
    return True


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    tune_for_worker()
    freeze_startup()
    collect_less_often()
    # The replies get stdout's pipe to themselves: a stray print would break the protocol.
    replies = os.dup(1)
    os.dup2(2, 1)
    with contextlib.suppress(WorkerGone, BrokenPipeError):  # the server went away mid-request
        _serve(0, replies)


if __name__ == "__main__":
    main()
