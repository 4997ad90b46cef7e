"""RebuildGc: the cyclic garbage collector paused while markers partitions rebuild."""

from __future__ import annotations

import gc


class RebuildGc:
    """A rebuild allocates millions of acyclic objects; the cyclic GC would scan them again and again (~30% of the
    rebuild time), so it pauses while partitions rebuild, then freezes what was built."""

    def __init__(self) -> None:
        self.paused = False

    def pause(self) -> None:
        if not self.paused and gc.isenabled():
            gc.disable()
            self.paused = True

    def resume(self) -> None:
        if self.paused:
            gc.freeze()
            gc.enable()
            self.paused = False
