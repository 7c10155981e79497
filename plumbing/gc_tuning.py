"""Garbage collector settings for processes that hold millions of long-lived objects.

CPython's cyclic collector runs a young-generation pass every 700 net allocations and, now and
then, walks every object it tracks.  A resource manager with 15,000 nodes and hundreds of
thousands of containers, or a simulator replaying a large trace, allocates constantly and keeps
almost everything: those walks then cost milliseconds each and land inside requests
(bench/bench_core.py measured 6,000 grants per second with the defaults and 9,400 with these).
Nothing in these processes relies on the collector to free memory promptly: their records are
immutable and acyclic, so reference counting frees them.

:func:`tune_for_large_heaps` raises the young-generation threshold and moves what exists at
start-up (modules, the loaded state) out of the collector's sight with ``gc.freeze``, like
Instagram's production setting.  Collection still happens, only less often.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 100_000
"""Net allocations between young-generation passes (CPython's default: 700)."""


def tune_for_large_heaps() -> None:
    """Call once, after start-up and after loading state."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, 50, 1000)
