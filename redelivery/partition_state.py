"""The in-flight messages of one markers partition, in three structures kept in step.

- ``in_progress``: message id → InFlight (the Start marker's payload, held once);
- ``by_offset``: the marker offsets of in-flight Starts (SortedList), whose first is the offset to commit;
- ``by_deadline``: message id → deadline ms (heapdict), whose top is the next message to redeliver.

Lifecycle of a message: Start inserts it in all three; KeepAlive moves its deadline; ``take_expired`` removes
it from ``by_deadline`` only (it is being redelivered: still in flight, still pinning the committed offset);
End removes it from all three. Pure: no Kafka, no clock of its own.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass, field

from heapdict import heapdict
from sortedcontainers import SortedList

from kmq.markers import Marker, MarkerType, MessageId


@dataclass(slots=True)
class InFlight:
    """A started, not yet ended message; ``start`` holds the payload to redeliver."""

    start: Marker
    marker_offset: int
    start_timestamp_ms: int
    deadline_ms: int


@dataclass(slots=True)
class PartitionState:
    """In-flight messages of one markers partition. See the module docstring for the lifecycle."""

    partition: int
    in_progress: dict[MessageId, InFlight] = field(default_factory=dict)
    by_offset: SortedList = field(default_factory=SortedList)
    by_deadline: heapdict = field(default_factory=heapdict)
    #: Next offset to read: what to commit when nothing is in flight.
    next_offset: int = 0
    stats: Counter[str] = field(default_factory=Counter)

    def apply(self, offset: int, timestamp_ms: int, marker: Marker) -> None:
        """Folds one marker record (its offset and log timestamp) into the state."""
        self.next_offset = max(self.next_offset, offset + 1)
        if marker.type is MarkerType.START:
            self._start(offset, timestamp_ms, marker)
        elif marker.type is MarkerType.KEEPALIVE:
            self._keep_alive(timestamp_ms, marker)
        else:
            self._end(marker.message_id)

    def _start(self, offset: int, timestamp_ms: int, marker: Marker) -> None:
        known = self.in_progress.get(marker.message_id)
        if known is None:
            deadline = timestamp_ms + marker.redeliver_after_ms
            self.in_progress[marker.message_id] = InFlight(marker, offset, timestamp_ms, deadline)
            self.by_offset.add(offset)
            self.by_deadline[marker.message_id] = deadline
        elif marker.message_id in self.by_deadline:
            # A consumer re-read the record after a failed commit: a fresh deadline, the first Start's payload.
            self._move_deadline(known, timestamp_ms + marker.redeliver_after_ms)
            self.stats["duplicate_start"] += 1
        else:
            self.stats["start_while_redelivering"] += 1

    def _keep_alive(self, timestamp_ms: int, marker: Marker) -> None:
        known = self.in_progress.get(marker.message_id)
        if known is None:
            self.stats["unknown_keepalive"] += 1
        elif marker.message_id not in self.by_deadline:
            self.stats["keepalive_while_redelivering"] += 1
        else:
            self._move_deadline(known, timestamp_ms + marker.redeliver_after_ms)

    def _move_deadline(self, known: InFlight, deadline_ms: int) -> None:
        known.deadline_ms = deadline_ms
        self.by_deadline[known.start.message_id] = deadline_ms

    def _end(self, message_id: MessageId) -> None:
        known = self.in_progress.pop(message_id, None)
        if known is None:
            self.stats["unknown_end"] += 1
            return
        self.by_offset.remove(known.marker_offset)
        self.by_deadline.pop(message_id, None)

    def take_expired(self, now_ms: int) -> list[InFlight]:
        """Removes and returns, in deadline order, every message whose deadline is strictly before ``now_ms``."""
        expired: list[InFlight] = []
        while self.by_deadline and self.by_deadline.peekitem()[1] < now_ms:
            message_id, _ = self.by_deadline.popitem()
            expired.append(self.in_progress[message_id])
        return expired

    def commit_offset(self) -> int:
        """The offset a restarted reader must start from to rebuild this state: the oldest in-flight Start."""
        if self.by_offset:
            return int(self.by_offset[0])
        return self.next_offset

    def __len__(self) -> int:
        return len(self.in_progress)

    def per_queue(self) -> dict[str, tuple[int, int]]:
        """Queue → (in flight, oldest Start timestamp ms)."""
        out: dict[str, tuple[int, int]] = {}
        for item in self.in_progress.values():
            count, oldest = out.get(item.start.queue, (0, sys.maxsize))
            out[item.start.queue] = (count + 1, min(oldest, item.start_timestamp_ms))
        return out
