"""CopyStore: the in-flight Starts of one markers partition that carry their payload (kafka-mq-go's, kmq's copies).

``in_flight``: message id → InFlight; ``deadlines``: message id → deadline ms for those waiting on it (a message
taken for redelivery has none until its End comes); a heap of (deadline, id) whose stale entries (a keep-alive
moved the deadline, an End removed the message) are skipped when they surface and dropped by ``take_expired``.
The heap is rebuilt when stale entries outnumber live ones by COMPACT_FACTOR. Pure: no Kafka, no clock.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from kmq.redelivery.in_flight import InFlight
from kmq.wire import MessageId

#: Stale heap entries tolerated per live deadline before the heap is rebuilt.
COMPACT_FACTOR = 2


class CopyStore:
    """Starts with their payload, their deadlines, and the heap that orders them."""

    __slots__ = ("_heap", "deadlines", "in_flight")

    def __init__(self) -> None:
        self.in_flight: dict[MessageId, InFlight] = {}
        self.deadlines: dict[MessageId, int] = {}
        self._heap: list[tuple[int, MessageId]] = []

    def __len__(self) -> int:
        return len(self.in_flight)

    def add(self, item: InFlight) -> None:
        """A Start not known yet."""
        self.in_flight[item.message_id] = item
        self.set_deadline(item.message_id, item.deadline_ms)

    def restart(self, message_id: MessageId, deadline_ms: int) -> str:
        """A second Start of a known message; returns the stat to count."""
        if message_id in self.deadlines:
            # A consumer re-read the record after a failed commit: a fresh deadline, the first Start's payload.
            self.in_flight[message_id].deadline_ms = deadline_ms
            self.set_deadline(message_id, deadline_ms)
            return "duplicate_start"
        return "start_while_redelivering"

    def keep_alive(self, deadline_ms: int, message_ids: Iterable[MessageId], returned: bool) -> tuple[int, int]:
        """Moves the deadlines of the known ones; returns (unknown, being redelivered) counts."""
        unknown = redelivering = 0
        for message_id in message_ids:
            known = self.in_flight.get(message_id)
            if known is None:
                unknown += 1
            elif message_id not in self.deadlines:
                redelivering += 1
            else:
                known.returned = returned
                known.deadline_ms = deadline_ms
                self.set_deadline(message_id, deadline_ms)
        return unknown, redelivering

    def end(self, message_id: MessageId) -> InFlight | None:
        """Removes a message; returns it, or None if it was not known."""
        known = self.in_flight.pop(message_id, None)
        if known is not None:
            self.deadlines.pop(message_id, None)
        return known

    def take_over(self, client_id: str, instance_id: str, timestamp_ms: int) -> int:
        """What earlier instances of ``client_id`` hold is due at ``timestamp_ms``; returns how many (a scan)."""
        taken = 0
        for message_id, item in self.in_flight.items():
            holder = item.holder
            if holder is not None and holder[0] == client_id and holder[1] != instance_id \
                    and message_id in self.deadlines and item.deadline_ms > timestamp_ms:
                item.deadline_ms = timestamp_ms
                self.set_deadline(message_id, timestamp_ms)
                taken += 1
        return taken

    def set_deadline(self, message_id: MessageId, deadline_ms: int) -> None:
        self.deadlines[message_id] = deadline_ms
        heapq.heappush(self._heap, (deadline_ms, message_id))
        if len(self._heap) > COMPACT_FACTOR * len(self.deadlines) + 1000:
            self._heap = [(d, m) for m, d in self.deadlines.items()]
            heapq.heapify(self._heap)

    def take_expired(self, now_ms: int) -> list[InFlight]:
        """Removes the deadline of, and returns in deadline order, every message due strictly before ``now_ms``."""
        expired: list[InFlight] = []
        heap, deadlines = self._heap, self.deadlines
        while heap and heap[0][0] < now_ms:
            deadline, message_id = heapq.heappop(heap)
            if deadlines.get(message_id) == deadline:  # else stale: moved, ended or already taken
                del deadlines[message_id]
                expired.append(self.in_flight[message_id])
        return expired

    def next_deadline_ms(self) -> int | None:
        """The earliest heap entry: possibly stale (it then only wakes the tracker early, and ``take_expired``
        drops it)."""
        return self._heap[0][0] if self._heap else None
