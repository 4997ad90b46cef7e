"""DueTimes: what a consumer does with messages read before their due time (``send(deliver_at=…)``), or after their
expiry time (``send(ttl=…)``: those are never handed out).

A message due within LOCAL_HOLD_MS is held here (in flight, so kept alive) and handed out by the consumer's loop
when due: short delays stay precise. One due later goes on a *hop*: its Start is already durable, so the consumer
writes a "delayed" KeepAlive with the time left (at most MAX_HOP_MS) and forgets it; the tracker redelivers it
then, with its delivery count unchanged, and whoever reads the copy sorts it again. No handler ever gets a message
before its due time. Pure: no Kafka.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from operator import attrgetter

from kmq.client.message import Message
from kmq.config import MAX_REDELIVERY_TIMEOUT_MS
from kmq.wire import HEADER_DELIVER_AT, HEADER_EXPIRES_AT, now_ms

_record_headers = attrgetter("record_headers")

#: Due within this: held by the consumer instead of a hop through the tracker (whose timing is ~0.1-1 s coarse).
LOCAL_HOLD_MS = 1_000
#: The longest hop; a message due later takes several (the tracker's deadlines stay within the 12 h cap).
MAX_HOP_MS = MAX_REDELIVERY_TIMEOUT_MS


class DueTimes:
    """Loop thread only."""

    def __init__(self, clock_ms: Callable[[], int] = now_ms) -> None:
        self._clock_ms = clock_ms
        self._held: list[tuple[int, int, Message]] = []
        self._order = itertools.count()

    def __len__(self) -> int:
        return len(self._held)

    def sort(self, messages: Sequence[Message]) -> tuple[list[Message], list[tuple[Message, int]], list[Message]]:
        """(messages to hand out now, messages to send on a hop with their delay in ms, expired messages); the rest
        are held."""
        if not any(map(_record_headers, messages)):  # none has headers (the common case): a pass in C
            return list(messages), [], []
        ready: list[Message] = []
        hops: list[tuple[Message, int]] = []
        expired: list[Message] = []
        now_ms = -1
        for message in messages:
            headers = message.record_headers
            if not headers or (HEADER_DELIVER_AT not in headers and HEADER_EXPIRES_AT not in headers):
                ready.append(message)  # the common case, kept cheap
                continue
            if now_ms < 0:
                now_ms = self._clock_ms()
            expires = headers.get(HEADER_EXPIRES_AT)
            if expires is not None and int(expires) <= now_ms:
                expired.append(message)
                continue
            raw = headers.get(HEADER_DELIVER_AT)
            if raw is None:
                ready.append(message)
                continue
            due_ms = int(raw)
            left_ms = due_ms - now_ms
            if left_ms <= 0:
                ready.append(message)
            elif left_ms <= LOCAL_HOLD_MS:
                heapq.heappush(self._held, (due_ms, next(self._order), message))
            else:
                hops.append((message, min(left_ms, MAX_HOP_MS)))
        return ready, hops, expired

    def take_due(self) -> list[Message]:
        """Held messages whose time has come (the caller sorts them again, for expiry)."""
        if not self._held:
            return []
        now_ms = self._clock_ms()
        due = []
        while self._held and self._held[0][0] <= now_ms:
            due.append(heapq.heappop(self._held)[2])
        return due

    def next_due_in_s(self) -> float | None:
        """Seconds until the next held message is due, or None."""
        if not self._held:
            return None
        return max(0.0, (self._held[0][0] - self._clock_ms()) / 1000)

    def take_all(self) -> list[Message]:
        """Every held message (the consumer is closing)."""
        held = [m for _, _, m in self._held]
        self._held.clear()
        return held
