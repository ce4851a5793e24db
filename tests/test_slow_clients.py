"""Slow and hostile clients cannot hold the server (docs/limits.md).

The server runs in this process under uvicorn with `statetrail serve`'s own
settings (collector/cli/main.py `http_server_settings`), so the tests can read its
admission counters; the attackers are raw sockets from several loopback
addresses, the legitimate exporters the OpenTelemetry SDK's own.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.sdk.trace.export import SpanExportResult
from support.servers import FIXTURE_API_KEY
from support.slow_clients import (
    SLOW_HEAD_LINE,
    SLOW_HEAD_START,
    Served,
    SlowClients,
    real_spans,
    serve_in_process,
    upload_head,
)

from collector.receive.admission import Admission, InFlight, client_of
from collector.receive.otlp_grpc import peer_address
from collector.receive.otlp_http import UploadPace

KEY = {"x-junjo-api-key": FIXTURE_API_KEY}
ATTACKERS = ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")
# Short limits, so each test stays well under 20 s; the bounds asserted below
# leave the busy CI machine several times these.
HEAD_TIMEOUT = 2.0
UPLOAD_GRACE = 1.0
NOTHING_IN_FLIGHT = InFlight(requests=0, bytes=0, holders=0)


@contextmanager
def serving(tmp_path: Path, *flags: str) -> Iterator[Served]:
    """The server with an ingestion key and this module's short limits, plus `flags`."""
    with serve_in_process(
        tmp_path, "--api-key", FIXTURE_API_KEY, "--head-timeout", str(HEAD_TIMEOUT),
        "--upload-grace", str(UPLOAD_GRACE), *flags,
    ) as served:  # fmt: skip
        yield served


def _wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.02)


def _export_with_real_exporters(served: Served, rounds: int) -> list[SpanExportResult]:
    """Export `rounds` times over gRPC and over HTTP with the SDK's exporters."""
    grpc_exporter = GrpcSpanExporter(
        endpoint=f"127.0.0.1:{served.grpc_port}", insecure=True, headers=KEY, timeout=10
    )
    http_exporter = HttpSpanExporter(
        endpoint=f"{served.url}/v1/traces", headers=KEY, timeout=10
    )
    results = []
    try:
        for _ in range(rounds):
            results.append(grpc_exporter.export(real_spans()))
            results.append(http_exporter.export(real_spans()))
    finally:
        grpc_exporter.shutdown()
        http_exporter.shutdown()  # type: ignore[no-untyped-call]  # untyped in the SDK
    return results


def test_slow_uploads_are_cut_off_while_real_exporters_keep_exporting(tmp_path: Path) -> None:
    # Twice as many trickling uploads as there are slots, from one key, over
    # several addresses and connections; before, 32 of them held every slot
    # for 60 s and every real export meanwhile failed.
    grace = 4.0
    with serving(tmp_path, "--max-inflight", "4", "--upload-grace", str(grace)) as served:
        uploads = SlowClients.open(
            ("127.0.0.1", served.http_port), 8, upload_head(100_000, KEY.items()), b"\x00",
            ATTACKERS,
        )
        trickling = threading.Thread(target=uploads.run, args=(15, 0.5))
        trickling.start()
        try:
            results = _export_with_real_exporters(served, rounds=3)
            still_trickling = uploads.open_count
        finally:
            trickling.join(timeout=60)
            uploads.close()
        assert results == [SpanExportResult.SUCCESS] * 6
        assert still_trickling, "the exports did not overlap the attack; raise the grace"
        assert uploads.open_count == 0, "a trickling upload was never cut off"
        assert max(uploads.held_seconds()) < grace + 8
        assert all(answer.startswith(b"HTTP/1.1 408") for answer in uploads.answers())
        _wait_for(lambda: served.admission.in_flight() == NOTHING_IN_FLIGHT)
        health = httpx.get(f"{served.url}/healthz", timeout=10).json()
        assert health["spans"] == 3 * 2 * 3


def test_a_trickled_upload_holds_no_slot_and_is_408_then_closed(tmp_path: Path) -> None:
    with serving(tmp_path, "--max-inflight", "1") as served:
        uploads = SlowClients.open(
            ("127.0.0.1", served.http_port), 1, upload_head(1000, KEY.items()) + b"\x00" * 10,
            b"",
        )
        try:
            # In transit, it holds the bytes it sent and no slot: the one slot serves others.
            _wait_for(lambda: served.admission.in_flight() == InFlight(0, 10, 1))
            assert _export_with_real_exporters(served, rounds=1) == [SpanExportResult.SUCCESS] * 2
            assert uploads.open_count == 1
            uploads.run(seconds=15, step_seconds=0.2)
            connection = uploads.connections[0]
            assert connection.answer.startswith(b"HTTP/1.1 408"), connection.answer[:200]
            assert b"connection: close" in connection.answer.lower()
            connection.sock.setblocking(True)
            connection.sock.settimeout(10)
            while connection.sock.recv(65536):  # what is left of the answer, then the close
                pass
        finally:
            uploads.close()
        _wait_for(lambda: served.admission.in_flight() == NOTHING_IN_FLIGHT)


def test_slow_heads_are_closed_at_the_head_timeout(tmp_path: Path) -> None:
    with serving(tmp_path) as served:
        heads = SlowClients.open(
            ("127.0.0.1", served.http_port), 40, SLOW_HEAD_START, SLOW_HEAD_LINE, ATTACKERS
        )
        # Meanwhile the port serves everyone else.
        response = httpx.get(f"{served.url}/healthz", timeout=10)
        assert response.status_code == 200
        heads.run(seconds=15, step_seconds=0.5)
        heads.close()
        assert heads.open_count == 0, "a slow head was never cut off"
        held = heads.held_seconds()
        assert min(held) >= HEAD_TIMEOUT * 0.9
        assert max(held) < HEAD_TIMEOUT + 8
        assert all(answer.startswith(b"HTTP/1.1 408") for answer in heads.answers())


def test_a_keep_alive_connection_gets_a_new_head_deadline_after_each_answer(
    tmp_path: Path,
) -> None:
    # uvicorn's keep-alive timer restarts with every byte; the head deadline does not.
    with serving(tmp_path, "--idle-timeout", "30") as served, socket.create_connection(
        ("127.0.0.1", served.http_port), timeout=10
    ) as connection:
        for _ in range(2):  # served twice on one connection, each time in time
            connection.sendall(SLOW_HEAD_START + b"\r\n")
            assert _read_answer(connection).startswith(b"HTTP/1.1 200")
        answered = time.monotonic()
        connection.sendall(SLOW_HEAD_START)
        late = b""
        for _ in range(60):  # a header line every 0.25 s, for 15 s at most
            try:
                connection.sendall(SLOW_HEAD_LINE)
                readable, _, _ = select.select([connection], [], [], 0.25)
                if readable and not (chunk := connection.recv(65536)):
                    break
                late += chunk if readable else b""
            except OSError:  # reset: the server closed it while lines were in flight
                break
        held = time.monotonic() - answered
    assert HEAD_TIMEOUT * 0.9 <= held < HEAD_TIMEOUT + 8
    assert late.startswith(b"HTTP/1.1 408"), late[:200]


def _read_answer(connection: socket.socket) -> bytes:
    """One answer with a Content-Length body, read from a blocking socket."""
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += connection.recv(65536)
    head, _, body = answer.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1]) for line in head.lower().split(b"\r\n")
        if line.startswith(b"content-length:")
    )
    while len(body) < length:
        body += connection.recv(65536)
    return answer


def test_upload_pace_cuts_trickles_at_the_grace_and_never_a_full_speed_body() -> None:
    pace = UploadPace(grace_seconds=5, min_bytes_per_second=16 * 1024, max_seconds=60)
    # One byte a second: the deadline hardly moves past the grace.
    assert pace.deadline(0, last_arrival=4, received=4) == pytest.approx(5, abs=0.001)
    # A body at 10 MB/s (64 MiB in under 7 s) is always ahead of its deadline.
    for second in range(7):
        assert pace.deadline(0, last_arrival=second, received=second * 10**7) > second + 1
    # A body arriving at the minimum rate keeps earning time, up to the cap.
    assert pace.deadline(0, last_arrival=10, received=10 * 16 * 1024) == 15
    assert pace.deadline(0, last_arrival=59, received=64 * 2**20) == 60
    # A pause longer than the grace ends it, however much arrived before.
    assert pace.deadline(0, last_arrival=1, received=2**20) == 6


def test_one_address_or_one_key_holds_at_most_its_share_of_the_bytes() -> None:
    admission = Admission(max_requests=32, max_bytes=1000, client_share=0.5)
    attacker = client_of("10.0.0.1", "key-a")
    admission.open_upload(attacker)
    admission.open_upload(attacker)
    assert admission.try_grow(450, attacker)
    assert not admission.try_grow(100, attacker)  # its address and its key: 550 of 500
    # The same key from another address: refused by the key's share.
    elsewhere = client_of("10.0.0.2", "key-a")
    assert not admission.try_enter(100, elsewhere)
    # Everyone else still has the rest, over either transport.
    other = client_of("10.0.0.3", "key-b")
    assert admission.try_enter(400, other)
    admission.leave(400, other)
    admission.leave(450, attacker, slot=False)
    admission.leave(0, attacker, slot=False)
    assert admission.in_flight() == NOTHING_IN_FLIGHT
    # A client's only export may still be as large as the receive limit allows.
    assert admission.try_enter(900, attacker)
    admission.leave(900, attacker)
    assert admission.in_flight() == NOTHING_IN_FLIGHT


def test_grpc_peers_are_counted_by_address() -> None:
    assert peer_address("ipv4:10.0.0.5:4711") == "10.0.0.5"
    assert peer_address("ipv6:[::1]:4711") == "::1"
    assert peer_address("unix:/run/statetrail.sock") == "unix:/run/statetrail.sock"
