"""BrokerTime: how late it is on the broker's clock, bounded from above, learnt from the consumer's own markers.

A tracker's deadlines are marker LogAppendTimes plus the redelivery timeout, on the broker's clock. A consumer
about to hand out a message needs to know whether that deadline may have passed while the message waited (a
failover can hold a Start's commit, and the keep-alives meant to cover the wait, for many seconds). Every marker
record it writes was appended no earlier than it was sent, so ``appended_ms - sent_at`` is at least the offset
between the broker's clock and this host's monotonic clock: the smallest such difference among recent records,
plus the monotonic time now, is a bound the broker's time has not passed. It is tight when a record is appended
promptly (the common case) and errs late, never early (a stall only makes it pessimistic until the next prompt
record). No wall clock of this host is read, so its skew does not enter.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

#: Samples older than this no longer bound the offset (the two clocks drift apart slowly); the newest always does.
WINDOW_S = 60.0


class BrokerTime:
    """``observe`` from delivery-report threads, ``now_ms`` from any thread."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._samples: deque[tuple[float, float]] = deque()
        self._offset_ms: float | None = None

    def observe(self, sent_at: float, appended_ms: int) -> None:
        """A record sent at monotonic time ``sent_at`` was appended at broker time ``appended_ms``."""
        if appended_ms <= 0:
            return
        offset = appended_ms - sent_at * 1000
        with self._lock:
            # A sliding-window minimum (amortised O(1) per record: kafka-mq-go format reports one per message):
            # offsets increase from front to back, so a sample no smaller than a newer one can never be the
            # minimum again and is dropped; the front is the minimum, and the newest sample is always kept.
            samples = self._samples
            while samples and samples[-1][1] >= offset:
                samples.pop()
            samples.append((sent_at, offset))
            while len(samples) > 1 and samples[0][0] < sent_at - WINDOW_S:
                samples.popleft()
            self._offset_ms = samples[0][1]

    def now_ms(self) -> int | None:
        """A time the broker's clock has not passed yet, or None before any record was reported."""
        offset = self._offset_ms
        return None if offset is None else int(offset + self._monotonic() * 1000) + 1
