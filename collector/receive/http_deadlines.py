"""The HTTP port's connection deadlines: a request head must arrive in time.

uvicorn closes a keep-alive connection that sends nothing for
`timeout_keep_alive` seconds, but any byte resets that timer, and a new
connection has no timer at all until its first response: a client sending one
header line a second held its connection (and its file descriptor) for as long
as it liked. `head_deadline_protocol` makes uvicorn's h11 protocol close a
connection whose request head has not completed within the deadline, counted
from when the connection was opened or its previous response was sent, with a
408 answer. The body is the application's to time (collector/receive/otlp_http.py).

A response sent before its request's body was read to the end also closes the
connection: otherwise the client could go on trickling the rest of that body,
which uvicorn reads and drops, for as long as it liked.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar, Final

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

_LATE_HEAD_MESSAGE: Final = b"the request head did not arrive in time"
HEAD_TIMEOUT_ANSWER: Final = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s"
    % (len(_LATE_HEAD_MESSAGE), _LATE_HEAD_MESSAGE)
)


class HeadDeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol, closing connections whose request head is late."""

    head_timeout_seconds: ClassVar[float] = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._expect_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state is not h11.IDLE:
            # The head is in (or the connection is ending): the body has its own deadlines.
            self._cancel_head_timer()

    def on_response_complete(self) -> None:
        if self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
            self.transport.close()
        super().on_response_complete()
        if self.conn.their_state is h11.IDLE:
            self._expect_head()

    def _expect_head(self) -> None:
        self._cancel_head_timer()
        if not self.transport.is_closing():
            self._head_timer = self.loop.call_later(self.head_timeout_seconds, self._head_late)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.write(HEAD_TIMEOUT_ANSWER)
            self.transport.close()


def head_deadline_protocol(head_timeout_seconds: float) -> type[HeadDeadlineProtocol]:
    """The protocol class to hand uvicorn (`http=`), with this deadline for a request head."""
    return type(
        "HeadDeadlineProtocol",
        (HeadDeadlineProtocol,),
        {"head_timeout_seconds": head_timeout_seconds},
    )
