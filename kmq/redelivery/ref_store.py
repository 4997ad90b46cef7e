"""RefStore: the in-flight Starts by reference of one markers partition, a few tens of bytes each.

A Start by reference holds no payload, so what the tracker keeps per message is its id, deadline and enqueue time:
kept as columns of the Start record it came in (a RefBatch: arrays sorted by id), found through one dict from the
packed id (partition << 48 | offset) to its RefBatch. Deadlines are kept per record, not per message: the heap holds
(deadline, order, bucket), a bucket being a Start record's batch or the ids a keep-alive record moved; an entry whose
deadline has since moved, or that has ended, is skipped when its bucket surfaces. About 100 bytes per message in
all, against ~550 for a Start with a copy (an InFlight object, a MessageId, two dict slots, a heap entry).

Lifecycle as in PartitionState: a Start enters; a KeepAlive moves its deadline; ``take_expired`` marks it taken (being
redelivered: still in flight, still pinning its marker offset); an End removes it. Pure: no Kafka, no clock.
"""

from __future__ import annotations

import heapq
import itertools
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable

from kmq.redelivery.in_flight import InFlight
from kmq.wire import MessageId
from kmq.wire.start_refs import Extra

OFFSET_BITS = 48
#: Offsets at or past this cannot be packed (at a million records a second, 9 years of one partition).
OFFSET_LIMIT = 1 << OFFSET_BITS
_TAKEN, _RETURNED = 1, 2


def pack(message_id: MessageId) -> int:
    """The packed id; -1 (never stored) for an offset past OFFSET_LIMIT, whose Starts are refused."""
    partition, offset = message_id
    return partition << OFFSET_BITS | offset if offset < OFFSET_LIMIT else -1


def unpack(packed: int) -> MessageId:
    return MessageId(packed >> OFFSET_BITS, packed & (OFFSET_LIMIT - 1))


def packed_ids(partitions: list[int], offsets: list[int]) -> list[int]:
    if offsets and max(offsets) >= OFFSET_LIMIT:
        return [pack(MessageId(p, o)) for p, o in zip(partitions, offsets, strict=True)]
    return [p << OFFSET_BITS | o for p, o in zip(partitions, offsets, strict=True)]


class RefBatch:
    """The Starts by reference of one markers record that have not ended: columns sorted by packed id."""

    __slots__ = ("deadlines", "enqueued", "extras", "flags", "holder", "ids", "key", "live", "marker_offset",
                 "order", "start_timestamp_ms")

    def __init__(self, order: int, key: bytes, marker_offset: int, start_timestamp_ms: int, deadline_ms: int,
                 ids: list[int], enqueued: list[int], extras: dict[int, Extra],
                 holder: tuple[str, str] | None) -> None:
        self.order = order
        self.key = key
        self.marker_offset = marker_offset
        self.start_timestamp_ms = start_timestamp_ms
        self.holder = holder
        self.ids = array("q", ids)
        self.enqueued = array("q", enqueued)
        self.deadlines = array("q", [deadline_ms]) * len(ids)
        self.flags = bytearray(len(ids))
        self.extras = extras
        self.live = len(ids)

    def index(self, packed: int) -> int:
        return bisect_left(self.ids, packed)


class RefStore:
    """In-flight Starts by reference. ``on_added(offset, n)``/``on_ended(offset)`` keep the partition's count of
    live Starts per marker offset (what it may commit)."""

    def __init__(self, on_added: Callable[[int, int], None], on_ended: Callable[[int], None]) -> None:
        self._where: dict[int, RefBatch] = {}
        #: Packed id → its batch (read-only outside: its truth says whether anything is held).
        self.ids: dict[int, RefBatch] = self._where
        #: Live batches by order: a heap entry names its batch by order, so an ended batch is freed at once.
        self._batches: dict[int, RefBatch] = {}
        self._heap: list[tuple[int, int, int | array[int]]] = []
        self._order = itertools.count()
        self._on_added = on_added
        self._on_ended = on_ended

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, packed: object) -> bool:
        return packed in self._where

    def knows_any(self, packed: list[int]) -> bool:
        return not self._where.keys().isdisjoint(packed)

    def add(self, offset: int, timestamp_ms: int, key: bytes, deadline_ms: int, packed: list[int],
            enqueued: list[int], extras: dict[int, Extra], holder: tuple[str, str] | None) -> None:
        """The Starts of one record (sorted by packed id), none of them known (the caller sorted out those already
        in flight); ``extras``: by index, the (delivery count, first id) of those that are not first deliveries."""
        if not packed:
            return
        order = next(self._order)
        batch = RefBatch(order, key, offset, timestamp_ms, deadline_ms, packed, enqueued, extras, holder)
        self._where.update(zip(packed, itertools.repeat(batch)))
        self._batches[order] = batch
        heapq.heappush(self._heap, (deadline_ms, order, order))
        self._on_added(offset, len(packed))

    def refresh(self, packed: int, deadline_ms: int) -> str:
        """A second Start of a known message (a consumer re-read its record): a fresh deadline unless it is being
        redelivered; returns the stat to count."""
        batch = self._where[packed]
        i = batch.index(packed)
        if batch.flags[i] & _TAKEN:
            return "start_while_redelivering"
        batch.deadlines[i] = deadline_ms
        heapq.heappush(self._heap, (deadline_ms, next(self._order), array("q", [packed])))
        return "duplicate_start"

    def keep_alive(self, deadline_ms: int, packed: list[int], *, returned: bool) -> tuple[list[int], int]:
        """Moves the deadlines of the known ones; returns the indexes (in ``packed``) of those it does not know, and
        how many it skipped as being redelivered."""
        unknown: list[int] = []
        redelivering = 0
        moved = array("q")
        where = self._where
        for n, pid in enumerate(packed):
            batch = where.get(pid)
            if batch is None:
                unknown.append(n)
                continue
            i = batch.index(pid)
            if batch.flags[i] & _TAKEN:
                redelivering += 1
                continue
            batch.deadlines[i] = deadline_ms
            batch.flags[i] = _RETURNED if returned else 0
            moved.append(pid)
        if moved:
            heapq.heappush(self._heap, (deadline_ms, next(self._order), moved))
        return unknown, redelivering

    def end(self, packed: list[int]) -> list[int]:
        """Removes the known ones; returns the indexes (in ``packed``) of those it does not know."""
        unknown: list[int] = []
        where = self._where
        for n, pid in enumerate(packed):
            batch = where.pop(pid, None)
            if batch is None:
                unknown.append(n)
                continue
            batch.live -= 1
            if not batch.live:
                del self._batches[batch.order]
            self._on_ended(batch.marker_offset)
        if not where:
            # PartitionState drains this heap only while a Start by reference is held: stale entries left now would
            # be a deadline next_deadline_ms() reports for ever and take_expired() never pops (a tracker spinning).
            self._heap.clear()
        return unknown

    def take_expired(self, now_ms: int) -> list[InFlight]:
        """Marks taken and returns every live, untaken Start whose deadline is strictly before ``now_ms``."""
        expired: list[InFlight] = []
        heap = self._heap
        while heap and heap[0][0] < now_ms:
            deadline, _, bucket = heapq.heappop(heap)
            if isinstance(bucket, int):
                batch = self._batches.get(bucket)
                if batch is not None:
                    self._take(batch, range(len(batch.ids)), deadline, expired)
            else:
                for pid in bucket:
                    batch = self._where.get(pid)
                    if batch is not None:
                        self._take(batch, (batch.index(pid),), deadline, expired)
        return expired

    def _take(self, batch: RefBatch, indexes: Iterable[int], deadline: int, out: list[InFlight]) -> None:
        where, ids, deadlines, flags = self._where, batch.ids, batch.deadlines, batch.flags
        for i in indexes:
            if deadlines[i] != deadline or flags[i] & _TAKEN or where.get(ids[i]) is not batch:
                continue  # moved since, already taken, or ended
            flags[i] |= _TAKEN
            message_id = unpack(ids[i])
            count, first = 1, None
            extra = batch.extras.get(i)
            if extra is not None:
                count, first = extra[0], None if extra[1] == message_id else extra[1]
            out.append(InFlight(message_id, batch.key, None, (), count, first, batch.enqueued[i], batch.marker_offset,
                                batch.start_timestamp_ms, deadline, bool(flags[i] & _RETURNED), batch.holder))

    def take_over(self, client_id: str, instance_id: str, timestamp_ms: int) -> int:
        """What earlier instances of ``client_id`` hold is due at ``timestamp_ms``; returns how many."""
        moved = array("q")
        for batch in self._batches.values():
            holder = batch.holder
            if holder is None or holder[0] != client_id or holder[1] == instance_id:
                continue
            for i, pid in enumerate(batch.ids):
                if self._where.get(pid) is batch and not batch.flags[i] & _TAKEN \
                        and batch.deadlines[i] > timestamp_ms:
                    batch.deadlines[i] = timestamp_ms
                    moved.append(pid)
        if moved:
            heapq.heappush(self._heap, (timestamp_ms, next(self._order), moved))
        return len(moved)

    def message_ids(self, *, waiting: bool = False) -> set[MessageId]:
        """Every message in flight here; with ``waiting``, only those not taken for redelivery."""
        return {unpack(pid) for pid, batch in self._where.items()
                if not waiting or not batch.flags[batch.index(pid)] & _TAKEN}

    def next_deadline_ms(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def per_queue(self, out: dict[str, tuple[int, int]]) -> None:
        """Adds queue → (in flight, oldest Start timestamp ms) into ``out``."""
        for batch in self._batches.values():
            queue = batch.key.decode("utf-8", "replace")
            count, oldest = out.get(queue, (0, 1 << 62))
            out[queue] = (count + batch.live, min(oldest, batch.start_timestamp_ms))
