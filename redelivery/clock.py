"""The deadline clock of one markers partition: broker log time, advanced by a local monotonic clock.

Deadlines are marker timestamps (LogAppendTime: the broker's clock) plus ``redeliver_after_ms``. The partition's
"now" is the newest marker timestamp seen, extrapolated with the local monotonic clock for the time since that
marker arrived once ``use_now_if_no_marker_seen_ms`` has passed (kafka-mq-go's rule; 0 = always extrapolate).
No wall clock of this host is ever read, so its skew cannot fire anything early.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

Monotonic = Callable[[], float]


@dataclass(slots=True)
class DeadlineClock:
    use_now_if_no_marker_seen_ms: int = 0
    monotonic: Monotonic = field(default=time.monotonic, repr=False)
    last_timestamp_ms: int = 0
    _seen_at: float = 0.0

    def observe(self, timestamp_ms: int) -> None:
        """Records a marker's log timestamp. The clock never runs backwards: a marker stamped before the
        extrapolated "now" (same millisecond, a broker clock step) re-bases on that "now" instead."""
        if timestamp_ms <= 0:
            return
        self.last_timestamp_ms = max(timestamp_ms, self.now_ms() or 0)
        self._seen_at = self.monotonic()

    def now_ms(self) -> int | None:
        """The partition's current time in ms, or None before any marker was seen."""
        if self.last_timestamp_ms == 0:
            return None
        elapsed_ms = int((self.monotonic() - self._seen_at) * 1000)
        if elapsed_ms < self.use_now_if_no_marker_seen_ms:
            return self.last_timestamp_ms
        return self.last_timestamp_ms + elapsed_ms

    def ms_until(self, timestamp_ms: int) -> int | None:
        """Local milliseconds until ``now_ms()`` reaches ``timestamp_ms`` if no marker comes meanwhile (0 if it
        has), or None before any marker was seen: how long the tracker may sleep before a deadline is due."""
        if self.last_timestamp_ms == 0:
            return None
        if timestamp_ms <= self.last_timestamp_ms:
            return 0
        elapsed_ms = int((self.monotonic() - self._seen_at) * 1000)
        # The clock stands still until use_now has passed, then jumps to the extrapolated time.
        needed_ms = max(self.use_now_if_no_marker_seen_ms, timestamp_ms - self.last_timestamp_ms)
        return max(0, needed_ms - elapsed_ms)
