"""One export request's bytes as the rows it adds: decode, dedupe, extract."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from collector.decode.otlp import DecodedSpan, iter_spans
from collector.encode.rows import IngestBatch
from collector.model import Evidence
from collector.producers import convention, junjo


def batch_from_export(
    body: bytes, paced: Callable[[list[DecodedSpan]], Iterable[DecodedSpan]] = iter
) -> IngestBatch:
    """An export request's bytes as the rows they add. Raises DecodeError.

    `paced` wraps the spans on their way into extraction (to give way to studio
    requests). The spans' parsed views, several times their bytes, are let go on return.
    """
    decoded = _first_copies(span for span in iter_spans(body) if isinstance(span, DecodedSpan))
    evidence = extract(paced(decoded))
    return IngestBatch([span.record for span in decoded], evidence)


def extract(spans: Iterable[DecodedSpan]) -> Evidence:
    """Each span's evidence, by the producer convention it declares.

    A span with `statetrail.convention.version` is the state-evidence convention's
    (collector/producers/convention.py), whatever version it names; any other goes
    to Junjo's adapter, which keeps only Junjo's spans and set_state events.
    """
    evidence = Evidence([], [], {}, [])
    for span, view in spans:
        if convention.is_convention_span(view.attributes):
            convention.extract_span(span, view, evidence)
        else:
            junjo.extract_span(span, view, evidence)
    return evidence


def _first_copies(spans: Iterable[DecodedSpan]) -> list[DecodedSpan]:
    """Each span once, as its first copy in the request: a span sent twice in one export
    with different content must not have its evidence mixed from both."""
    seen: set[tuple[str, str]] = set()
    kept: list[DecodedSpan] = []
    for span in spans:
        key = (span.record.trace_id, span.record.span_id)
        if key not in seen:
            seen.add(key)
            kept.append(span)
    return kept
