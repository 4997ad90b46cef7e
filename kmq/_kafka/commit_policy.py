"""When a reader commits its consumed offsets: every N records or every T seconds (consumer and tracker alike)."""

from __future__ import annotations

import time
from collections.abc import Callable


class CommitPolicy:
    """Counts records handled since the last commit; ``due()`` once there are ``every_records`` of them or
    ``every_s`` seconds have passed. Pure: the clock is injected."""

    __slots__ = ("_clock", "_last", "_since", "every_records", "every_s")

    def __init__(self, every_records: int, every_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if every_records <= 0 or every_s <= 0:
            raise ValueError(f"commit policy needs positive limits, got {every_records} records / {every_s} s")
        self.every_records = every_records
        self.every_s = every_s
        self._clock = clock
        self._since = 0
        self._last = clock()

    def note(self, records: int) -> None:
        self._since += records

    def due(self) -> bool:
        return self._since >= self.every_records or self._clock() - self._last >= self.every_s

    def committed(self) -> None:
        self._since = 0
        self._last = self._clock()
