"""Memory allocator settings for the long-running server process.

Measured with bench/bench_ingest.py (four exporters sending ~1 MB requests):
peak RSS was ~640 MB with the defaults, most of it memory freed but not given
back. Three allocators keep it:

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
- DuckDB's Linux builds bring their own jemalloc, which keeps freed pages for
  a while (dirty, then "muzzy": still resident until the kernel needs them),
  and, without its background threads (off by default; the store turns them
  on), indefinitely once allocations stop: a connection held 300 MB that a
  finished query had freed. In bench_ingest a purge of its arenas at SIGTERM
  gave back 74 MB. The same thread purges them once a second: the server then
  held ~20 MB less at the end of replay (356 against 375 MiB). Its peaks come
  at checkpoints, bounded by DuckDB's memory limit (config.py), and did not
  move measurably: 347-391 MiB in five runs with the purge, 367 in one
  without (DuckDB at a 96 MB limit in all six). `release_free_memory` runs
  once more before the closing checkpoint.
- Those peaks were pages freed within the second between purges. Sampling
  jemalloc's own counts every 0.25 s through bench_ingest (December 2026) put
  its resident pages up to 143 MB above what DuckDB held allocated: a
  checkpoint allocates ~40 MB past the cache's limit, frees it and the
  evicted blocks, and allocates again, so its freed pages piled up until the
  next purge (the server at 370-373 MB in those moments; above 355 MB in 50
  samples). With jemalloc's decay set to 0 in the server (pages freed are
  given back at once) the gap stayed within 11 MB and 3 samples passed 355 MB;
  bench_ingest's peak was 388 and 386 MB in the next two runs (402 before).
  The cost is a system call per freed extent: the server's CPU a span was
  109-112 us in those runs against 76 before, on days when the baseline ran
  25-35% slower, so most of that rise is the machine's.

The arena settings must be made before the threads they affect first
allocate, so `serve` calls `tune_for_server` first thing.
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
    """One glibc arena (one thread allocates) and the system allocator for Arrow.

    For the extraction worker (collector/intake/worker.py), which builds
    the Arrow tables of every commit and hands them back to the server; it
    frees memory itself after each run, so it needs no releasing thread.
    """
    _tune(WORKER_ARENAS)


def _tune(arenas: int) -> None:
    libc = _glibc()
    if libc is not None:
        _limit_arenas(libc, arenas)
    pa.set_memory_pool(pa.system_memory_pool())


def release_free_memory() -> None:
    """Give the system back what glibc and DuckDB's jemalloc hold freed.

    Safe from any thread, at any time; each half is a no-op where its
    allocator is not there. ctypes releases the interpreter lock for each
    call, and each takes a millisecond or two.
    """
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
    # Only where DuckDB is loaded: loading it to purge would cost the
    # extraction worker ~8 MB it never uses.
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
    """Have DuckDB's jemalloc give pages back to the system as soon as they are freed.

    jemalloc's decay times (DuckDB's build: one second dirty, then one second
    "muzzy", still resident) become 0 for its arenas now and for those it
    creates later. It then returns freed memory at the cost of a system call
    per freed extent, which is what bounds the server's RSS at checkpoints.
    Loads DuckDB: meant for the processes that use it.
    """
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
    """jemalloc's control function inside DuckDB's extension module, if it has one.

    DuckDB links jemalloc statically on Linux and exports it with a
    `duckdb_je_` prefix; other builds (macOS, Windows, musl) use the system
    allocator, which `malloc_trim` covers where there is one.
    """
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
