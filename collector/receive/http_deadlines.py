"""The HTTP port's connection deadlines: a request head must arrive in time.

uvicorn's keep-alive timer is reset by any byte and absent before a connection's
first response, so a client trickling header lines could hold a connection for good.
`head_deadline_protocol` closes a connection whose request head is not complete within
the deadline (408), and a response sent before its body was read to the end closes
the connection too, so the rest cannot be trickled. The body is otlp_http.py's to time.
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
