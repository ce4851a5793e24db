"""Memory allocator settings for the long-running server process.

Measured with bench/bench_ingest.py (four exporters sending ~1 MB requests):
peak RSS was ~640 MB with the defaults, most of it memory freed but not given
back. Two allocators keep it:

- glibc gives every thread that mallocs concurrently an arena of its own (up to
  8 per core), and each arena holds its freed pages. The gRPC workers, the
  writer and the replayer are a dozen such threads. Two arenas are enough for
  two cores and keep the freed pages in one place, where they are reused.
- pyarrow's default pool (jemalloc or mimalloc) keeps freed memory for reuse as
  well, on top of glibc. The store builds short-lived Arrow tables for every
  commit, so the system allocator, whose freed memory the arenas reuse, is used.
- Even so, glibc returns freed memory to the system only from the top of an
  arena, and only past its trim threshold (which grows with the largest block
  freed, or is fixed by MALLOC_TRIM_THRESHOLD_). After a burst the arenas held
  ~100 MB free of ~160 MB. A daemon thread calls malloc_trim once a second,
  which also releases free pages inside the arenas.

Both settings must be made before the threads they affect first allocate, so
`serve` calls `tune_for_server` first thing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys
import threading
import time
from typing import Final

import pyarrow as pa

logger = logging.getLogger(__name__)

# <malloc.h>: mallopt(M_ARENA_MAX, n); glibc only, so looked up at run time.
_M_ARENA_MAX: Final = -8
SERVER_ARENAS: Final = 2
TRIM_INTERVAL_SECONDS: Final = 1.0


def tune_for_server() -> None:
    """Fewer glibc arenas, freed memory returned, the system allocator for Arrow.

    Each part is a no-op where the C library does not support it.
    """
    libc = _glibc()
    if libc is not None:
        _limit_arenas(libc, SERVER_ARENAS)
        _start_trimming(libc, TRIM_INTERVAL_SECONDS)
    pa.set_memory_pool(pa.system_memory_pool())


def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
        libc.mallopt.restype = ctypes.c_int
        libc.malloc_trim.argtypes = (ctypes.c_size_t,)
        libc.malloc_trim.restype = ctypes.c_int
    except (OSError, AttributeError):  # musl has neither mallopt nor malloc_trim
        return None
    return libc


def _limit_arenas(libc: ctypes.CDLL, arenas: int) -> None:
    if libc.mallopt(_M_ARENA_MAX, arenas) != 1:
        logger.debug("mallopt(M_ARENA_MAX) was refused; keeping glibc's arena count")


def _start_trimming(libc: ctypes.CDLL, interval_seconds: float) -> None:
    def trim_forever() -> None:
        # ctypes releases the interpreter lock for the call; a trim of a few
        # hundred MB of arenas takes a millisecond or two.
        while True:
            time.sleep(interval_seconds)
            libc.malloc_trim(0)

    threading.Thread(target=trim_forever, name="statetrail-malloc-trim", daemon=True).start()
