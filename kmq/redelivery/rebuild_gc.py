"""RebuildGc: the cyclic garbage collector paused while markers partitions rebuild."""

from __future__ import annotations

import gc
import threading


class RebuildGc:
    """A rebuild allocates millions of acyclic objects; the cyclic GC would scan them again and again (~30% of the
    rebuild time), so it pauses while partitions rebuild, then freezes what was built. The trackers of one process
    (one per topic set) share the pause: the GC runs again once none of them rebuilds."""

    _lock = threading.Lock()
    _holders = 0

    def __init__(self) -> None:
        self.paused = False

    def pause(self) -> None:
        with RebuildGc._lock:
            if self.paused or (RebuildGc._holders == 0 and not gc.isenabled()):
                return  # paused already, or the application keeps the GC off itself
            if RebuildGc._holders == 0:
                gc.disable()
            RebuildGc._holders += 1
            self.paused = True

    def resume(self) -> None:
        with RebuildGc._lock:
            if not self.paused:
                return
            self.paused = False
            RebuildGc._holders -= 1
            if RebuildGc._holders == 0:
                gc.freeze()
                gc.enable()
