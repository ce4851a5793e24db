"""Spans' own protobuf bytes, stored compressed: one chunk per export.

Why not a BLOB per span: a span's bytes are most of what ingest writes (~2.4 KB
a span in bench_ingest's load, against ~150 bytes of columns). As a BLOB per
span they cost DuckDB ~25 us a span, written once to the WAL and again at the
checkpoint: two thirds of a commit, and most of the WAL whose checkpoints set
the server's peak RSS. Joined per export and compressed with zstd at level 1
(in C, without the interpreter lock) they cost ~1 us a span and shrink 5-50
times: OTLP repeats its attribute keys and Junjo its state shapes, span after
span. A span row keeps where its bytes are: (chunk_id, offset, length) in the
chunk's uncompressed bytes.

A chunk is stored as pieces of at most PIECE_BYTES, one row each
(`span_chunk_pieces`, migration m018), not as one BLOB. DuckDB keeps a longer
string in overflow blocks, and a checkpoint rewrites the last row group of
every table appended to, reading all of that row group's overflow strings
back: outside its memory limit, or pinned within it. In a one-process copy
of bench_ingest's chunks (~25 KB, ~2,000 to a row group) that took up to ~45
MB past an 80 MB limit at a checkpoint. Chunks of ~1 MB (exports of LLM text,
which compresses little) made the checkpoint fail once ~65 of them shared a
row group at a 48 MB limit: a fatal error, after which the file could not be
checkpointed at all. Pieces this short stay in the column's own blocks, which
the buffer pool manages. The column is stored uncompressed: a chunk's bytes do
not compress again, and DuckDB's analysis for dictionary compression copies a
row group's strings outside its limit (measured with duckdb 1.5.5: December
2026).

Reading a trace decompresses each chunk it touches once (~1 ms for a 1 MB
export). A chunk is deleted when no span refers to it any more
(collector/store/retention.py). Spans stored before migration m011 keep their
bytes in `spans.raw`; later rows have an empty `raw` and a chunk.

Pure: no SQL here; the reads are in collector/store/spans.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import pyarrow as pa

CODEC: Final = "zstd"
# Level 1: the ingest path pays; level 3 saved ~6% more in bench_ingest's load.
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
