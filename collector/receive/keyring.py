"""Managed ingestion keys as the receivers see them: a short-lived cache over the key store.

Invariant: a key revoked through this object is refused on the very next request
(every change drops the cache); `statetrail keys` reaches a running server's database
only through its admin route, hence through here. Fail closed: once any managed key
exists, even revoked, exports must carry an accepted key.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable

from collector.store import ApiKey, Store, StoreError

logger = logging.getLogger(__name__)

REFRESH_SECONDS = 1.0
# Last-used is for an operator deciding what to revoke: minute resolution is
# plenty, and it keeps accepted exports from writing to the database each time.
TOUCH_SECONDS = 60.0
MAX_NAME_LENGTH = 100
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:-]*")
_DIGEST = re.compile(r"[0-9a-f]{64}")


class KeyRequestInvalid(ValueError):
    """A key name or digest that cannot be stored; the message says what is allowed."""


def check_key_request(name: str, key_digest: str) -> None:
    if len(name) > MAX_NAME_LENGTH or not _NAME.fullmatch(name):
        raise KeyRequestInvalid(
            f"key name {name!r:.120}: use up to {MAX_NAME_LENGTH} letters, digits and . _ @ : -"
            ", starting with a letter or digit"
        )
    if not _DIGEST.fullmatch(key_digest):
        raise KeyRequestInvalid("key digest must be 64 lowercase hex digits (SHA-256)")


class ManagedKeys:
    """The key store's answers for `KeyChecker` (`accepts`, `any_exist`), plus its edits."""

    def __init__(
        self,
        store: Store,
        *,
        refresh_seconds: float = REFRESH_SECONDS,
        touch_seconds: float = TOUCH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._refresh_seconds = refresh_seconds
        self._touch_seconds = touch_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._touched: dict[str, float] = {}
        # Read once now so a broken key table fails the start, not the first export.
        self._active, self._count = store.api_key_digests()
        self._read_at = clock()

    def accepts(self, key_digest: str) -> bool:
        if key_digest not in self._snapshot()[0]:
            return False
        self._touch(key_digest)
        return True

    def any_exist(self) -> bool:
        return self._snapshot()[1] > 0

    def create(self, name: str, key_digest: str) -> ApiKey:
        """Record a key by its digest; raises KeyRequestInvalid, or KeyNameTaken."""
        check_key_request(name, key_digest)
        try:
            return self._store.create_api_key(name, key_digest)
        finally:
            self._invalidate()

    def revoke(self, name: str) -> ApiKey | None:
        try:
            return self._store.revoke_api_key(name)
        finally:
            self._invalidate()

    def list(self) -> list[ApiKey]:
        return self._store.list_api_keys()

    def _snapshot(self) -> tuple[frozenset[str], int]:
        with self._lock:
            if self._clock() - self._read_at >= self._refresh_seconds:
                self._refresh_locked()
            return self._active, self._count

    def _refresh_locked(self) -> bool:
        try:
            self._active, self._count = self._store.api_key_digests()
        except StoreError as exc:
            # Keep answering from the last good read (during shutdown, say)
            # rather than failing every export; no key changed since it.
            logger.warning("could not re-read the API keys: %s", exc)
            return False
        self._read_at = self._clock()
        return True

    def _invalidate(self) -> None:
        with self._lock:
            if not self._refresh_locked():
                # A just-revoked key may still be in the stale read: refuse every
                # managed key until the table can be read again.
                self._active = frozenset()
                self._read_at = float("-inf")

    def _touch(self, key_digest: str) -> None:
        now = self._clock()
        with self._lock:
            if now - self._touched.get(key_digest, -self._touch_seconds) < self._touch_seconds:
                return
            self._touched[key_digest] = now
        try:
            self._store.touch_api_key(key_digest)
        except StoreError as exc:
            logger.warning("could not record that an API key was used: %s", exc)
