"""Settings of Python's cyclic garbage collector for the long-running processes.

Extraction and replay allocate container objects by the million (NamedTuple
rows, field-index keys, decoded JSON), nearly all freed by reference counting
and almost none in a cycle. The collector still runs a young collection every
2,000 net allocations, and every full one walks everything the process
imported. Measured with gc.callbacks on bench_ingest's exports (/tmp scripts):

- What exists once a process is ready to serve (modules, classes, templates)
  lives for good, so `freeze_startup` moves it out of every collection.
  Replaying 2,040 executions in a process that imported the studio spent
  234-337 ms collecting (two runs), its longest pause 84-101 ms (a full
  collection); frozen, 150-251 ms and 34-38 ms.
- The extraction worker also collects less often (`collect_less_often`):
  preparing 20 runs of 4 exports spent 91-168 ms of 1.5-2.2 s collecting
  (6-8%); with both settings under 1 ms. Cycles are still found, after 50,000
  net allocations instead of 2,000: a few MB of garbage at most.
- serve does not: each young collection then takes 10-30 ms while holding
  the interpreter lock, and the executions page's p95 under full ingest
  (bench_studio_load) was 106-146 ms in four runs against 99-104 ms in three
  without. With the freeze alone it was 111-153 ms against 117-149 ms
  (three runs each, interleaved).
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
