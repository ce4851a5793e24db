"""Hostile slow HTTP clients, over raw sockets, for the slow-client tests and bench,
and the in-process server they are tried against.

`SlowClients` opens connections (from chosen loopback source addresses) and
then, once a step, sends each still-open one a little more: a byte of an
upload's body (`slow_bodies`) or one more header line (`slow_heads`). It
records when the server answered or closed each connection, and what it
answered. Every loop here is bounded in steps and in time.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.applications import Starlette

from collector.cli.main import _parser, http_server_settings
from collector.config import serve_config
from collector.receive.admission import Admission
from studio.app import create_app
from studio.services import Services
from support.servers import free_port


@dataclass
class _Connection:
    sock: socket.socket
    opened: float
    # Seconds from opening until the server answered or closed; None while open.
    held_seconds: float | None = None
    answer: bytes = b""


@dataclass
class SlowClients:
    """Connections that each send `trickle` once a step until the server ends them."""

    trickle: bytes
    connections: list[_Connection] = field(default_factory=list)

    @classmethod
    def open(
        cls,
        server: tuple[str, int],
        count: int,
        first_bytes: bytes,
        trickle: bytes,
        sources: Sequence[str] = ("127.0.0.1",),
    ) -> SlowClients:
        """`count` connections spread over the `sources` addresses, each sent `first_bytes`."""
        clients = cls(trickle)
        for index in range(count):
            sock = socket.socket()
            sock.bind((sources[index % len(sources)], 0))
            sock.settimeout(10)
            sock.connect(server)
            sock.sendall(first_bytes)
            sock.setblocking(False)
            clients.connections.append(_Connection(sock, time.monotonic()))
        return clients

    @property
    def open_count(self) -> int:
        return sum(c.held_seconds is None for c in self.connections)

    def held_seconds(self) -> list[float]:
        """How long the server held each connection; open ones count until now."""
        now = time.monotonic()
        return [
            c.held_seconds if c.held_seconds is not None else now - c.opened
            for c in self.connections
        ]

    def answers(self) -> list[bytes]:
        return [c.answer for c in self.connections]

    def run(
        self,
        seconds: float,
        step_seconds: float = 1.0,
        until: Callable[[SlowClients], bool] = lambda clients: clients.open_count == 0,
    ) -> None:
        """Trickle once a step for at most `seconds`, or until `until` holds."""
        deadline = time.monotonic() + seconds
        next_step = time.monotonic()
        while time.monotonic() < deadline and not until(self):
            self._collect(min(step_seconds, max(0.0, next_step - time.monotonic())))
            if time.monotonic() >= next_step:
                self._send_step()
                next_step += step_seconds

    def close(self) -> None:
        for connection in self.connections:
            connection.sock.close()

    def _send_step(self) -> None:
        for connection in self.connections:
            if connection.held_seconds is None:
                try:
                    connection.sock.send(self.trickle)
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    self._ended(connection)

    def _collect(self, wait: float) -> None:
        """Read what the server sent within `wait` seconds; note the ended connections."""
        watched = [c.sock for c in self.connections if c.held_seconds is None]
        if not watched:
            time.sleep(wait)
            return
        readable, _, _ = select.select(watched, [], [], wait)
        for connection in self.connections:
            if connection.sock in readable:
                try:
                    data = connection.sock.recv(65536)
                except OSError:
                    data = b""
                connection.answer += data
                if not data or connection.answer.startswith(b"HTTP/"):
                    self._ended(connection)

    def _ended(self, connection: _Connection) -> None:
        if connection.held_seconds is None:
            connection.held_seconds = time.monotonic() - connection.opened


@dataclass
class Served:
    http_port: int
    grpc_port: int
    app: Starlette

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def admission(self) -> Admission:
        services: Services = self.app.state.services
        return services.write_side.admission


@contextmanager
def serve_in_process(tmp_path: Path, *flags: str) -> Iterator[Served]:
    """`statetrail serve` with these flags, in this process, with its uvicorn settings,
    so that a test can read its admission counters."""
    http_port, grpc_port = free_port(), free_port()
    args = _parser({}).parse_args([
        "serve", "--db", str(tmp_path / "served.duckdb"),
        "--http-port", str(http_port), "--grpc-port", str(grpc_port), *flags,
    ])  # fmt: skip
    config = serve_config(args)
    app = create_app(config)
    settings = http_server_settings(config)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", **settings))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield Served(http_port, grpc_port, app)
    finally:
        server.should_exit = True
        thread.join(timeout=60)


def upload_head(declared_length: int, headers: Iterable[tuple[str, str]] = ()) -> bytes:
    """The head of a protobuf OTLP/HTTP upload that declares `declared_length` bytes."""
    lines = [
        "POST /v1/traces HTTP/1.1",
        "Host: statetrail",
        "Content-Type: application/x-protobuf",
        f"Content-Length: {declared_length}",
        *(f"{name}: {value}" for name, value in headers),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


# A slowloris: a request line, then one more header line a step, never the blank line.
SLOW_HEAD_START = b"GET /healthz HTTP/1.1\r\nHost: statetrail\r\n"
SLOW_HEAD_LINE = b"X-Slow: 1\r\n"


def real_spans(count: int = 3) -> list[ReadableSpan]:
    """Spans made by the OpenTelemetry SDK, for the real exporters to send."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("statetrail-slow-clients")
    for index in range(count):
        with tracer.start_as_current_span(f"legitimate-{index}"):
            pass
    provider.shutdown()
    return list(memory.get_finished_spans())
