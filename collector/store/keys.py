"""Storage of managed ingestion keys: the SQL behind `statetrail keys` and the key check.

Invariant: only a key's SHA-256 digest is stored (see `collector.receive.auth.digest`),
never the key itself, so reading the database does not reveal a usable key. A
revoked key keeps its row (name, times) for the audit trail; at most one key per
name is active at a time. Times are integer nanoseconds since the epoch.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from collector.store.transactions import transaction


class KeyNameTaken(ValueError):
    """An active key already has this name; revoke it first or choose another."""


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One managed key as the operator sees it (the digest stays in the database)."""

    name: str
    created_unix_nano: int
    last_used_unix_nano: int | None
    revoked_unix_nano: int | None

    @property
    def active(self) -> bool:
        return self.revoked_unix_nano is None


_COLUMNS = "name, created_unix_nano, last_used_unix_nano, revoked_unix_nano"


def insert_key(cursor: duckdb.DuckDBPyConnection, name: str, key_digest: str, now: int) -> ApiKey:
    """Record a new key; raises KeyNameTaken if an active key has the name, StoreError."""
    with transaction(cursor, "could not record the key"):
        taken = cursor.execute(
            "SELECT 1 FROM api_keys WHERE name = ? AND revoked_unix_nano IS NULL", [name]
        ).fetchone()
        if taken is not None:
            raise KeyNameTaken(f"an active key is already named {name!r}; revoke it first")
        cursor.execute(
            "INSERT INTO api_keys (key_digest, name, created_unix_nano) VALUES (?, ?, ?)",
            [key_digest, name, now],
        )
    return ApiKey(name, now, None, None)


def select_keys(cursor: duckdb.DuckDBPyConnection) -> list[ApiKey]:
    rows = cursor.execute(
        f"SELECT {_COLUMNS} FROM api_keys ORDER BY created_unix_nano, name"
    ).fetchall()
    return [ApiKey(*row) for row in rows]


def revoke_key(cursor: duckdb.DuckDBPyConnection, name: str, now: int) -> ApiKey | None:
    """Revoke the active key with this name; None if there is none."""
    row = cursor.execute(
        "UPDATE api_keys SET revoked_unix_nano = ?"
        f" WHERE name = ? AND revoked_unix_nano IS NULL RETURNING {_COLUMNS}",
        [now, name],
    ).fetchone()
    return ApiKey(*row) if row else None


def select_digests(cursor: duckdb.DuckDBPyConnection) -> tuple[frozenset[str], int]:
    """The digests of the active keys, and how many keys exist at all (revoked too)."""
    rows = cursor.execute("SELECT key_digest, revoked_unix_nano FROM api_keys").fetchall()
    return frozenset(digest for digest, revoked in rows if revoked is None), len(rows)


def touch_key(cursor: duckdb.DuckDBPyConnection, key_digest: str, now: int) -> None:
    cursor.execute(
        "UPDATE api_keys SET last_used_unix_nano = ? WHERE key_digest = ?", [now, key_digest]
    )
