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

Both must be set before the threads they affect first allocate, so `serve` calls
`tune_for_server` first thing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

import pyarrow as pa

logger = logging.getLogger(__name__)

# <malloc.h>: mallopt(M_ARENA_MAX, n); glibc only, so looked up at run time.
_M_ARENA_MAX = -8
SERVER_ARENAS = 2


def tune_for_server() -> None:
    """Fewer glibc arenas and the system allocator for Arrow; a no-op where unsupported."""
    _limit_glibc_arenas(SERVER_ARENAS)
    pa.set_memory_pool(pa.system_memory_pool())


def _limit_glibc_arenas(arenas: int) -> None:
    if not sys.platform.startswith("linux"):
        return
    name = ctypes.util.find_library("c")
    if name is None:
        return
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl has no mallopt
        return
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    if mallopt(_M_ARENA_MAX, arenas) != 1:
        logger.debug("mallopt(M_ARENA_MAX) was refused; keeping glibc's arena count")
