"""Ingestion API keys: where a request carries one, and whether it is accepted.

Keys are compared by their SHA-256 digest, so a lookup takes the same time
whatever the presented key shares with a real one, and the plain key need not
be kept in memory longer than it takes to hash it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable

JUNJO_KEY_HEADER = "x-junjo-api-key"
AUTHORIZATION_HEADER = "authorization"
BEARER_PREFIX = "bearer "


def digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def presented_key(headers: Iterable[tuple[str, str | bytes]]) -> str | None:
    """The key a request carries, as Junjo's header or an `authorization: Bearer`.

    Junjo's header wins when both are sent, whatever their order: which key is
    checked must not depend on how a proxy happened to order the headers.
    """
    bearer: str | None = None
    for name, value in headers:
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        lowered = name.lower()
        if lowered == JUNJO_KEY_HEADER and text:
            return text
        if (
            bearer is None
            and lowered == AUTHORIZATION_HEADER
            and text.lower().startswith(BEARER_PREFIX)
        ):
            bearer = text[len(BEARER_PREFIX):].strip()
    return bearer or None


class KeyChecker:
    """Accepts the configured keys, plus any that `extra` (the key store) vouches for.

    With neither, every request is accepted (config refuses that beyond loopback).
    `extra_required` says whether the key store has any keys; without it, giving
    `extra` requires a key.
    """

    def __init__(
        self,
        keys: Iterable[str],
        extra: Callable[[str], bool] | None = None,
        *,
        extra_required: Callable[[], bool] | None = None,
    ) -> None:
        self._digests = frozenset(digest(key) for key in keys)
        self._extra = extra
        self._extra_required = extra_required

    @property
    def required(self) -> bool:
        if self._digests:
            return True
        if self._extra is None:
            return False
        return self._extra_required is None or self._extra_required()

    def accepts(self, key: str | None) -> bool:
        if not self.required:
            return True
        if key is None:
            return False
        key_digest = digest(key)
        if key_digest in self._digests:
            return True
        return self._extra is not None and self._extra(key_digest)
