"""Settings of Python's cyclic garbage collector for the long-running processes.

Extraction and replay allocate container objects by the million (NamedTuple
rows, field-index keys, decoded JSON), nearly all freed by reference counting
and almost none in a cycle. The collector still runs a young collection every
2,000 net allocations, and every full one walks everything the process has
imported. Measured with gc.callbacks (/tmp scripts, bench_ingest's exports):

- preparing 20 runs of 4 exports, as the extraction worker does, spent
  91-168 ms of 1.5-2.2 s collecting (6-8%); with these settings under 1 ms;
- replaying 2,040 executions (bench_replayer's small store) spent 184-281 ms
  of 4.3-6 s collecting (4-5%); with these settings 24-27 ms.

Only how often the youngest generation is collected changes: cycles are still
found, after 50,000 net allocations instead of 2,000 (a few MB of garbage at
most). What was allocated before serving starts (modules, classes, templates)
lives for good, so it is frozen out of every collection.
"""

from __future__ import annotations

import gc
from typing import Final

YOUNG_COLLECTION_THRESHOLD: Final = 50_000


def tune_for_throughput() -> None:
    """Freeze what exists now and collect the youngest objects less often.

    Call once the process has imported what it runs, just before it starts
    serving: what exists then is frozen.
    """
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, older, oldest)
