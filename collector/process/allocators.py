"""Memory allocator settings for the long-running server process.

Three allocators keep freed memory rather than give it back, and the server frees a
lot in bursts: glibc (one arena per concurrent thread, trimmed only from the top), so
it gets two arenas and a malloc_trim once a second; pyarrow's own pool, replaced by
the system allocator whose freed memory the arenas reuse; and DuckDB's jemalloc, set
to return freed pages at once, since a checkpoint allocates past DuckDB's limit and
frees as it goes. The arena settings must be made before the threads they affect first
allocate, so `serve` calls `tune_for_server` first thing. Measurements: docs/memory.md,
"Allocators".
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Final

import pyarrow as pa

logger = logging.getLogger(__name__)

# <malloc.h>: mallopt(M_ARENA_MAX, n); glibc only, so looked up at run time.
_M_ARENA_MAX: Final = -8
# jemalloc's mallctl index meaning "every arena" (MALLCTL_ARENAS_ALL).
_ALL_ARENAS: Final = 4096
# jemalloc's mallctl(name, oldp, oldlenp, newp, newlen) -> errno, through ctypes.
Mallctl = Callable[..., int]
SERVER_ARENAS: Final = 2
WORKER_ARENAS: Final = 1
TRIM_INTERVAL_SECONDS: Final = 1.0


def tune_for_server() -> None:
    """Fewer glibc arenas, freed memory returned, the system allocator for Arrow.

    Each part is a no-op where the C library does not support it.
    """
    _tune(SERVER_ARENAS)
    return_duckdb_pages_at_once()
    _start_releasing(TRIM_INTERVAL_SECONDS)


def tune_for_worker() -> None:
    """One glibc arena and the system allocator for Arrow, for the extraction worker
    (one allocating thread, which frees memory itself after each run)."""
    _tune(WORKER_ARENAS)


def _tune(arenas: int) -> None:
    libc = _glibc()
    if libc is not None:
        _limit_arenas(libc, arenas)
    pa.set_memory_pool(pa.system_memory_pool())


def release_free_memory() -> None:
    """Give the system back what glibc and DuckDB's jemalloc hold freed; safe from any
    thread, a no-op where an allocator is not there."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
    # Only where DuckDB is loaded: the extraction worker never loads it.
    purge_duckdb = _duckdb_purge() if "_duckdb" in sys.modules else None
    if purge_duckdb is not None:
        purge_duckdb()


@functools.cache
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


def return_duckdb_pages_at_once() -> None:
    """Have DuckDB's jemalloc give pages back as soon as they are freed (decay 0, for its
    arenas now and later): a system call per freed extent bounds RSS at checkpoints.
    Loads DuckDB: meant for the processes that use it."""
    import duckdb  # noqa: F401  (loads the extension module whose allocator this tunes)

    mallctl = _duckdb_mallctl()
    if mallctl is None:
        return
    at_once = ctypes.c_ssize_t(0)
    arenas = _duckdb_arena_count(mallctl)
    for kind in ("dirty", "muzzy"):
        # The default for arenas made later, then each made so far; an index
        # not made yet answers EFAULT and takes the default when it is.
        mallctl(f"arenas.{kind}_decay_ms".encode(), None, None,
                ctypes.byref(at_once), ctypes.sizeof(at_once))
        for index in range(arenas):
            mallctl(f"arena.{index}.{kind}_decay_ms".encode(), None, None,
                    ctypes.byref(at_once), ctypes.sizeof(at_once))


def _duckdb_arena_count(mallctl: Mallctl) -> int:
    count = ctypes.c_uint(0)
    size = ctypes.c_size_t(ctypes.sizeof(count))
    if mallctl(b"arenas.narenas", ctypes.byref(count), ctypes.byref(size), None, 0) != 0:
        return 0
    return count.value


@functools.cache
def _duckdb_purge() -> Callable[[], None] | None:
    """A purge of every arena of the jemalloc inside DuckDB's extension module, if any."""
    mallctl = _duckdb_mallctl()
    if mallctl is None:
        return None
    command = f"arena.{_ALL_ARENAS}.purge".encode()

    def purge() -> None:
        mallctl(command, None, None, None, 0)

    return purge


@functools.cache
def _duckdb_mallctl() -> Mallctl | None:
    """jemalloc's control function inside DuckDB's module (`duckdb_je_`, Linux builds
    only; elsewhere DuckDB uses the system allocator)."""
    try:
        library = ctypes.CDLL(sys.modules["_duckdb"].__file__)
        function = library.duckdb_je_mallctl
    except (KeyError, OSError, AttributeError, TypeError):
        return None
    function.argtypes = (
        ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t
    )
    function.restype = ctypes.c_int
    mallctl: Mallctl = function
    return mallctl


def _limit_arenas(libc: ctypes.CDLL, arenas: int) -> None:
    if libc.mallopt(_M_ARENA_MAX, arenas) != 1:
        logger.debug("mallopt(M_ARENA_MAX) was refused; keeping glibc's arena count")


def _start_releasing(interval_seconds: float) -> None:
    def release_forever() -> None:
        while True:
            time.sleep(interval_seconds)
            release_free_memory()

    threading.Thread(target=release_forever, name="statetrail-release-memory", daemon=True).start()
