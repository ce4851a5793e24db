"""The intake spool and its extractor: durable records, torn tails, exactly-once storage.

Everything is real: segment files on disk, a DuckDB file, the captured fixture
requests. "Crashes" are made the way they look on disk afterwards: a record cut
in the middle, a flipped byte, a spool never closed.
"""

from __future__ import annotations

import logging
import random
import struct
import threading
import time
import zlib
from pathlib import Path

import grpc
import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Route
from support.polling import wait_until
from support.servers import export_raw, fixture_requests, free_port, serving_in_thread

from collector.decode.otlp import parse_request
from collector.intake import extractor as extractor_module
from collector.intake import spool as spool_module
from collector.intake.ingest import Ingestor, IngestorBusy
from collector.intake.sink import RetryLater
from collector.intake.spool import START, Packed, Position, Spool, SpoolError, export_bytes, pack
from collector.receive.admission import Admission
from collector.receive.auth import KeyChecker
from collector.receive.otlp_grpc import GrpcReceiver, TraceExportHandler
from collector.receive.otlp_http import HttpTraceReceiver
from collector.store import Store

HEADER_BYTES = 16


def _bodies(count: int, size: int = 100) -> list[bytes]:
    # Random, so that compression leaves them their size and segments fill as planned.
    return [random.Random(n).randbytes(size + n) for n in range(count)]


def _read_all(spool: Spool, position: Position = START) -> list[bytes]:
    bodies: list[bytes] = []
    while True:
        records, position = spool.read(position, 1 << 20)
        if not records:
            return bodies
        bodies.extend(export_bytes(record.export) for record in records)


def _segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.seg"))


def test_records_round_trip_across_segments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spool_module, "SEGMENT_BYTES", 1000)
    spool = Spool(tmp_path / "spool", START)
    written = _bodies(30)
    ends = [end for body in written for end in spool.append([body], 1)]
    assert len(_segments(tmp_path / "spool")) > 3
    assert ends == sorted(ends) and len(set(ends)) == len(ends)
    assert _read_all(spool) == written
    on_disk = sum(segment.stat().st_size for segment in _segments(tmp_path / "spool"))
    assert spool.backlog_bytes(START) == on_disk
    assert on_disk == sum(HEADER_BYTES + len(pack(b).frame) for b in written)
    # Reading from any record's end gives exactly the records after it.
    assert _read_all(spool, ends[11]) == written[12:]
    assert spool.backlog_bytes(ends[-1]) == 0
    spool.close()


def test_a_torn_tail_is_cut_on_open_and_appends_continue(tmp_path: Path) -> None:
    directory = tmp_path / "spool"
    spool = Spool(directory, START)
    written = _bodies(3)
    spool.append(written, 7)
    spool.close()
    (segment,) = _segments(directory)
    whole = segment.stat().st_size
    with segment.open("ab") as file:  # a crash in the middle of the next append
        file.write(b"\x40\x00\x00\x00" + b"\x00" * 20)
    reopened = Spool(directory, START)
    assert segment.stat().st_size == whole
    reopened.append([b"after the crash"], 8)
    assert _read_all(reopened) == [*written, b"after the crash"]
    reopened.close()


def test_a_corrupt_record_skips_its_segment_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(spool_module, "SEGMENT_BYTES", 300)
    spool = Spool(tmp_path / "spool", START)
    written = _bodies(8)
    for body in written:
        spool.append([body], 1)
    first = _segments(tmp_path / "spool")[0]
    data = bytearray(first.read_bytes())
    data[HEADER_BYTES + 5] ^= 0xFF  # inside the first record's body
    first.write_bytes(bytes(data))
    survivors = _read_all(spool)
    in_first = sum(
        1 for record in spool.read(START, 1 << 20)[0] if record.start.segment == 1
    )
    assert in_first == 0
    assert survivors == written[len(written) - len(survivors):]
    assert 0 < len(survivors) < len(written)
    assert "corrupt" in caplog.text
    spool.close()


def test_release_and_reopen_drop_processed_segments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spool_module, "SEGMENT_BYTES", 500)
    directory = tmp_path / "spool"
    spool = Spool(directory, START)
    ends = [end for body in _bodies(20) for end in spool.append([body], 1)]
    before = len(_segments(directory))
    spool.release(ends[9])
    assert len(_segments(directory)) < before
    assert _read_all(spool, ends[9]) == _bodies(20)[10:]
    spool.close()
    reopened = Spool(directory, ends[14])
    assert min(int(p.stem) for p in _segments(directory)) == ends[14].segment
    assert _read_all(reopened, ends[14]) == _bodies(20)[15:]
    reopened.close()


def test_a_failed_append_leaves_nothing_behind_and_the_next_one_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk that refuses the flush (ENOSPC, EIO): the export is not durable, so not kept."""
    spool = Spool(tmp_path / "spool", START)
    spool.append([b"before"], 1)
    size = _segments(tmp_path / "spool")[0].stat().st_size

    def refuse(descriptor: int) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr("collector.intake.spool.os.fdatasync", refuse)
        with pytest.raises(SpoolError, match="No space left"):
            spool.append([b"lost", b"also lost"], 2)
    assert _segments(tmp_path / "spool")[0].stat().st_size == size
    spool.append([b"after"], 3)
    assert _read_all(spool) == [b"before", b"after"]
    spool.close()


def test_a_position_past_the_files_starts_a_new_segment(tmp_path: Path) -> None:
    directory = tmp_path / "spool"
    resume_at = Position(3, 5000)  # the spool was deleted after records were stored
    spool = Spool(directory, resume_at)
    spool.append([b"new"], 1)
    assert _read_all(spool, resume_at) == [b"new"]
    spool.close()


def _spans_in(body: bytes) -> int:
    request = parse_request(body)
    return sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)


def _set_state_events_in(body: bytes) -> int:
    request = parse_request(body)
    return sum(
        event.name == "set_state"
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
        for event in span.events
    )


def _wait_for_backlog(ingestor: Ingestor) -> None:
    wait_until(
        lambda: not ingestor.backlog_bytes(), timeout=30, interval=0.02,
        what="the extractor to catch up",
    )  # fmt: skip


def _spool_unstored(directory: Path, requests: list[bytes]) -> None:
    spool = Spool(directory, START)
    spool.append(requests, time.time_ns())
    spool.close()


def _store_spooled(db: Path, directory: Path) -> dict[str, int]:
    """Start an ingestor on a spool, as `serve` does, and store all it holds."""
    store = Store(db)
    ingestor = Ingestor(store, directory)
    _wait_for_backlog(ingestor)
    ingestor.close()
    counts = store.counts()
    store.close()
    return counts


def _assert_stored_once(counts: dict[str, int], requests: list[bytes], executions: int) -> None:
    assert counts["spans"] == sum(_spans_in(body) for body in requests)
    assert counts["transitions"] == sum(_set_state_events_in(body) for body in requests)
    assert counts["transitions"] > 0
    assert counts["executions"] == executions


def test_spooled_exports_are_stored_once_after_a_restart(tmp_path: Path) -> None:
    """Exports durable in the spool but never stored (a crash) are stored on the next start."""
    db, directory = tmp_path / "s.duckdb", tmp_path / "s.duckdb.spool"
    requests = [body for body, _ in fixture_requests("d_subflow")]
    _spool_unstored(directory, requests)  # as if the server died right after acknowledging
    for _ in range(2):  # a second start must not store anything again
        _assert_stored_once(_store_spooled(db, directory), requests, executions=3)


def test_a_storage_failure_mid_backlog_is_retried_and_every_run_stored_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The extractor retries the run it holds, then stores the runs behind it, in order."""
    # One record a run, so that several runs wait behind the failing one.
    monkeypatch.setattr(extractor_module, "BATCH_BYTES", 1)
    db, directory = tmp_path / "r.duckdb", tmp_path / "r.duckdb.spool"
    requests = [body for name in ("a_linear", "d_subflow") for body, _ in fixture_requests(name)]
    _spool_unstored(directory, requests)
    store = Store(db)
    # A directory where DuckDB's write-ahead log must go makes every commit
    # fail: a real storage fault, which goes away with the directory.
    wal = db.with_name(db.name + ".wal")
    wal.mkdir()
    with caplog.at_level(logging.ERROR, logger="collector.intake.extractor"):
        ingestor = Ingestor(store, directory)
        wait_until(
            lambda: any("retrying" in record.getMessage() for record in caplog.records),
            timeout=30, interval=0.02, what="the first commit to fail",
        )  # fmt: skip
        assert store.counts()["spans"] == 0
        wal.rmdir()
        _wait_for_backlog(ingestor)
    ingestor.close()
    counts = store.counts()
    store.close()
    _assert_stored_once(counts, requests, executions=4)


def test_an_export_that_cannot_be_stored_is_quarantined_and_the_rest_flow(
    tmp_path: Path,
) -> None:
    db, directory = tmp_path / "q.duckdb", tmp_path / "q.duckdb.spool"
    (good, _), *_ = fixture_requests("a_linear")
    spool = Spool(directory, START)
    # Bytes that are not an export, behind a valid CRC: a damaged disk, or a bug.
    spool.append([b"\xff\xff\xff not protobuf", good], time.time_ns())
    spool.close()
    store = Store(db)
    ingestor = Ingestor(store, directory)
    _wait_for_backlog(ingestor)
    ingestor.close()
    assert store.counts()["spans"] == _spans_in(good)
    store.close()
    kept = sorted((directory / "quarantine").glob("*.pb"))
    assert [path.read_bytes() for path in kept] == [b"\xff\xff\xff not protobuf"]


def test_an_export_set_aside_is_answered_per_span_not_retry(tmp_path: Path) -> None:
    # The receiver parsed a good request, but the bytes spooled for it do not decode
    # (a bug, or a damaged disk): the extractor quarantines them while the receiver
    # still holds the call. Retrying could only queue the same bytes again.
    store = Store(tmp_path / "r.duckdb")
    ingestor = Ingestor(store, tmp_path / "r.duckdb.spool")
    (body, _), *_ = fixture_requests("a_linear")
    outcome = ingestor.ingest(parse_request(body), b"\xff\xff\xff not protobuf")
    assert (outcome.accepted_spans, outcome.rejected_spans) == (0, _spans_in(body))
    assert "kept for inspection" in outcome.error_message
    assert ingestor.ingest(parse_request(body), body).accepted_spans == _spans_in(body)
    ingestor.close()
    assert store.counts()["spans"] == _spans_in(body)
    store.close()


def test_an_export_the_spool_cannot_keep_is_answered_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(tmp_path / "f.duckdb")
    ingestor = Ingestor(store, tmp_path / "f.duckdb.spool")
    (body, _), *_ = fixture_requests("a_linear")
    request = parse_request(body)

    def refuse(descriptor: int) -> None:
        raise OSError(5, "Input/output error")

    with monkeypatch.context() as patched:
        patched.setattr("collector.intake.spool.os.fdatasync", refuse)
        with pytest.raises(RetryLater, match="Input/output error"):
            ingestor.ingest(request, body)
    assert store.counts()["spans"] == 0
    assert ingestor.ingest(request, body).accepted_spans == _spans_in(body)
    assert store.counts()["spans"] == _spans_in(body)  # a lone exporter reads its writes
    ingestor.close()
    store.close()


def test_a_full_backlog_refuses_exports_and_loses_none_acknowledged(tmp_path: Path) -> None:
    store = Store(tmp_path / "b.duckdb")
    ingestor = Ingestor(store, tmp_path / "b.duckdb.spool", max_backlog_bytes=1)
    requests = [parse_request(body) for body, _ in fixture_requests("g_large_state")]
    acknowledged: set[int] = set()
    refused: list[IngestorBusy] = []
    lock = threading.Lock()

    def export(index: int) -> None:
        try:
            ingestor.ingest(requests[index % len(requests)])
        except IngestorBusy as busy:
            with lock:
                refused.append(busy)
            return
        with lock:
            acknowledged.add(index % len(requests))

    for _ in range(20):
        threads = [threading.Thread(target=export, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if refused:
            break
    _wait_for_backlog(ingestor)
    ingestor.close()
    assert refused, "eight concurrent exports never found a backlog above one byte"
    assert "retry" in str(refused[0])
    expected = {
        (span.trace_id.hex(), span.span_id.hex())
        for index in acknowledged
        for resource in requests[index].resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    }
    stored = {
        (row.trace_id, row.span_id)
        for trace_id in {trace for trace, _ in expected}
        for row in store.spans_of_trace(trace_id)
    }
    assert expected and expected <= stored
    assert store.counts()["spans"] == len(stored)  # repeats stored once
    store.close()


def test_a_full_backlog_refuses_exports_before_decoding_them(tmp_path: Path) -> None:
    """Past the bound, both receivers answer "retry later" without parsing the body.

    A body that does not decode shows it: refused as busy, not as invalid.
    """
    db, directory = tmp_path / "busy.duckdb", tmp_path / "busy.duckdb.spool"
    requests = [body for body, _ in fixture_requests("a_linear")]
    _spool_unstored(directory, requests)
    store = Store(db)
    wal = db.with_name(db.name + ".wal")
    wal.mkdir()  # every commit fails, so the spooled backlog stays (a real fault)
    ingestor = Ingestor(store, directory, max_backlog_bytes=1)
    keys = KeyChecker(())
    handler = TraceExportHandler(ingestor, keys, Admission(4, 2**24), retry_after_seconds=1)
    grpc_receiver = GrpcReceiver(handler, "127.0.0.1:0", workers=2, max_receive_bytes=2**20)
    grpc_receiver.start()
    http_receiver = HttpTraceReceiver(ingestor, keys, Admission(4, 2**24),
                                      max_receive_bytes=2**20, retry_after_seconds=1)
    app = Starlette(routes=[Route("/v1/traces", http_receiver.export, methods=["POST"])])
    not_protobuf = b"\xff\xff\xff not an export"
    try:
        with serving_in_thread(app, free_port()) as base:
            with pytest.raises(grpc.RpcError) as refused:
                export_raw(f"127.0.0.1:{grpc_receiver.port}", not_protobuf)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "still to store" in (refused.value.details() or "")
            reply = httpx.post(base + "/v1/traces", content=not_protobuf,
                               headers={"content-type": "application/x-protobuf"})
            assert reply.status_code == 503 and reply.headers["retry-after"] == "1"
            wal.rmdir()
            _wait_for_backlog(ingestor)
            with pytest.raises(grpc.RpcError) as invalid:
                export_raw(f"127.0.0.1:{grpc_receiver.port}", not_protobuf)
            assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        grpc_receiver.stop(5)
        ingestor.close()
        store.close()
    assert _stored_spans(db) == sum(_spans_in(body) for body in requests)


def _stored_spans(db: Path) -> int:
    store = Store(db, read_only=True)
    try:
        return store.counts()["spans"]
    finally:
        store.close()


def test_exports_are_spooled_compressed_and_runs_are_sized_by_their_exports(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "spool"
    spool = Spool(directory, START)
    requests = [body for name in ("g_large_state", "d_subflow") for body, _ in
                fixture_requests(name)]
    spool.append(requests, 1)
    (segment,) = _segments(directory)
    assert segment.stat().st_size * 4 < sum(map(len, requests))
    assert not any(body in segment.read_bytes() for body in requests)
    # A run is bounded by what its exports decode to, not by their size on disk.
    records, _ = spool.read(START, len(requests[0]))
    assert [export_bytes(record.export) for record in records] == requests[:1]
    assert _read_all(spool) == requests
    spool.close()


def test_records_spooled_uncompressed_by_an_older_statetrail_are_stored(tmp_path: Path) -> None:
    """An upgrade finds exports acknowledged before spool compression: read, stored as before."""
    db, directory = tmp_path / "o.duckdb", tmp_path / "o.duckdb.spool"
    requests = [body for body, _ in fixture_requests("d_subflow")]
    directory.mkdir()
    old_header = struct.Struct("<IIQ")  # body length, CRC-32 of the body, arrival ns
    (directory / f"{1:020d}.seg").write_bytes(b"".join(
        old_header.pack(len(body), zlib.crc32(body), 1) + body for body in requests
    ))
    spool = Spool(directory, START)
    spool.append([requests[0]], 2)  # a new, compressed record behind the old ones
    records = spool.read(START, 1 << 30)[0]
    assert [isinstance(record.export, Packed) for record in records] == [
        *(False for _ in requests), True
    ]
    spool.close()
    _assert_stored_once(_store_spooled(db, directory), requests, executions=3)
