"""Spans' own protobuf bytes, stored compressed: one chunk per export.

A span's bytes are most of what ingest writes; as a BLOB per span DuckDB writes them
twice (WAL, checkpoint) at a cost per span, while joined per export and compressed
(in C, without the interpreter lock) they shrink severalfold, since OTLP repeats its
keys and Junjo its state shapes. A span row keeps (chunk_id, offset, length) into the
chunk's uncompressed bytes. A chunk is stored as pieces of at most PIECE_BYTES
(migration m018): a checkpoint reads longer strings back outside DuckDB's memory
limit, and large chunks made checkpoints fail for good (docs/memory.md, "Span bytes
in pieces"). Spans stored before m011 keep their bytes in `spans.raw`.

Pure: no SQL here; the reads are in collector/store/spans.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import pyarrow as pa

CODEC: Final = "zstd"
# Level 1: the ingest path pays, and higher levels saved little more.
_LEVEL: Final = 1
_CODECS: Final = {CODEC: pa.Codec(CODEC, _LEVEL)}
# Under the 4,096 bytes past which DuckDB moves a string to overflow blocks.
PIECE_BYTES: Final = 4000


class ChunkError(ValueError):
    """A stored chunk cannot be read back (unknown codec, or damaged bytes)."""


def pack(parts: Sequence[bytes]) -> tuple[bytes, int]:
    """The parts joined and compressed, and their joined (uncompressed) size."""
    joined = b"".join(parts)
    body: bytes = _CODECS[CODEC].compress(joined, asbytes=True)
    return body, len(joined)


def pieces(body: bytes) -> list[bytes]:
    """A chunk's body cut into pieces of at most PIECE_BYTES, in order (one, if empty)."""
    if not body:
        return [body]
    return [body[start : start + PIECE_BYTES] for start in range(0, len(body), PIECE_BYTES)]


def unpack(codec: str, raw_size: int, body: bytes) -> bytes:
    """A chunk's uncompressed bytes. Raises ChunkError."""
    decompressor = _CODECS.get(codec)
    if decompressor is None:
        raise ChunkError(f"span chunk stored with unknown codec {codec!r}")
    try:
        joined: bytes = decompressor.decompress(body, raw_size, asbytes=True)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowIOError is an OSError
        raise ChunkError(f"span chunk does not decompress: {exc}") from exc
    if len(joined) != raw_size:
        raise ChunkError(f"span chunk holds {len(joined)} bytes, not {raw_size}")
    return joined
