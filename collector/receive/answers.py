"""What both OTLP transports answer: export responses, error statuses and their messages.

Pure: protobuf messages in, nothing sent. collector/receive/otlp_grpc.py and
collector/receive/otlp_http.py each put these on their own wire (gRPC status and
trailers; an HTTP status with a protobuf or OTLP JSON body), so an exporter
reads the same partial success, the same retry delay and the same words over
either transport.
"""

from __future__ import annotations

import random
from typing import Final, TypeAlias

from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from collector.intake.sink import IngestOutcome

ExportResponsePB2: TypeAlias = trace_service_pb2.ExportTraceServiceResponse
StatusPB2: TypeAlias = status_pb2.Status
RetryInfoPB2: TypeAlias = error_details_pb2.RetryInfo
BadRequestPB2: TypeAlias = error_details_pb2.BadRequest

UNAUTHENTICATED_MESSAGE: Final = (
    "missing or unknown API key: send it as x-junjo-api-key or 'authorization: Bearer <key>'"
)
AT_CAPACITY_MESSAGE: Final = "statetrail is at capacity; retry after the delay"


def export_response(outcome: IngestOutcome) -> ExportResponsePB2:
    """The answer to a stored export; rejected spans, if any, are its partial success.

    A fully accepted export leaves partial_success unset, as OTLP asks.
    """
    response = ExportResponsePB2()
    if outcome.rejected_spans:
        response.partial_success.rejected_spans = outcome.rejected_spans
        response.partial_success.error_message = outcome.error_message
    return response


def retry_delay_seconds(base_seconds: int) -> int:
    """How long one refused exporter should wait: `base_seconds`, give or take half.

    A fixed delay sends every exporter refused in one moment back in the same moment,
    to be refused together again until they give up and drop batches; spread, some
    get in on each retry. Whole seconds (HTTP's Retry-After has no fractions), never
    below one.
    """
    return random.randint(max(1, base_seconds // 2), max(1, base_seconds * 3 // 2))


def retry_info(delay_seconds: int) -> RetryInfoPB2:
    """The RetryInfo telling a refused exporter to send the export again after the delay."""
    return RetryInfoPB2(retry_delay=duration_pb2.Duration(seconds=delay_seconds))


def error_status(
    code: int, message: str, retry: RetryInfoPB2 | None = None, *, bad_request: bool = False
) -> StatusPB2:
    """A google.rpc.Status; with `retry`, RetryInfo in its details; with `bad_request`, a
    google.rpc.BadRequest as OTLP asks of INVALID_ARGUMENT (naming no field: for an
    undecodable body which one is rarely known)."""
    status = StatusPB2(code=code, message=message)
    if retry is not None:
        detail = any_pb2.Any()
        detail.Pack(retry)
        status.details.append(detail)
    if bad_request:
        violation = BadRequestPB2.FieldViolation(description=message)
        detail = any_pb2.Any()
        detail.Pack(BadRequestPB2(field_violations=[violation]))
        status.details.append(detail)
    return status
