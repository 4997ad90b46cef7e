"""The in-flight messages of one markers partition, in three structures kept in step.

- ``in_flight``: message id → InFlight (what to redeliver: the Start's payload and metadata, held once);
- ``deadlines``: message id → deadline ms, for messages waiting on their deadline, with a heap of (deadline, id)
  whose stale entries (a keep-alive moved the deadline) are skipped when they surface;
- the marker offsets holding in-flight Starts, counted per offset (a kmq batch record holds many Starts) with a
  heap of offsets: the smallest one still counted is the offset to commit.

Lifecycle of a message: Start enters all three; KeepAlive moves its deadline; ``take_expired`` removes it from
``deadlines`` only (it is being redelivered: still in flight, still pinning the committed offset); End removes it
from all three. Pure: no Kafka, no clock of its own.
"""

from __future__ import annotations

import heapq
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from kmq.wire import UNCOUNTED_REASONS, MessageId
from kmq.wire.marker_batch import DecodedBatch
from kmq.wire.markers import Headers, Marker, MarkerType, StartView

#: Stale heap entries tolerated per live deadline before the heap is rebuilt.
COMPACT_FACTOR = 2


@dataclass(slots=True)
class InFlight(StartView):
    """A started, not yet ended message: the Start's payload and metadata, and its deadline."""

    message_id: MessageId
    key: bytes
    value: bytes
    headers: Headers
    #: 0 when a kafka-mq-go consumer wrote the Start (unknown: treated as 1).
    delivery_count: int
    first_message_id: MessageId | None
    enqueued_at_ms: int
    marker_offset: int
    start_timestamp_ms: int
    deadline_ms: int
    #: No handler had it (given back unprocessed, or read before its due time): the copy keeps ``delivery_count``.
    returned: bool = False
    #: Who Started it: (client_id, instance_id), one tuple shared by a batch's entries; None from kafka-mq-go.
    holder: tuple[str, str] | None = None


#: What a Start carries into the state: id, payload, headers, delivery count, first id, enqueued-at.
StartEntry = tuple[MessageId, bytes, Headers, int, MessageId | None, int]


@dataclass(slots=True)
class PartitionState:
    """In-flight messages of one markers partition. See the module docstring for the lifecycle."""

    partition: int
    in_flight: dict[MessageId, InFlight] = field(default_factory=dict)
    deadlines: dict[MessageId, int] = field(default_factory=dict)
    #: Next offset to read: what to commit when nothing is in flight.
    next_offset: int = 0
    stats: Counter[str] = field(default_factory=Counter)
    _deadline_heap: list[tuple[int, MessageId]] = field(default_factory=list)
    _starts_at: dict[int, int] = field(default_factory=dict)
    _offset_heap: list[int] = field(default_factory=list)
    _holders: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)

    def apply(self, offset: int, timestamp_ms: int, marker: Marker) -> None:
        """Folds one marker (from the record at ``offset`` with log time ``timestamp_ms``) into the state."""
        self.next_offset = max(self.next_offset, offset + 1)
        if marker.type is MarkerType.START:
            self.start(offset, timestamp_ms, marker.key, marker.redeliver_after_ms,
                       [(marker.message_id, marker.value, marker.headers, marker.delivery_count,
                         marker.first_message_id, marker.enqueued_at_ms)])
        elif marker.type is MarkerType.KEEPALIVE:
            self.keep_alive(timestamp_ms + marker.redeliver_after_ms, (marker.message_id,),
                            returned=marker.reason in UNCOUNTED_REASONS)
        else:
            self.end((marker.message_id,))

    def apply_batch(self, offset: int, timestamp_ms: int, batch: DecodedBatch) -> None:
        """Folds one kmq batch record, entry by entry, in the order its markers apply."""
        if batch.hello:
            self.takeover(batch.client_id, batch.instance_id, timestamp_ms)
            return
        holder = None
        if batch.client_id:  # one tuple per consumer instance, shared by all it Started
            found = (batch.client_id, batch.instance_id)
            holder = self._holders.setdefault(found, found)
        self.start(offset, timestamp_ms, batch.key, batch.redeliver_after_ms, batch.starts(), holder)
        self.keep_alive(timestamp_ms + batch.redeliver_after_ms, batch.keep_alives())
        for marker in batch.settles():
            self.apply(offset, timestamp_ms, marker)
        self.end(batch.acks())

    def start(self, offset: int, timestamp_ms: int, key: bytes, redeliver_after_ms: int,
              entries: Iterable[StartEntry], holder: tuple[str, str] | None = None) -> None:
        """Starts of one record: each enters the state, or refreshes the deadline of a known one."""
        self.next_offset = max(self.next_offset, offset + 1)
        deadline = timestamp_ms + redeliver_after_ms
        in_flight, deadlines = self.in_flight, self.deadlines
        added = 0
        for message_id, value, headers, count, first, enqueued in entries:
            if message_id not in in_flight:
                in_flight[message_id] = InFlight(message_id, key, value, headers, count, first, enqueued,
                                                 offset, timestamp_ms, deadline, holder=holder)
                self._set_deadline(message_id, deadline)
                added += 1
            elif message_id in deadlines:
                # A consumer re-read the record after a failed commit: a fresh deadline, the first Start's payload.
                in_flight[message_id].deadline_ms = deadline
                self._set_deadline(message_id, deadline)
                self.stats["duplicate_start"] += 1
            else:
                self.stats["start_while_redelivering"] += 1
        if added:
            if offset not in self._starts_at:
                heapq.heappush(self._offset_heap, offset)
            self._starts_at[offset] = self._starts_at.get(offset, 0) + added

    def keep_alive(self, deadline_ms: int, message_ids: Iterable[MessageId], *, returned: bool = False) -> None:
        for message_id in message_ids:
            known = self.in_flight.get(message_id)
            if known is None:
                self.stats["unknown_keepalive"] += 1
            elif message_id not in self.deadlines:
                self.stats["keepalive_while_redelivering"] += 1
            else:
                known.returned = returned
                known.deadline_ms = deadline_ms
                self._set_deadline(message_id, deadline_ms)

    def takeover(self, client_id: str, instance_id: str, timestamp_ms: int) -> int:
        """A consumer with a stable ``client_id`` restarted as ``instance_id``: what its earlier instances hold is due
        now (a crash: each counts as a delivery). Rare (one per restart), so a scan; returns how many."""
        taken = 0
        for message_id, item in self.in_flight.items():
            holder = item.holder
            if holder is not None and holder[0] == client_id and holder[1] != instance_id \
                    and message_id in self.deadlines and item.deadline_ms > timestamp_ms:
                item.deadline_ms = timestamp_ms
                self._set_deadline(message_id, timestamp_ms)
                taken += 1
        self.stats["taken_over"] += taken
        return taken

    def end(self, message_ids: Iterable[MessageId]) -> None:
        for message_id in message_ids:
            known = self.in_flight.pop(message_id, None)
            if known is None:
                self.stats["unknown_end"] += 1
                continue
            self.deadlines.pop(message_id, None)
            left = self._starts_at[known.marker_offset] - 1
            if left:
                self._starts_at[known.marker_offset] = left
            else:
                del self._starts_at[known.marker_offset]

    def _set_deadline(self, message_id: MessageId, deadline_ms: int) -> None:
        self.deadlines[message_id] = deadline_ms
        heapq.heappush(self._deadline_heap, (deadline_ms, message_id))
        if len(self._deadline_heap) > COMPACT_FACTOR * len(self.deadlines) + 1000:
            self._deadline_heap = [(d, m) for m, d in self.deadlines.items()]
            heapq.heapify(self._deadline_heap)

    def take_expired(self, now_ms: int) -> list[InFlight]:
        """Removes and returns, in deadline order, every message whose deadline is strictly before ``now_ms``."""
        expired: list[InFlight] = []
        heap, deadlines = self._deadline_heap, self.deadlines
        while heap and heap[0][0] < now_ms:
            deadline, message_id = heapq.heappop(heap)
            if deadlines.get(message_id) == deadline:  # else stale: moved, ended or already taken
                del deadlines[message_id]
                expired.append(self.in_flight[message_id])
        return expired

    def next_deadline_ms(self) -> int | None:
        """The earliest deadline waiting, or None; possibly one since moved or ended (which only wakes the tracker
        early for nothing)."""
        return self._deadline_heap[0][0] if self._deadline_heap else None

    def commit_offset(self) -> int:
        """The offset a restarted reader must start from to rebuild this state: the oldest in-flight Start."""
        heap = self._offset_heap
        while heap and heap[0] not in self._starts_at:
            heapq.heappop(heap)
        return heap[0] if heap else self.next_offset

    def __len__(self) -> int:
        return len(self.in_flight)

    def per_queue(self) -> dict[str, tuple[int, int]]:
        """Queue → (in flight, oldest Start timestamp ms)."""
        out: dict[str, tuple[int, int]] = {}
        for item in self.in_flight.values():
            count, oldest = out.get(item.queue, (0, sys.maxsize))
            out[item.queue] = (count + 1, min(oldest, item.start_timestamp_ms))
        return out
