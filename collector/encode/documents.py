"""The executions' large JSON documents (start state, end state, graph), stored compressed.

They are most of an execution row, and the memory DuckDB's checkpoint takes to rewrite
a table's last row group grows with the text in it. Every document of a write is
compressed with zstd in one call (`multi_compress_to_buffer`), which releases the
interpreter lock once for the lot: one call per document gave a receiver's thread
the lock back many times per execution, each wait up to a switch interval. Older
rows are zlib streams; `unpack` tells the two apart by their first bytes. Nothing
queries inside these documents in SQL: they are read whole, by run id.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import fields
from typing import Any, Final

import pyarrow as pa
import zstandard

from collector.model import Execution

# Level 1: the ingest path pays for compression, and higher levels saved little more.
_LEVEL: Final = 1
COLUMNS: Final = ("state_start", "state_end", "graph_snapshot")

# zstandard's contexts are not safe to share between threads: the studio's
# requests and the replayer read documents at the same time.
_local = threading.local()


def packed_column(texts: Iterable[str | None]) -> pa.Array:
    """Documents compressed as one Arrow column, ready to insert; None stays None.

    "surrogatepass" keeps any str, even one JSON's lone-surrogate escapes
    produced, so what is read back is what was written.
    """
    encoded = [None if text is None else text.encode("utf-8", "surrogatepass") for text in texts]
    frames = iter(_compressed([data for data in encoded if data is not None]))
    return pa.array([None if data is None else next(frames) for data in encoded], pa.binary())


def _compressed(parts: list[bytes]) -> list[bytes]:
    compressor = zstandard.ZstdCompressor(level=_LEVEL)
    if not any(parts):
        # The batch call refuses a batch with no bytes at all (or no parts).
        return [compressor.compress(part) for part in parts]
    batch: list[bytes | bytearray | memoryview] = list(parts)
    frames = compressor.multi_compress_to_buffer(batch)
    return [frames[index].tobytes() for index in range(len(frames))]


def unpack(stored: bytes | None) -> str | None:
    """A stored document back as the text that was received."""
    if stored is None:
        return None
    if stored.startswith(zstandard.FRAME_HEADER):
        data = _decompressor().decompress(stored)
    else:
        data = zlib.decompress(stored)
    return data.decode("utf-8", "surrogatepass")


def _decompressor() -> zstandard.ZstdDecompressor:
    decompressor: zstandard.ZstdDecompressor | None = getattr(_local, "decompressor", None)
    if decompressor is None:
        decompressor = _local.decompressor = zstandard.ZstdDecompressor()
    return decompressor


_POSITIONS: Final = tuple(
    index for index, field in enumerate(fields(Execution)) if field.name in COLUMNS
)


def execution_from_row(row: Sequence[Any]) -> Execution:
    """An `Execution` from a row selected in its field order, documents unpacked."""
    values = list(row)
    for index in _POSITIONS:
        values[index] = unpack(values[index])
    return Execution(*values)
