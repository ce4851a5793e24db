"""OTLP/gRPC transport: auth, limits, status codes and partial success; nothing else.

Export takes raw bytes (a pass-through deserializer), so this module, not grpcio,
decides what an undecodable body means, and an overloaded server refuses before
parsing. Answers are shared with HTTP (answers.py): UNAUTHENTICATED, INVALID_ARGUMENT
(not retryable), UNAVAILABLE with RetryInfo (retryable), RESOURCE_EXHAUSTED past the
receive limit (grpcio's own).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

import grpc
from google.rpc import code_pb2

from collector.decode.otlp import DecodeError, parse_request
from collector.intake.sink import ExportSink, RetryLater
from collector.receive.admission import Admission, client_of
from collector.receive.answers import (
    AT_CAPACITY_MESSAGE,
    UNAUTHENTICATED_MESSAGE,
    error_status,
    export_response,
    retry_delay_seconds,
    retry_info,
)
from collector.receive.auth import KeyChecker, digest, presented_key

logger = logging.getLogger(__name__)

EXPORT_SERVICE: Final = "opentelemetry.proto.collector.trace.v1.TraceService"
EXPORT_METHOD: Final = "Export"
# The OpenTelemetry Collector reads RetryInfo from the status details; the Python
# SDK reads this trailer. Send both so every exporter backs off as told.
RETRY_INFO_TRAILER: Final = "google.rpc.retryinfo-bin"
STATUS_DETAILS_TRAILER: Final = "grpc-status-details-bin"


class _Status(grpc.Status):  # type: ignore[misc]
    def __init__(self, code: grpc.StatusCode, details: str, trailers: Sequence[Any]) -> None:
        self.code = code
        self.details = details
        self.trailing_metadata = tuple(trailers)


class TraceExportHandler:
    """The Export RPC, written against grpcio's raw-bytes handler interface."""

    def __init__(
        self,
        sink: ExportSink,
        keys: KeyChecker,
        admission: Admission,
        *,
        retry_after_seconds: int,
    ) -> None:
        self._sink = sink
        self._keys = keys
        self._admission = admission
        self._retry_after_seconds = retry_after_seconds

    def export(self, body: bytes, context: grpc.ServicerContext) -> bytes:
        key = presented_key(context.invocation_metadata())
        if not self._keys.accepts(key):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, UNAUTHENTICATED_MESSAGE)
        client = client_of(peer_address(context.peer()), digest(key) if key else None)
        if not self._admission.try_enter(len(body), client):
            self._abort_retryable(context, AT_CAPACITY_MESSAGE)
        try:
            return self._export_admitted(body, context)
        finally:
            self._admission.leave(len(body), client)

    def _export_admitted(self, body: bytes, context: grpc.ServicerContext) -> bytes:
        try:
            self._sink.check_backlog()
        except RetryLater as exc:
            self._abort_retryable(context, str(exc))
        self._sink.give_way()
        try:
            request = parse_request(body)
        except DecodeError as exc:
            self._abort_invalid(context, str(exc))
        try:
            outcome = self._sink.ingest(request, body)
        except RetryLater as exc:
            self._abort_retryable(context, str(exc))
        serialized: bytes = export_response(outcome).SerializeToString()
        return serialized

    def _abort_invalid(self, context: grpc.ServicerContext, message: str) -> None:
        status = error_status(code_pb2.INVALID_ARGUMENT, message, bad_request=True)
        context.abort_with_status(
            _Status(
                grpc.StatusCode.INVALID_ARGUMENT,
                message,
                ((STATUS_DETAILS_TRAILER, status.SerializeToString()),),
            )
        )

    def _abort_retryable(self, context: grpc.ServicerContext, message: str) -> None:
        retry = retry_info(retry_delay_seconds(self._retry_after_seconds))
        status = error_status(code_pb2.UNAVAILABLE, message, retry)
        context.abort_with_status(
            _Status(
                grpc.StatusCode.UNAVAILABLE,
                message,
                (
                    (STATUS_DETAILS_TRAILER, status.SerializeToString()),
                    (RETRY_INFO_TRAILER, retry.SerializeToString()),
                ),
            )
        )


def peer_address(peer: str) -> str:
    """The address in grpcio's peer string ("ipv4:10.0.0.5:4711", "ipv6:[::1]:4711"),
    without the port; other kinds (a unix socket) as they are."""
    kind, _, rest = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        return rest.rpartition(":")[0].strip("[]")
    return peer


class GrpcReceiver:
    """A grpcio server exposing TraceService/Export on one address."""

    def __init__(
        self, handler: TraceExportHandler, address: str, *, workers: int, max_receive_bytes: int
    ) -> None:
        self._server = grpc.server(
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix="statetrail-grpc"),
            options=[
                ("grpc.max_receive_message_length", max_receive_bytes),
                ("grpc.so_reuseport", 0),
            ],
        )
        method = grpc.unary_unary_rpc_method_handler(handler.export)
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(EXPORT_SERVICE, {EXPORT_METHOD: method}),)
        )
        try:
            self.port = self._server.add_insecure_port(address)
        except RuntimeError as exc:  # grpcio's only signal that bind() failed
            raise OSError(
                f"cannot listen for OTLP/gRPC on {address}: address already in use or unavailable"
            ) from exc
        if self.port == 0:
            raise OSError(f"cannot listen for OTLP/gRPC on {address}")

    def start(self) -> None:
        self._server.start()

    def stop(self, grace_seconds: float) -> None:
        """Refuse new RPCs and let in-flight exports finish (up to the grace period)."""
        self._server.stop(grace_seconds).wait()
