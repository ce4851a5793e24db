"""What a transport hands an export to: the intake's side of the receive -> intake contract.

Receivers (collector/receive/) take an `ExportSink` rather than the concrete
`Ingestor`, as the OpenTelemetry Collector's receivers take a consumer: a
receiver parses, authenticates and answers, and knows nothing of spools or
storage. `RetryLater` is how a sink says "not acknowledged, send it again".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from collector.decode.otlp import ExportRequestPB2


@dataclass(frozen=True, slots=True)
class IngestOutcome:
    accepted_spans: int
    rejected_spans: int
    error_message: str


class RetryLater(RuntimeError):
    """The export is not acknowledged; the exporter should send it again later."""


class ExportSink(Protocol):
    def check_backlog(self) -> None:
        """Raise RetryLater when no export could be taken now; cheap, before reading a body."""

    def give_way(self) -> None:
        """Wait, briefly, while studio requests are being served."""

    def ingest(self, request: ExportRequestPB2, body: bytes | None = None) -> IngestOutcome:
        """Make the export durable and say what was accepted, or raise RetryLater."""
