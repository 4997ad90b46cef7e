"""The collector's settings for a process that handles messages at a high rate (``tune_gc``).

CPython's cyclic collector runs a young collection every 700 allocations by default, and a full one, which scans
every object the process holds, after ten times ten of those. A consumer makes a few objects per message that live
a few milliseconds: long enough to outlive the young collections, so they keep the older generations growing.
Measured on a consumer with a backlog (``python -m tests.bench.profile_consumer``), a full collection then came every
~30,000 messages and scanned all that start-up left (~45,000 objects: modules, functions, classes), 20 ms each: the
collector took 15-20% of the process's CPU. ``tune_gc`` makes young collections seven times rarer and leaves
start-up's objects out of every later scan (``gc.freeze``), as long-running Python servers do.

kmq's own processes call it once they are set up (``kmq worker`` and its ``--processes`` children, the tracker);
a program that consumes through the library calls it itself, after its own set-up, because the collector's settings
belong to the whole process.
"""

from __future__ import annotations

import gc

#: Allocations between young collections (CPython's default: 700). At 5,000 a young collection still takes well
#: under a millisecond, and the objects waiting for it stay a few hundred kB.
YOUNG_THRESHOLD = 5_000


def tune_gc(young_threshold: int = YOUNG_THRESHOLD) -> None:
    """Tunes the cyclic collector for message handling; call it once set-up is done (handlers imported, clients
    built). Collects what set-up left as garbage, then freezes what survives (never scanned again: objects made
    so far and dropped later are never collected, so call it after set-up, not before), and raises the young
    collection threshold to ``young_threshold`` (never lowers it)."""
    if young_threshold < 1:
        raise ValueError(f"young_threshold must be >= 1 allocation, got {young_threshold}")
    gc.collect()
    gc.freeze()
    young, *older = gc.get_threshold()
    if young < young_threshold:
        gc.set_threshold(young_threshold, *older)
