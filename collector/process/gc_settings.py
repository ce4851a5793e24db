"""Settings of Python's cyclic garbage collector for the long-running processes.

Extraction and replay allocate container objects by the million (NamedTuple
rows, field-index keys, decoded JSON), nearly all freed by reference counting
and almost none in a cycle. The collector still runs a young collection every
2,000 net allocations, and every full one walks everything the process
imported. What exists once a process is ready to serve lives for good, so
`freeze_startup` moves it out of every collection. The extraction worker, which no
request waits on, also collects less often; serve does not, since a longer young
collection holds the interpreter lock while a page waits (docs/memory.md, "Log").
"""

from __future__ import annotations

import gc
from typing import Final

YOUNG_COLLECTION_THRESHOLD: Final = 50_000


def freeze_startup() -> None:
    """Keep what exists now out of every later collection.

    Call once the process has imported what it runs, just before it serves.
    """
    gc.collect()
    gc.freeze()


def collect_less_often() -> None:
    """Collect the youngest objects every YOUNG_COLLECTION_THRESHOLD net allocations.

    For a process that no request waits on: each collection is longer.
    """
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, older, oldest)
