"""OTLP/HTTP transport (`POST /v1/traces`): auth, limits, status codes and partial success.

The HTTP twin of otlp_grpc.py, with the same answers (answers.py); it decodes nothing
and stores nothing but through the injected `ExportSink`. Status codes follow the
OTLP/HTTP specification (docs/operations.md, "What the receiver answers").

Invariants:
- a 200 is sent only once the export is durable (`ExportSink.ingest` returned);
- a request never holds more than the receive limit, compressed or inflated;
- a body in transit holds the admission bytes it has sent and no slot, and is cut off
  (408) when slower than `UploadPace` allows;
- every answer is in the request's encoding, protobuf or OTLP JSON.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import zlib
from dataclasses import dataclass
from typing import Final

from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc import code_pb2
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from collector.decode.otlp import DecodeError, parse_request
from collector.intake.sink import ExportSink, IngestOutcome, RetryLater
from collector.receive import otlp_json
from collector.receive.admission import Admission, Client, client_of
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

TRACES_PATH: Final = "/v1/traces"
PROTOBUF_MEDIA_TYPE: Final = "application/x-protobuf"
JSON_MEDIA_TYPE: Final = "application/json"
# Inflate in steps of this size so the limit is checked long before a bomb is out.
INFLATE_CHUNK_BYTES: Final = 256 * 1024
# Exporters send one gzip member; a body of thousands is an attack, not a batch.
MAX_GZIP_MEMBERS: Final = 64
# Compressed input handed to zlib at a time (see HttpTraceReceiver._gunzip).
GZIP_INPUT_BYTES: Final = 1024 * 1024


class BodyFormat(enum.Enum):
    """The two OTLP/HTTP encodings; the value is the media type."""

    PROTOBUF = PROTOBUF_MEDIA_TYPE
    JSON = JSON_MEDIA_TYPE

    @classmethod
    def of(cls, content_type: str | None) -> BodyFormat | None:
        media_type = (content_type or "").split(";", 1)[0].strip().lower()
        for member in cls:
            if member.value == media_type:
                return member
        return None

    def serialize(self, message: Message) -> bytes:
        if self is BodyFormat.PROTOBUF:
            serialized: bytes = message.SerializeToString()
            return serialized
        # MessageToDict writes int64 as strings and bytes as base64, as OTLP JSON
        # asks for every field an export response or a Status carries.
        return json.dumps(json_format.MessageToDict(message), separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class UploadPace:
    """How fast a body must arrive, or be answered 408 and its admission freed.

    Like Apache's mod_reqtimeout (`body=grace,MinRate=rate`): `grace_seconds` plus a
    second per `min_bytes_per_second` sent, at most `max_seconds`, and no pause longer
    than the grace. Exporters send a batch at once; a trickle is cut off.
    """

    grace_seconds: float = 5.0
    min_bytes_per_second: int = 16 * 1024
    max_seconds: float = 60.0

    def deadline(self, started: float, last_arrival: float, received: int) -> float:
        """The loop time by which more of the body must have arrived."""
        earned = received / self.min_bytes_per_second if self.min_bytes_per_second else float("inf")
        return min(
            last_arrival + self.grace_seconds,
            started + self.grace_seconds + earned,
            started + self.max_seconds,
        )


class Refused(Exception):
    """An export answered with an error status instead of being stored."""

    def __init__(self, http_status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.code = code
        self.message = message


class HttpTraceReceiver:
    """`POST /v1/traces`, written against Starlette's request/response interface."""

    def __init__(
        self,
        sink: ExportSink,
        keys: KeyChecker,
        admission: Admission,
        *,
        max_receive_bytes: int,
        retry_after_seconds: int,
        pace: UploadPace | None = None,
    ) -> None:
        self._sink = sink
        self._keys = keys
        self.admission = admission
        self._max_receive_bytes = max_receive_bytes
        self._retry_after_seconds = retry_after_seconds
        self._pace = pace or UploadPace()

    async def export(self, request: Request) -> Response:
        body_format = BodyFormat.of(request.headers.get("content-type"))
        if body_format is None:
            # Nothing says which encoding the client reads; JSON is the readable one.
            return self._refusal(
                Refused(
                    415,
                    code_pb2.INVALID_ARGUMENT,
                    f"send {PROTOBUF_MEDIA_TYPE} or {JSON_MEDIA_TYPE}",
                ),
                BodyFormat.JSON,
            )
        try:
            outcome = await self._export(request, body_format)
        except Refused as refusal:
            return self._refusal(refusal, body_format)
        response = export_response(outcome)
        return Response(body_format.serialize(response), media_type=body_format.value)

    async def _export(self, request: Request, body_format: BodyFormat) -> IngestOutcome:
        key = presented_key(request.headers.items())
        # The key check may re-read the key table: keep it off the event loop.
        if not await run_in_threadpool(self._keys.accepts, key):
            raise Refused(401, code_pb2.UNAUTHENTICATED, UNAUTHENTICATED_MESSAGE)
        gzipped = _is_gzipped(request.headers.get("content-encoding"))
        declared = _declared_length(request.headers.get("content-length"))
        if declared is not None and declared > self._max_receive_bytes:
            raise self._too_large()
        # The share grows with the bytes read, declared or not (chunked, as Node's
        # exporters send): reserving what a body declares let slow uploads that
        # declared much and sent little hold every slot.
        address = request.client.host if request.client else None
        share = _Share(self.admission, client_of(address, digest(key) if key else None))
        try:
            body = await self._read_body(request, share)
            if not share.take_slot():
                raise self._at_capacity()
            return await run_in_threadpool(self._ingest, body, gzipped, body_format, share)
        finally:
            share.leave()

    async def _read_body(self, request: Request, share: _Share) -> bytes:
        """The body, within the receive limit, the admission budget and the upload pace
        (which frees what a stalled upload holds, and its connection)."""
        chunks: list[bytes] = []
        size = 0
        pieces = aiter(request.stream())
        loop = asyncio.get_running_loop()
        started = last_arrival = loop.time()
        try:
            while True:
                try:
                    async with asyncio.timeout_at(self._pace.deadline(started, last_arrival, size)):
                        chunk = await anext(pieces)
                except StopAsyncIteration:
                    break
                except TimeoutError:
                    raise self._too_slow() from None
                last_arrival = loop.time()
                size += len(chunk)
                if size > self._max_receive_bytes:
                    raise self._too_large()
                if not share.grow_to(size):
                    raise self._at_capacity()
                chunks.append(chunk)
        except ClientDisconnect as exc:
            # Nobody will read the answer; a 400 just ends the request without a traceback.
            raise _bad_request("the client went away before sending the whole body") from exc
        return b"".join(chunks)

    def _ingest(
        self, body: bytes, gzipped: bool, body_format: BodyFormat, share: _Share
    ) -> IngestOutcome:
        """Runs on a worker thread: inflating and decoding are CPU work, ingest blocks."""
        try:
            self._sink.check_backlog()
        except RetryLater as exc:
            raise self._unavailable(str(exc)) from exc
        self._sink.give_way()
        if gzipped:
            body = self._gunzip(body, share)
        try:
            if body_format is BodyFormat.PROTOBUF:
                request, protobuf = parse_request(body), body
            else:
                request, protobuf = otlp_json.parse_request(body), None
        except DecodeError as exc:
            raise _bad_request(str(exc)) from exc
        try:
            return self._sink.ingest(request, protobuf)
        except RetryLater as exc:
            raise self._unavailable(str(exc)) from exc

    def _gunzip(self, body: bytes, share: _Share) -> bytes:
        """Inflate, never past the receive limit, growing the admission share as it goes.

        Concatenated members are one valid stream (RFC 1952), up to MAX_GZIP_MEMBERS.
        Input goes in slices of GZIP_INPUT_BYTES: zlib copies what follows a member's
        end, so the whole rest for each of many empty members was quadratic.
        """
        inflated = bytearray()
        view = memoryview(body)
        position = 0
        members = 0
        while position < len(body):
            members += 1
            if members > MAX_GZIP_MEMBERS:
                raise _bad_request(
                    f"more than {MAX_GZIP_MEMBERS} concatenated gzip members in one body"
                )
            inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            data: bytes | memoryview = b""
            while not inflater.eof:
                if not data:
                    if position >= len(body):
                        raise _bad_request("truncated gzip body")
                    data = view[position : position + GZIP_INPUT_BYTES]
                    position += len(data)
                try:
                    chunk = inflater.decompress(data, INFLATE_CHUNK_BYTES)
                except zlib.error as exc:
                    raise _bad_request(f"corrupt gzip body: {exc}") from exc
                data = inflater.unconsumed_tail
                inflated += chunk
                if len(inflated) > self._max_receive_bytes:
                    raise self._too_large()
                if not share.grow_to(len(body) + len(inflated)):
                    raise self._at_capacity()
            # What the last slice held past this member's end starts the next one.
            position -= len(inflater.unused_data)
        return bytes(inflated)

    def _too_large(self) -> Refused:
        return Refused(
            413,
            code_pb2.RESOURCE_EXHAUSTED,
            f"export larger than the receive limit of {self._max_receive_bytes} bytes "
            "(after decompression); send smaller batches",
        )

    def _too_slow(self) -> Refused:
        pace = self._pace
        return Refused(
            408,
            code_pb2.DEADLINE_EXCEEDED,
            f"the body arrived too slowly: send it within {pace.grace_seconds:g} s plus one "
            f"second per {pace.min_bytes_per_second} bytes, without pausing "
            f"{pace.grace_seconds:g} s, and within {pace.max_seconds:g} s in all",
        )

    def _at_capacity(self) -> Refused:
        return self._unavailable(AT_CAPACITY_MESSAGE)

    def _unavailable(self, message: str) -> Refused:
        return Refused(503, code_pb2.UNAVAILABLE, message)

    def _refusal(self, refusal: Refused, body_format: BodyFormat) -> Response:
        retry = None
        headers: dict[str, str] = {}
        if refusal.http_status == 503:
            delay = retry_delay_seconds(self._retry_after_seconds)
            retry = retry_info(delay)
            headers["Retry-After"] = str(delay)
            logger.debug("export refused, client told to retry: %s", refusal.message)
        elif refusal.http_status == 408:
            # The rest of the body may still be on its way: end the connection.
            headers["Connection"] = "close"
        elif refusal.http_status == 401:
            # RFC 9110: a 401 names the scheme that would be accepted.
            headers["WWW-Authenticate"] = 'Bearer realm="statetrail"'
        status = error_status(
            refusal.code, refusal.message, retry, bad_request=refusal.http_status == 400
        )
        return Response(
            body_format.serialize(status),
            status_code=refusal.http_status,
            headers=headers,
            media_type=body_format.value,
        )


class _Share:
    """One upload's part of the admission budget: bytes as its body arrives and
    inflates, and a slot once it has arrived."""

    def __init__(self, admission: Admission, client: Client) -> None:
        self._admission = admission
        self._client = client
        self._size = 0
        self._slot = False
        admission.open_upload(client)

    def take_slot(self) -> bool:
        self._slot = self._admission.try_take_slot(self._client)
        return self._slot

    def grow_to(self, size: int) -> bool:
        if size <= self._size:
            return True
        if not self._admission.try_grow(size - self._size, self._client):
            return False
        self._size = size
        return True

    def leave(self) -> None:
        self._admission.leave(self._size, self._client, slot=self._slot)


def _is_gzipped(content_encoding: str | None) -> bool:
    coding = (content_encoding or "identity").strip().lower()
    if coding == "gzip":
        return True
    if coding == "identity":
        return False
    raise Refused(415, code_pb2.INVALID_ARGUMENT, f"Content-Encoding {coding!r}: send gzip or none")


def _declared_length(content_length: str | None) -> int | None:
    if content_length is None:
        return None
    try:
        length = int(content_length)
    except ValueError:
        length = -1
    if length < 0:
        raise _bad_request("Content-Length is not a byte count")
    return length


def _bad_request(message: str) -> Refused:
    return Refused(400, code_pb2.INVALID_ARGUMENT, message)
