"""Starting the benches' servers: free loopback ports, waiting for a listener, the environment,
and the memory of a server's child processes.

Shared by bench_ingest.py and bench_studio_load.py. Ports come from outside Linux's
ephemeral range, as in tests/support/servers.py: a port the kernel handed out with bind(0)
can be taken by any outgoing connection before the server binds it, which once failed CI
with "address already in use".
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Final

LOOPBACK: Final = "127.0.0.1"
# Below Linux's ephemeral range (32768-60999); the same range as tests/support/servers.py.
PORT_RANGE: Final = (20000, 32000)
STARTUP_TIMEOUT_SECONDS: Final = 60.0

_MIB: Final = 1024 * 1024
# Same values for every server; above every request buffer, below glibc's 32 MiB cap.
MALLOC_ENV: Final[dict[str, str]] = {
    "MALLOC_MMAP_THRESHOLD_": str(16 * _MIB),
    "MALLOC_TRIM_THRESHOLD_": str(128 * _MIB),
}


def free_port() -> int:
    """A loopback port that is free now and outside the ephemeral range."""
    while True:
        port = random.randint(*PORT_RANGE)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((LOOPBACK, port))
            except OSError:
                continue
            return port


def wait_for_port(process: subprocess.Popen[bytes], port: int) -> None:
    """Return once something listens on the loopback port; raise if `process` exits first."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode} before listening")
        try:
            with socket.create_connection((LOOPBACK, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listened on {LOOPBACK}:{port} within {STARTUP_TIMEOUT_SECONDS}s")


def server_env(tune_malloc: bool) -> dict[str, str]:
    """This process's environment without MALLOC_* settings, plus MALLOC_ENV if asked."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    if tune_malloc:
        env.update(MALLOC_ENV)
    return env


class ChildMemory:
    """The memory a server and its child processes hold at once, sampled every `interval`.

    `statetrail serve` extracts in a child process (collector/intake/worker.py),
    so the server's VmHWM is not all it holds. A child's private memory (RssAnon) is
    its own; its file-backed pages are mostly the same library files the server maps,
    resident once, and are left out. The kernel keeps no peak of RssAnon, hence the
    sampling: a peak shorter than `interval` can be missed.

    Two figures: `peak_private_mb`, the children's own peak, and `peak_together_mb`,
    the most the server and its children held at the same moment. The server's part
    of the latter is exact: whenever its VmHWM rose between two samples, the new
    high-water mark is added to the larger of the children's two samples around it
    (the children's peak and the server's usually come at different times: the
    child's while the load runs, the server's while it catches up, so adding the two
    peaks counts memory that was never held at once). Each child's own VmHWM (files
    included) is kept too, as an upper bound.

    `server_files_at_peak_mb` is the server's RssFile in the sample where its VmHWM
    last rose: the library files it maps (DuckDB, Arrow, gRPC). How much of them a
    process maps depends on the page cache, not on the process, and moves between runs
    of the same code, so the peak is printed with that part beside it (docs/memory.md's
    log has the figures). `server_peak_at` is when that sample was
    taken (`time.monotonic()`), so a run can say whether the server peaked during the
    load, while storing its backlog or while replaying it.
    """

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self._pid = pid
        self._interval = interval
        self.peak_private_mb = 0.0
        self.peak_hwm_mb = 0.0
        self.peak_together_mb = 0.0
        self.server_files_at_peak_mb = 0.0
        self.server_peak_at: float | None = None
        self._server_hwm_mb = 0.0
        self._last_private_mb = 0.0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()

    def together_with(self, server_hwm_mb: float) -> float:
        """The peak held at once, given the server's VmHWM read at the end (a last
        rise after the final sample is added to the children's last sample)."""
        if server_hwm_mb > self._server_hwm_mb:
            return max(self.peak_together_mb, server_hwm_mb + self._last_private_mb)
        return self.peak_together_mb

    def _watch(self) -> None:
        server_command = _command_line(self._pid)
        while not self._stopping.wait(self._interval):
            private = hwm = 0.0
            for child in _children(self._pid):
                # A child between fork and exec still runs the server's program, and
                # /proc shows the server's memory for it (the extractor starts a worker
                # after every checkpoint), which would count the server's peak twice.
                if _command_line(child) == server_command:
                    continue
                status = _status_kib(child)
                private += status.get("RssAnon", 0) * 1024 / 1_000_000
                hwm += status.get("VmHWM", 0) * 1024 / 1_000_000
            self.peak_private_mb = max(self.peak_private_mb, private)
            self.peak_hwm_mb = max(self.peak_hwm_mb, hwm)
            server = _status_kib(self._pid)
            if server:
                self._note_together(server, private)

    def _note_together(self, server: dict[str, int], private: float) -> None:
        rss = server.get("VmRSS", 0) * 1024 / 1_000_000
        server_hwm = server.get("VmHWM", 0) * 1024 / 1_000_000
        together = rss + private
        if server_hwm > self._server_hwm_mb:
            together = max(together, server_hwm + max(private, self._last_private_mb))
            self._server_hwm_mb = server_hwm
            self.server_files_at_peak_mb = server.get("RssFile", 0) * 1024 / 1_000_000
            self.server_peak_at = time.monotonic()
        self.peak_together_mb = max(self.peak_together_mb, together)
        self._last_private_mb = private


def _children(pid: int) -> set[int]:
    children: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return children
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as listing:
                children.update(int(child) for child in listing.read().split())
        except OSError:
            continue
    return children


def _command_line(pid: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as command:
            return command.read()
    except OSError:
        return None


def _status_kib(pid: int) -> dict[str, int]:
    try:
        with open(f"/proc/{pid}/status") as status:
            lines = status.read().splitlines()
    except OSError:
        return {}
    fields: dict[str, int] = {}
    for line in lines:
        name, _, value = line.partition(":")
        if value.strip().endswith("kB"):
            fields[name] = int(value.split()[0])
    return fields


@dataclass(frozen=True, slots=True)
class CpuSeconds:
    """CPU time (user + system) a server and its child processes had used by some moment."""

    server: float
    children: float

    def __sub__(self, earlier: CpuSeconds) -> CpuSeconds:
        return CpuSeconds(self.server - earlier.server, self.children - earlier.children)


def cpu_seconds(pid: int) -> CpuSeconds:
    """What `pid` and its children have used so far: live children as they stand, and
    those already reaped through the server's own cutime/cstime."""
    server = _stat_ticks(pid)
    children = sum(sum(_stat_ticks(child)[:2]) for child in _children(pid))
    tick = os.sysconf("SC_CLK_TCK")
    return CpuSeconds(sum(server[:2]) / tick, (children + sum(server[2:])) / tick)


def _stat_ticks(pid: int) -> tuple[int, int, int, int]:
    """utime, stime, cutime, cstime from /proc/<pid>/stat (zeros once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            # The command name may hold spaces and parentheses: split after its last ")".
            fields = stat.read().rpartition(")")[2].split()
    except OSError:
        return (0, 0, 0, 0)
    utime, stime, cutime, cstime = (int(value) for value in fields[11:15])
    return utime, stime, cutime, cstime
