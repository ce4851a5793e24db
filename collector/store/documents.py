"""The executions' large JSON documents (start state, end state, graph), stored compressed.

They are most of an execution row: about 7 KB of text against a few hundred
bytes for everything else in bench_ingest's load, and real states are larger.
At every checkpoint DuckDB rewrites a table's last, partly filled row group
(up to 122,880 rows), and the memory that rewrite takes grew with the text in
it: in process, a checkpoint after 77k, 154k and 230k spans of that load
raised RSS by 46, 147 and 179 MB with the text stored as VARCHAR (or as an
uncompressed BLOB), and by 76, 50 and 63 MB compressed. zlib at level 1
shrinks these documents about five times, for ~50 us an execution. (Smaller
row groups bounded the spike too, but ran DuckDB out of its memory limit
while storing; see the note on issue 2.)

Nothing queries inside these documents in SQL: they are read whole, by run id,
into `Execution` (collector/store/replays.py).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from dataclasses import fields
from typing import Any, Final

import pyarrow as pa

from collector.model import Execution

# Level 1: the ingest path pays for compression; higher levels saved ~5% more.
_LEVEL: Final = 1
COLUMNS: Final = ("state_start", "state_end", "graph_snapshot")


def pack(text: str | None) -> bytes | None:
    """A document as stored. "surrogatepass" keeps any str, even one JSON's
    lone-surrogate escapes produced, so what is read back is what was written."""
    if text is None:
        return None
    return zlib.compress(text.encode("utf-8", "surrogatepass"), _LEVEL)


def packed_column(texts: Iterable[str | None]) -> pa.Array:
    """Documents packed as one Arrow column, ready to insert."""
    return pa.array([pack(text) for text in texts], pa.binary())


def unpack(stored: bytes | None) -> str | None:
    """A stored document back as the text that was received."""
    if stored is None:
        return None
    return zlib.decompress(stored).decode("utf-8", "surrogatepass")


_POSITIONS: Final = tuple(
    index for index, field in enumerate(fields(Execution)) if field.name in COLUMNS
)


def execution_from_row(row: Sequence[Any]) -> Execution:
    """An `Execution` from a row selected in its field order, documents unpacked."""
    values = list(row)
    for index in _POSITIONS:
        values[index] = unpack(values[index])
    return Execution(*values)
