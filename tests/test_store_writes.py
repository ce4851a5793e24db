"""Store.write on a real DuckDB file: redeliveries mixed with new spans are stored once.

OTLP exporters resend an export they got no answer for, and the extractor may
write a resent export in the same transaction as new ones. Spans are keyed by
trace id + span id; evidence (executions, transitions) is kept only for the
spans a write actually added, so nothing is counted twice.
"""

from __future__ import annotations

import base64
import itertools
import os
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2
from support.history_records import scenario
from support.otlp_craft import (
    DAY_NANOS,
    ExportRequest,
    new_span_id,
    new_trace_id,
    plain_request,
    relocated_fixture,
    spans_of,
)
from support.servers import fixture_requests

from collector.encode.exports import batch_from_export
from collector.jobs.replayer import replay_stores
from collector.model import Evidence
from collector.producers import junjo
from collector.store import IngestBatch, Store, StoreError
from collector.store.prepared import start_ranges
from collector.store.replays import ARROW_BATCH_ROWS


def test_store_write_mixing_a_redelivery_with_new_spans_stores_each_once(tmp_path: Path) -> None:
    # l_split_batches: a run's node spans in one request, its workflow span in the next.
    first, second = (batch_from_export(body) for body, _ in fixture_requests("l_split_batches"))
    (execution,) = second.evidence.executions
    store = Store(tmp_path / "w.duckdb")

    alone = store.write([first])
    assert _chunk_count(store) == 1
    mixed = store.write([first, second])  # `first` again, with new spans behind it
    assert _chunk_count(store) == 2  # second's; first's bytes are not kept twice
    again = store.write([first, second])
    assert _chunk_count(store) == 2

    assert store.counts() == {
        "spans": len(first.spans) + len(second.spans),
        "executions": 1,
        "transitions": len(first.evidence.transitions) + len(second.evidence.transitions),
    }
    # What each write reports touching is what it added: the replayer re-reads these.
    assert alone.store_ids == {t.store_id for t in first.evidence.transitions}
    assert mixed.store_ids == {execution.store_id}
    assert mixed.run_ids == {execution.run_id}
    assert (again.store_ids, again.run_ids) == (frozenset(), frozenset())
    store.close()


def test_every_span_reads_back_as_the_bytes_it_arrived_in(tmp_path: Path) -> None:
    # d_subflow: several requests, and traces whose spans arrive in more than one.
    batches = [batch_from_export(body) for body, _ in fixture_requests("d_subflow")]
    sent = {(s.trace_id, s.span_id): s.raw for b in batches for s in b.spans}
    store = Store(tmp_path / "w.duckdb")
    store.write(batches[:1])
    store.write(batches[1:])  # one transaction, several exports: a chunk each
    try:
        assert _chunk_count(store) == len(batches)
        read = {
            (row.trace_id, row.span_id): row.raw
            for trace_id in {trace_id for trace_id, _ in sent}
            for row in store.spans_of_trace(trace_id)
        }
        assert read == sent
    finally:
        store.close()


def _chunk_count(store: Store) -> int:
    with store._cursor() as cursor:
        row = cursor.execute("SELECT count(DISTINCT chunk_id) FROM span_chunk_pieces").fetchone()
    assert row is not None
    return int(row[0])


def _text_heavy_export(n: int, spans: int = 4, text_bytes: int = 192 * 1024) -> IngestBatch:
    """One trace whose spans each carry LLM-like text that zstd barely shrinks."""
    start = DAY_NANOS + n
    request = plain_request(
        new_trace_id(), [new_span_id() for _ in range(spans)],
        start_unix_nano=start, end_unix_nano=start + 1,
    )
    for span in spans_of([request]):
        text = base64.b64encode(os.urandom(text_bytes * 3 // 4)).decode()
        span.attributes.add(key="llm.output", value=common_pb2.AnyValue(string_value=text))
    return batch_from_export(request.SerializeToString())


def test_exports_of_incompressible_text_outgrowing_the_memory_limit_store_and_read_back(
    tmp_path: Path,
) -> None:
    # ~1 MB chunks, 100 of them, at a 48 MB limit. Kept whole as one BLOB each,
    # ~65 of them in a row group made every checkpoint run out of memory, a
    # fatal error: the commit was durable but raised, and the file could not
    # be checkpointed again, not even on close.
    path = tmp_path / "text.duckdb"
    store = Store(path, memory_limit="48MB", checkpoint_threshold="16MB", threads=1)
    batches = [_text_heavy_export(n) for n in range(100)]
    try:
        for batch in batches:
            store.write([batch])
    finally:
        store.close()
    assert not path.with_name(path.name + ".wal").exists()  # the closing checkpoint ran
    store = Store(path, memory_limit="48MB", threads=1)
    try:
        assert store.counts()["spans"] == 400
        for batch in batches[::9]:
            stored = {row.span_id: row.raw for row in store.spans_of_trace(batch.spans[0].trace_id)}
            assert stored == {s.span_id: s.raw for s in batch.spans}
    finally:
        store.close()


@pytest.mark.parametrize(
    "damage",
    [
        "UPDATE span_chunk_pieces SET body = 'not zstd'::BLOB",
        "DELETE FROM span_chunk_pieces WHERE piece = 1",
    ],
    ids=["not zstd", "a piece missing"],
)
def test_a_damaged_chunk_is_a_store_error_not_wrong_bytes(tmp_path: Path, damage: str) -> None:
    batch = _text_heavy_export(0, spans=1, text_bytes=16 * 1024)
    store = Store(tmp_path / "w.duckdb")
    store.write([batch])
    with store._cursor() as cursor:
        row = cursor.execute("SELECT count(*) FROM span_chunk_pieces").fetchone()
        assert row is not None and row[0] > 2  # the chunk was cut
        cursor.execute(damage)
    try:
        with pytest.raises(StoreError, match="cannot be read"):
            store.spans_of_trace(batch.spans[0].trace_id)
    finally:
        store.close()


@pytest.mark.slow
def test_checkpoints_keep_up_while_replays_run_beside_ingest(tmp_path: Path) -> None:
    # DuckDB checkpoints on its own once the WAL passes the threshold, unless
    # a transaction that began earlier is still open. Replays read and rewrite
    # (delete from keyed tables) beside every ingest commit here; the WAL must
    # still be folded in as it goes. (At bench_ingest's scale, a result left
    # open on the store's connection stopped every checkpoint: the WAL grew
    # past 2 GB and queries failed "Out of Memory". This small run did not
    # show that one; it guards the pace.)
    store = Store(tmp_path / "c.duckdb", checkpoint_threshold="256KB")
    wal = tmp_path / "c.duckdb.wal"
    written: list[str] = []
    done = threading.Event()
    largest_wal = 0

    def ingest() -> None:
        try:
            for n in range(60):
                bodies = relocated_fixture("a_linear", end_unix_nano=10**18, tag=f"w{n}")
                result = store.write([batch_from_export(body) for body in bodies])
                written.extend(result.store_ids)
        finally:
            done.set()

    writer = threading.Thread(target=ingest)
    writer.start()
    try:
        while not done.is_set():
            replay_stores(store, sorted(set(written)))
            largest_wal = max(largest_wal, wal.stat().st_size if wal.exists() else 0)
    finally:
        writer.join()
        store.close()
    assert len(set(written)) >= 60
    # 60 runs of a_linear with their replays write ~10 MB of WAL in all.
    assert largest_wal < 2 * 2**20


def test_an_export_repeated_within_one_write_keeps_one_chunk(tmp_path: Path) -> None:
    (batch, *_) = (batch_from_export(body) for body, _ in fixture_requests("a_linear"))
    store = Store(tmp_path / "w.duckdb")
    try:
        store.write([batch, batch])  # a retry spooled behind its first copy
        assert _chunk_count(store) == 1
        assert store.counts()["spans"] == len(batch.spans)
        trace_id = batch.spans[0].trace_id
        expected = {s.span_id: s.raw for s in batch.spans if s.trace_id == trace_id}
        assert {r.span_id: r.raw for r in store.spans_of_trace(trace_id)} == expected
    finally:
        store.close()


def test_a_run_id_sent_again_under_another_span_keeps_its_first_execution(
    tmp_path: Path,
) -> None:
    # The new span is stored; the run it names is the one stored first.
    bodies = [body for body, _ in fixture_requests("a_linear")]
    request = ExportRequest.FromString(bodies[-1])
    owner = next(
        span for span in spans_of([request])
        if any(a.key == junjo.SPAN_TYPE and a.value.string_value == "workflow"
               for a in span.attributes)
    )
    impostor = trace_pb2.Span()
    impostor.CopyFrom(owner)
    impostor.span_id = new_span_id()
    impostor.name = "impostor"
    scope_spans = request.resource_spans[0].scope_spans[0]
    scope_spans.ClearField("spans")
    scope_spans.spans.append(impostor)
    store = Store(tmp_path / "w.duckdb")
    try:
        store.write([batch_from_export(body) for body in bodies])
        (execution,) = batch_from_export(bodies[-1]).evidence.executions
        before = store.counts()
        store.write([batch_from_export(request.SerializeToString())])
        assert store.counts() == {**before, "spans": before["spans"] + 1}
        stored = store.get_execution(execution.run_id)
        assert stored is not None
        assert (stored.span_id, stored.name) == (owner.span_id.hex(), owner.name)
        assert {s.name for s in store.spans_of_trace(owner.trace_id.hex())} >= {"impostor"}
    finally:
        store.close()


def test_a_resource_pruned_away_is_stored_again_when_a_span_names_it(tmp_path: Path) -> None:
    # The store remembers which resources it holds, so that each write need not
    # insert them again: a prune that deletes one must make it forget.
    old_end = time.time_ns() - 40 * DAY_NANOS

    def spans(end: int) -> tuple[str, str]:
        trace_id, span_id = new_trace_id(), new_span_id()
        request = plain_request(trace_id, [span_id], start_unix_nano=end - 1000,
                                end_unix_nano=end, service="pruned-service")
        store.write([batch_from_export(request.SerializeToString())])
        return trace_id.hex(), span_id.hex()

    store = Store(tmp_path / "w.duckdb")
    try:
        old = spans(old_end)
        assert store.resource_of_span(*old) is not None
        assert store.prune_batch(old_end + 1).spans == 1
        store.prune_orphans()
        new = spans(time.time_ns())
        resource = store.resource_of_span(*new)
        assert resource is not None
        assert resource.service_name == "pruned-service"
    finally:
        store.close()


def _node_with_events(request: ExportRequest) -> trace_pb2.Span:
    """The first span carrying two or more set_state events."""
    return next(
        span
        for span in spans_of([request])
        if sum(event.name == junjo.SET_STATE_EVENT for event in span.events) >= 2
    )


def test_a_span_sent_twice_with_different_content_keeps_its_first_copy_whole(
    tmp_path: Path,
) -> None:
    # Copy B: the same ids, another name, only its first set_state event.
    (body, _), *_ = fixture_requests("a_linear")
    request = ExportRequest.FromString(body)
    original = _node_with_events(request)
    events = sum(event.name == junjo.SET_STATE_EVENT for event in original.events)
    copy = trace_pb2.Span()
    copy.CopyFrom(original)
    copy.name = "copy B"
    del copy.events[1:]
    key = (original.trace_id.hex(), original.span_id.hex())

    def stored(db: Store) -> tuple[str, int]:
        """The stored copy's name, and how many transitions it carries."""
        (row,) = [s for s in db.spans_of_trace(key[0]) if s.span_id == key[1]]
        carried = [
            t for t in db.transitions_for_store(_store_of(original))
            if (t.trace_id, t.span_id) == key
        ]
        assert {t.span_name for t in carried} == {row.name}  # never a mix of copies
        return row.name, len(carried)

    # In one request: the original first, then copy B.
    request.resource_spans[0].scope_spans[0].spans.append(copy)
    store = Store(tmp_path / "w.duckdb")
    store.write([batch_from_export(request.SerializeToString())])
    assert stored(store) == (original.name, events)
    store.close()

    # In one write across two exports: copy B's export first, then the original's.
    other = Store(tmp_path / "x.duckdb")
    alone = ExportRequest.FromString(body)
    alone.resource_spans[0].scope_spans[0].ClearField("spans")
    alone.resource_spans[0].scope_spans[0].spans.append(copy)
    other.write([batch_from_export(alone.SerializeToString()), batch_from_export(body)])
    assert stored(other) == ("copy B", 1)
    other.close()


def test_a_span_delivered_again_after_later_writes_and_a_checkpoint_is_stored_once(
    tmp_path: Path,
) -> None:
    # An exporter's persistent queue can deliver a span again long after it
    # was stored, past spans that started later and a checkpoint, where only
    # the zone maps of its start time lead to the stored copy.
    store = Store(tmp_path / "w.duckdb")
    early = plain_request(new_trace_id(), [new_span_id(), new_span_id()],
                          start_unix_nano=DAY_NANOS, end_unix_nano=DAY_NANOS + 5)
    store.write([batch_from_export(early.SerializeToString())])
    for day in range(2, 6):
        later = plain_request(new_trace_id(), [new_span_id() for _ in range(50)],
                              start_unix_nano=day * DAY_NANOS, end_unix_nano=day * DAY_NANOS + 5)
        store.write([batch_from_export(later.SerializeToString())])
    store.checkpoint()
    spans_before = store.counts()["spans"]

    # Again alone, and again beside a new span that starts days later, which
    # widens the write's start times over every row group in between.
    store.write([batch_from_export(early.SerializeToString())])
    newest = plain_request(new_trace_id(), [new_span_id()],
                           start_unix_nano=9 * DAY_NANOS, end_unix_nano=9 * DAY_NANOS + 5)
    store.write([batch_from_export(early.SerializeToString()),
                 batch_from_export(newest.SerializeToString())])

    assert store.counts()["spans"] == spans_before + 1
    assert len(store.spans_of_trace(early.resource_spans[0].scope_spans[0].spans[0]
                                    .trace_id.hex())) == 2
    store.close()


@pytest.mark.parametrize("most", [1, 2, 3, 8])
def test_start_ranges_hold_every_start_in_at_most_that_many_ranges(most: int) -> None:
    starts = [5, 1, 2, 3, 100, 101, 1000, 7, 3, 2 * DAY_NANOS]
    spans = pa.table({"start_unix_nano": pa.array(starts, pa.int64())})
    ranges = start_ranges(spans, most, min_gap=50)
    # Cut at most at the three gaps of 50 or more.
    assert len(ranges) == min(most, 4)
    assert all(any(first <= start <= last for first, last in ranges) for start in starts)
    # Sorted and apart, and what is left out between them is the widest gaps.
    assert all(last < first for (_, last), (first, _) in itertools.pairwise(ranges))
    if most == 3:
        assert ranges == [(1, 101), (1000, 1000), (2 * DAY_NANOS, 2 * DAY_NANOS)]
    if most == 8:
        assert ranges == [(1, 7), (100, 101), (1000, 1000), (2 * DAY_NANOS, 2 * DAY_NANOS)]


def test_the_same_ids_with_another_start_time_are_another_span(tmp_path: Path) -> None:
    # A redelivery repeats the span's start time. Ids alone, with a new start,
    # come from a producer reusing them: both are kept, as they arrived.
    trace_id, span_id = new_trace_id(), new_span_id()
    store = Store(tmp_path / "w.duckdb")
    for start in (DAY_NANOS, 2 * DAY_NANOS, DAY_NANOS):
        request = plain_request(trace_id, [span_id], start_unix_nano=start,
                                end_unix_nano=start + 5)
        store.write([batch_from_export(request.SerializeToString())])
    starts = sorted(span.start for span in store.spans_of_trace(trace_id.hex()))
    assert starts == [DAY_NANOS, 2 * DAY_NANOS]
    store.close()


def _store_of(span: trace_pb2.Span) -> str:
    for event in span.events:
        for attribute in event.attributes:
            if attribute.key == junjo.STORE_ID:
                return str(attribute.value.string_value)
    raise LookupError("no store id")


def test_a_slow_query_draws_no_progress_bar_on_stdout(tmp_path: Path) -> None:
    # DuckDB's Python client draws one on stdout (the file descriptor, past
    # sys.stdout) for any query on a connection (not a cursor) running past 2 s:
    # a long migration or checkpoint at start-up, into serve's log.
    for read_only in (False, True):
        store = Store(tmp_path / "st.duckdb", read_only=read_only)
        try:
            setting = "SELECT current_setting('enable_progress_bar')"
            row = store._connection.execute(setting).fetchone()
        finally:
            store.close()
        assert row == (False,), read_only


def test_a_history_longer_than_an_arrow_batch_is_read_whole_and_in_order(
    tmp_path: Path,
) -> None:
    # Transitions are read through Arrow in batches of ARROW_BATCH_ROWS rows:
    # the reads must join the batches, in replay order, across both reads.
    steps = ARROW_BATCH_ROWS + 7
    execution, transitions, _ = scenario(
        {"n": 0}, [[{"op": "replace", "path": "/n", "value": i}] for i in range(1, steps + 1)]
    )
    transitions = [t._replace(event_index=i) for i, t in enumerate(transitions)]
    store = Store(tmp_path / "long.duckdb")
    try:
        # Stored in reverse: the order read back is the query's, not the insert's.
        evidence = Evidence([execution], transitions[::-1], {})
        store.write([IngestBatch(spans=[], evidence=evidence)])
        read = store.transitions_for_store(execution.store_id or "")
        assert [(t.sequence, t.patch_json) for t in read] == [
            (t.sequence, t.patch_json) for t in transitions
        ]
        tail = store.store_transitions_between(execution.store_id or "", 5, steps)
        assert [t.sequence for t in tail] == [t.sequence for t in transitions[5:]]
    finally:
        store.close()
