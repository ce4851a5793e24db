"""The store's exceptions: what callers see instead of DuckDB's own.

Receivers, studio pages and /healthz answer "unavailable, retry" on any
StoreError without knowing DuckDB; the extractor alone tells running out of
memory apart (collector/intake/extractor.py).
"""

from __future__ import annotations


class StoreError(RuntimeError):
    """The database could not do what was asked; data already committed is intact."""


class StoreOutOfMemory(StoreError):
    """DuckDB ran out of its memory limit. Unlike a full disk or a lock, it may be
    one write's own size: the extractor sets such an export aside (extractor.py)."""


class StoreLocked(StoreError):
    """Another process (usually a running `statetrail serve`) holds the file."""
