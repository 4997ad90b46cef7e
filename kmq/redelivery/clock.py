"""The deadline clock of one markers partition: broker log time, advanced by a local monotonic clock.

Deadlines are marker timestamps (LogAppendTime: the broker's clock) plus ``redeliver_after_ms``. The partition's
"now" is the newest marker timestamp seen, extrapolated with the local monotonic clock for the time since that
marker arrived once ``use_now_if_no_marker_seen_ms`` has passed (kafka-mq-go's rule; 0 = always extrapolate).
So "now" trails the broker's time by how late the marker it is based on was read: after reading a backlog
(a restart, a partition handed over) that can be long, and on a partition where no newer marker comes it stays
so. A broker timestamp learnt another way (a clock probe's delivery report) can be observed with the local time
it was learnt at.
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

    def observe(self, timestamp_ms: int, seen_at: float | None = None) -> None:
        """Records a broker timestamp, learnt at monotonic time ``seen_at`` (default: now). The clock never runs
        backwards: a timestamp that would put "now" behind the extrapolated one (a marker read late, the same
        millisecond, a broker clock step) re-bases on that "now" instead."""
        if timestamp_ms <= 0:
            return
        mono = self.monotonic()
        seen = mono if seen_at is None else min(seen_at, mono)
        current = self.now_ms()
        if current is not None and timestamp_ms + int((mono - seen) * 1000) <= current:
            self.last_timestamp_ms, self._seen_at = current, mono
        else:
            self.last_timestamp_ms, self._seen_at = timestamp_ms, seen

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
