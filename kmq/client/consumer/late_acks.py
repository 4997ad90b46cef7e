"""LateAcks: acks made after their message's redelivery deadline on the broker's clock. The process was frozen or
cut off from Kafka while the handler ran (a zombie), so the tracker may have delivered the message again meanwhile:
counted (``kmq_late_acks_total``) and said now and then, never refused (the work is done; refusing helps nobody)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import structlog

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

#: At most one warning per this many seconds (a frozen worker's whole backlog acks late at once).
LOG_EVERY_S = 5.0
#: How long one reading of the broker clock is reused (an ack is on the hot path; 10 ms late is not late).
CLOCK_REUSE_S = 0.01


class LateAcks:
    """Counts one consumer's late acks against the broker's clock, and says so at most every ``LOG_EVERY_S``."""

    def __init__(self, queue: str, broker_now_ms: Callable[[], int | None],
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._queue = queue
        self._broker_now_ms = broker_now_ms
        self._monotonic = monotonic
        self.count = 0
        self._logged = (float("-inf"), 0)
        self._now_ms: int | None = None
        self._now_until = float("-inf")

    def check_one(self, deadline_ms: int) -> None:
        """An ack of a message with this redelivery deadline (epoch ms) was just made: per ack, so the broker clock
        is read at most every ``CLOCK_REUSE_S``."""
        now = self._monotonic()
        if now >= self._now_until:
            self._now_ms, self._now_until = self._broker_now_ms(), now + CLOCK_REUSE_S
        if self._now_ms is not None and deadline_ms < self._now_ms:
            self._count_late(1)

    def check(self, deadlines: Sequence[int]) -> None:
        """Acks of messages with these redelivery deadlines (epoch ms) were just made."""
        if not deadlines:
            return
        now_ms = self._broker_now_ms()
        late = 0 if now_ms is None else sum(1 for d in deadlines if d < now_ms)
        if late:
            self._count_late(late)

    def _count_late(self, late: int) -> None:
        self.count += late
        if self._monotonic() - self._logged[0] >= LOG_EVERY_S:
            log.warning("late_acks", queue=self._queue, count=self.count - self._logged[1], total=self.count,
                        note="acked after their redelivery deadline (this process was frozen or cut off from Kafka "
                             "while their handlers ran): the tracker may have delivered them again")
            self._logged = (self._monotonic(), self.count)
