"""Store.write on a real DuckDB file: redeliveries mixed with new spans are stored once.

OTLP exporters resend an export they got no answer for, and the extractor may
write a resent export in the same transaction as new ones. Spans are keyed by
trace id + span id; evidence (executions, transitions) is kept only for the
spans a write actually added, so nothing is counted twice.
"""

from __future__ import annotations

from pathlib import Path

from support import fixture_requests

from collector.extractor import batch_from_export
from collector.store import Store


def test_store_write_mixing_a_redelivery_with_new_spans_stores_each_once(tmp_path: Path) -> None:
    # l_split_batches: a run's node spans in one request, its workflow span in the next.
    first, second = (batch_from_export(body) for body, _ in fixture_requests("l_split_batches"))
    (execution,) = second.evidence.executions
    store = Store(tmp_path / "w.duckdb")

    alone = store.write([first])
    mixed = store.write([first, second])  # `first` again, with new spans behind it
    again = store.write([first, second])

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
