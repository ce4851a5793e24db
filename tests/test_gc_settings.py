"""The extraction worker's collector settings, in a fresh interpreter (they are process-wide)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# Makes a million reference cycles, dropped at once, and reports the most
# objects the collector tracked meanwhile, with and without the settings.
PROBE = textwrap.dedent(
    """
    import gc, sys
    import collector.producers.junjo  # something imported before serving, to be frozen
    if sys.argv[1] == "tuned":
        from collector.process.gc_settings import collect_less_often, freeze_startup
        freeze_startup()
        collect_less_often()
    most = 0
    for number in range(1_000_000):
        cycle = [number]
        cycle.append(cycle)
        if number % 10_000 == 0:
            most = max(most, len(gc.get_objects()))
    print(gc.get_threshold()[0], gc.get_freeze_count(), most)
    """
)


def _probe(mode: str) -> tuple[int, int, int]:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True
    )
    threshold, frozen, most = (int(word) for word in result.stdout.split())
    return threshold, frozen, most


def test_cycles_are_still_collected_just_less_often_and_imports_are_frozen() -> None:
    threshold, frozen, plain_most = _probe("plain")
    assert (threshold, frozen) == (2_000, 0)

    threshold, frozen, tuned_most = _probe("tuned")
    assert threshold == 50_000
    # The imported modules' objects are out of every collection's way...
    assert frozen > 10_000
    # ...and a million cycles never pile up: each young collection frees them.
    assert tuned_most < 200_000
    assert tuned_most < plain_most + 2 * threshold
