"""Which slice of a long list a bounded view shows: a window centred on one item.

Pure arithmetic shared by the execution page's views (the timeline's rows, the
provenance panel's writes), so the two windows move the same way.
"""

from __future__ import annotations


def centred_window(index: int, total: int, size: int) -> int:
    """The first index of `size` items out of `total` with item `index` near the middle.

    The window is pushed back inside the list at either end rather than cut
    short, so it holds `size` items whenever there are that many. `index` may
    be -1 (before the first item: the timeline's start state).
    """
    return min(max(index - size // 2, 0), max(total - size, 0))
