"""OTLP JSON: an export request in the OTLP/HTTP JSON encoding -> its protobuf message.

Pure. Protobuf's JSON mapping, but ids are hex where protobuf says base64. Invariant:
`parse_request` returns an ExportTraceServiceRequest or raises DecodeError; a malformed
id rejects only its span (it arrives as an id of impossible length).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from typing import Any, Final

from google.protobuf import json_format

from collector.decode.otlp import DecodeError, ExportRequestPB2

_HEX_DIGITS = re.compile(r"[0-9a-fA-F]*")
_SPAN_ID_FIELDS: Final = ("traceId", "spanId", "parentSpanId")
_LINK_ID_FIELDS: Final = ("traceId", "spanId")


def parse_request(body: bytes) -> ExportRequestPB2:
    """An OTLP JSON export request: hex ids rewritten to base64 where the encoding names
    them, then protobuf's parser (unknown fields ignored, as the encoding requires).
    Raises DecodeError."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise DecodeError(f"body is not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise DecodeError("body is not a JSON object (an ExportTraceServiceRequest)")
    for span in _children(document, "resourceSpans", "scopeSpans", "spans"):
        _hex_ids_to_base64(span, _SPAN_ID_FIELDS)
        for link in _children(span, "links"):
            _hex_ids_to_base64(link, _LINK_ID_FIELDS)
    request = ExportRequestPB2()
    try:
        json_format.ParseDict(document, request, ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
        raise DecodeError(f"body is not an OTLP JSON ExportTraceServiceRequest: {exc}") from exc
    return request


def _children(parent: dict[str, Any], *path: str) -> Iterator[dict[str, Any]]:
    """The objects at `path` below `parent`, under either JSON or proto field names.

    Anything of the wrong shape is skipped here: ParseDict reports it properly.
    """
    if not path:
        yield parent
        return
    head, rest = path[0], path[1:]
    for name in _spellings(head):
        items = parent.get(name)
        if isinstance(items, list):
            for item in items:
                if isinstance(item, dict):
                    yield from _children(item, *rest)


def _hex_ids_to_base64(message: dict[str, Any], fields: tuple[str, ...]) -> None:
    for field in fields:
        for name in _spellings(field):
            if name not in message:
                continue
            value = message[name]
            if value is None:
                # proto3's JSON mapping reads null as the field's default: no id.
                del message[name]
            else:
                message[name] = _hex_to_base64(value)


def _hex_to_base64(value: object) -> str:
    """A hex id as the base64 ParseDict reads; anything else as MALFORMED_ID."""
    if not isinstance(value, str) or len(value) % 2 or not _HEX_DIGITS.fullmatch(value):
        return _MALFORMED_ID
    return base64.b64encode(bytes.fromhex(value)).decode("ascii")


# A malformed id becomes one byte, a length no id has, so the span is rejected by
# the same check as any wrong-sized id (collector/decode/otlp.py) and the rest of the
# request is stored; a 400 for the whole request lost every span in it, for good.
_MALFORMED_ID: Final = base64.b64encode(b"\x00").decode("ascii")


def _spellings(json_name: str) -> tuple[str, ...]:
    """The lowerCamelCase name OTLP JSON uses, and the proto name ParseDict also takes.

    A one-word name is spelled once: visiting it twice would convert an id twice.
    """
    proto_name = re.sub(r"[A-Z]", lambda m: "_" + m.group().lower(), json_name)
    return (json_name,) if proto_name == json_name else (json_name, proto_name)
