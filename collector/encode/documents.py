"""The executions' large JSON documents (start state, end state, graph), stored compressed.

They are most of an execution row: about 7 KB of text against a few hundred
bytes for everything else in bench_ingest's load, and real states are larger.
At every checkpoint DuckDB rewrites a table's last, partly filled row group
(up to 122,880 rows), and the memory that rewrite takes grew with the text in
it: in process, a checkpoint after 77k, 154k and 230k spans of that load
raised RSS by 46, 147 and 179 MB with the text stored as VARCHAR (or as an
uncompressed BLOB), and by 76, 50 and 63 MB compressed. (Smaller row groups
bounded the spike too, but ran DuckDB out of its memory limit while storing;
see the note on issue 2.)

How: zstd at level 1, every document of a write in one call
(`multi_compress_to_buffer`), which releases the interpreter lock once for the
lot. Compressing them one at a time with zlib, as statetrail did first, let go
of the lock three times an execution, and each time it could take a switch
interval to get it back from a receiver: beside one busy thread, storing went
from 12.6k to 2.1k spans/s, against 4.3k with no compression at all. zlib's
level 1 also cost ~55 us a document, zstd's ~4, for the same ratio (about
five times on these states). This is the zstandard package, not pyarrow's
codec that collector/encode/span_bytes.py uses: that one compresses one buffer
an export, and has no call for many.

Documents stored before this are zlib streams; `unpack` tells the two apart
by their first bytes (a zstd frame starts with its magic number, a zlib stream
with 0x78), so those rows read as they always did.

Nothing queries inside these documents in SQL: they are read whole, by run id,
into `Execution` (collector/store/replays.py).
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

# Level 1: the ingest path pays for compression; higher levels saved ~5% more.
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
