"""The in-flight messages of one markers partition: the fold of its marker records into three parts kept in step.

- ``copies`` (kmq.redelivery.copy_store): the Starts that carry their payload (kafka-mq-go's, kmq's copies), with
  their deadlines;
- ``refs`` (kmq.redelivery.ref_store): the Starts by reference, a few tens of bytes each;
- ``pins`` (kmq.redelivery.offset_pins): the marker offsets holding in-flight Starts of either kind: the smallest is
  the offset to commit.

A partition may hold both kinds of Start at once (a deployment upgraded while messages were in flight). Lifecycle of
a message: Start enters; KeepAlive moves its deadline; ``take_expired`` takes it (it is being redelivered: still in
flight, still pinning the committed offset); End removes it. Pure: no Kafka, no clock of its own.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kmq.errors import MarkerDecodeError
from kmq.redelivery.copy_store import CopyStore
from kmq.redelivery.in_flight import InFlight
from kmq.redelivery.offset_pins import OffsetPins
from kmq.redelivery.ref_store import OFFSET_LIMIT, RefStore, pack, packed_ids, unpack
from kmq.wire import UNCOUNTED_REASONS, MessageId
from kmq.wire.marker_batch import DecodedBatch
from kmq.wire.markers import Headers, Marker, MarkerType, plain_fields
from kmq.wire.start_refs import RefStarts

_END, _KEEPALIVE = int(MarkerType.END), int(MarkerType.KEEPALIVE)

#: What a Start carries into the state: id, payload, headers, delivery count, first id, enqueued-at.
StartEntry = tuple[MessageId, bytes, Headers, int, MessageId | None, int]


@dataclass(slots=True)
class PartitionState:
    """In-flight messages of one markers partition. See the module docstring for the parts and the lifecycle."""

    partition: int
    #: Next offset to read: what to commit when nothing is in flight.
    next_offset: int = 0
    stats: Counter[str] = field(default_factory=Counter)
    copies: CopyStore = field(default_factory=CopyStore)
    pins: OffsetPins = field(default_factory=OffsetPins)
    refs: RefStore = field(init=False)
    _refs_held: Mapping[int, object] = field(init=False)
    _holders: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.refs = RefStore(self.pins.add, self.pins.remove)
        #: The RefStore's id table: truthy while any Start by reference is held (a C-level test on the hot path).
        self._refs_held = self.refs.ids

    @property
    def in_flight(self) -> dict[MessageId, InFlight]:
        """The Starts with a payload, by id (those by reference are in ``refs``)."""
        return self.copies.in_flight

    # --- folding records ---------------------------------------------------------------------------------------

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

    def apply_plain(self, offset: int, timestamp_ms: int, data: bytes | None) -> None:
        """Folds one per-message marker record (kafka-mq-go's format) straight from its fields, without building a
        Marker (the tracker's path, two markers or more per message: ``apply(decode(data))`` costs twice as much);
        MarkerDecodeError if malformed."""
        kind, mid, after, key, value, headers, count, first, enqueued, reason = plain_fields(data)
        if offset >= self.next_offset:
            self.next_offset = offset + 1
        if kind == _END:
            if self._refs_held:
                self.end((mid,))
                return
            known = self.copies.end(mid)
            if known is None:
                self.stats["unknown_end"] += 1
            else:
                self.pins.remove(known.marker_offset)
        elif kind == _KEEPALIVE:
            self.keep_alive(timestamp_ms + after, (mid,), returned=reason in UNCOUNTED_REASONS)
        else:
            deadline = timestamp_ms + after
            if mid in self.copies.in_flight:
                self.stats[self.copies.restart(mid, deadline)] += 1
            elif self._refs_held and pack(mid) in self.refs:
                self.stats[self.refs.refresh(pack(mid), deadline)] += 1
            else:
                self.copies.add(InFlight(mid, key, value, headers, count, first, enqueued, offset, timestamp_ms,
                                         deadline))
                self.pins.add(offset, 1)

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
        if batch.refs:
            self.start_refs(offset, timestamp_ms, batch.key, batch.redeliver_after_ms, batch.refs, holder)
        self._keep_alive_columns(timestamp_ms + batch.redeliver_after_ms, *batch.keep_alive_columns())
        for marker in batch.settles():
            self.apply(offset, timestamp_ms, marker)
        self._end_columns(*batch.ack_columns())

    # --- Starts ----------------------------------------------------------------------------------------------

    def start(self, offset: int, timestamp_ms: int, key: bytes, redeliver_after_ms: int,
              entries: Iterable[StartEntry], holder: tuple[str, str] | None = None) -> None:
        """Starts of one record that carry their payload: each enters the state, or refreshes the deadline of a
        known one."""
        self.next_offset = max(self.next_offset, offset + 1)
        deadline = timestamp_ms + redeliver_after_ms
        copies = self.copies
        in_flight = copies.in_flight
        added = 0
        for message_id, value, headers, count, first, enqueued in entries:
            if message_id in in_flight:
                self.stats[copies.restart(message_id, deadline)] += 1
            elif self._refs_held and pack(message_id) in self.refs:
                self.stats[self.refs.refresh(pack(message_id), deadline)] += 1
            else:
                copies.add(InFlight(message_id, key, value, headers, count, first, enqueued, offset, timestamp_ms,
                                    deadline, holder=holder))
                added += 1
        if added:
            self.pins.add(offset, added)

    def start_refs(self, offset: int, timestamp_ms: int, key: bytes, redeliver_after_ms: int, refs: RefStarts,
                   holder: tuple[str, str] | None = None) -> None:
        """Starts by reference of one record (see ``start``)."""
        self.next_offset = max(self.next_offset, offset + 1)
        if max(refs.offsets) >= OFFSET_LIMIT:
            raise MarkerDecodeError(f"start reference offset {max(refs.offsets)} beyond {OFFSET_LIMIT}", None)
        deadline = timestamp_ms + redeliver_after_ms
        packed = packed_ids(refs.partitions(), refs.offsets)
        enqueued, extras = refs.enqueued_at_ms, refs.extras
        if self.copies.in_flight or self.refs.knows_any(packed):
            fresh = self._new_refs(packed, deadline)
            packed, enqueued = [packed[i] for i in fresh], [enqueued[i] for i in fresh]
            extras = {new: extras[old] for new, old in enumerate(fresh) if old in extras}
        self.refs.add(offset, timestamp_ms, key, deadline, packed, enqueued, extras, holder)

    def _new_refs(self, packed: list[int], deadline: int) -> list[int]:
        """The indexes of the Starts not yet in flight; the others get a fresh deadline (a consumer re-read them)."""
        fresh = []
        for i, pid in enumerate(packed):
            if pid in self.refs:
                self.stats[self.refs.refresh(pid, deadline)] += 1
            elif unpack(pid) in self.copies.in_flight:
                self.stats[self.copies.restart(unpack(pid), deadline)] += 1
            else:
                fresh.append(i)
        return fresh

    # --- keep-alives and Ends -----------------------------------------------------------------------------------

    def keep_alive(self, deadline_ms: int, message_ids: Iterable[MessageId], *, returned: bool = False) -> None:
        if self._refs_held:
            ids = list(message_ids)
            unknown, redelivering = self.refs.keep_alive(deadline_ms, list(map(pack, ids)), returned=returned)
            self.stats["keepalive_while_redelivering"] += redelivering
            message_ids = [ids[i] for i in unknown]
        self._keep_alive_copies(deadline_ms, message_ids, returned)

    def _keep_alive_copies(self, deadline_ms: int, message_ids: Iterable[MessageId], returned: bool) -> None:
        unknown, redelivering = self.copies.keep_alive(deadline_ms, message_ids, returned)
        if unknown:
            self.stats["unknown_keepalive"] += unknown
        if redelivering:
            self.stats["keepalive_while_redelivering"] += redelivering

    def _keep_alive_columns(self, deadline_ms: int, partitions: list[int], offsets: list[int]) -> None:
        if not partitions:
            return
        if self._refs_held:
            unknown, redelivering = self.refs.keep_alive(deadline_ms, packed_ids(partitions, offsets), returned=False)
            self.stats["keepalive_while_redelivering"] += redelivering
            self._keep_alive_copies(deadline_ms, [MessageId(partitions[i], offsets[i]) for i in unknown], False)
        else:
            self._keep_alive_copies(deadline_ms, map(MessageId, partitions, offsets), False)

    def end(self, message_ids: Iterable[MessageId]) -> None:
        if self._refs_held:
            ids = list(message_ids)
            message_ids = [ids[i] for i in self.refs.end(list(map(pack, ids)))]
        self._end_copies(message_ids)

    def _end_columns(self, partitions: list[int], offsets: list[int]) -> None:
        if not partitions:
            return
        if self._refs_held:
            unknown = self.refs.end(packed_ids(partitions, offsets))
            self._end_copies([MessageId(partitions[i], offsets[i]) for i in unknown])
        else:
            self._end_copies(map(MessageId, partitions, offsets))

    def _end_copies(self, message_ids: Iterable[MessageId]) -> None:
        end, unpin = self.copies.end, self.pins.remove
        for message_id in message_ids:
            known = end(message_id)
            if known is None:
                self.stats["unknown_end"] += 1
            else:
                unpin(known.marker_offset)

    def takeover(self, client_id: str, instance_id: str, timestamp_ms: int) -> int:
        """A consumer with a stable ``client_id`` restarted as ``instance_id``: what its earlier instances hold is due
        now (a crash: each counts as a delivery). Rare (one per restart), so a scan; returns how many."""
        taken = self.refs.take_over(client_id, instance_id, timestamp_ms)
        taken += self.copies.take_over(client_id, instance_id, timestamp_ms)
        self.stats["taken_over"] += taken
        return taken

    # --- deadlines and offsets ------------------------------------------------------------------------------------

    def take_expired(self, now_ms: int) -> list[InFlight]:
        """Removes and returns, in deadline order, every message whose deadline is strictly before ``now_ms``."""
        expired = self.copies.take_expired(now_ms)
        if self._refs_held:
            expired += self.refs.take_expired(now_ms)
            expired.sort(key=_deadline)
        return expired

    def next_deadline_ms(self) -> int | None:
        """The earliest deadline waiting, or None; possibly one since moved or ended (which only wakes the tracker
        early for nothing: ``take_expired`` past it drops it)."""
        ours = self.copies.next_deadline_ms()
        refs = self.refs.next_deadline_ms()
        return refs if ours is None else ours if refs is None else min(ours, refs)

    def commit_offset(self) -> int:
        """The offset a restarted reader must start from to rebuild this state: the oldest in-flight Start."""
        oldest = self.pins.oldest()
        return self.next_offset if oldest is None else oldest

    # --- figures ------------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.copies) + len(self.refs)

    def message_ids(self, *, waiting: bool = False) -> set[MessageId]:
        """Every message in flight, of either kind of Start; with ``waiting``, only those not being redelivered."""
        copies = self.copies.deadlines if waiting else self.copies.in_flight
        return self.refs.message_ids(waiting=waiting) | set(copies)

    def per_queue(self) -> dict[str, tuple[int, int]]:
        """Queue → (in flight, oldest Start timestamp ms)."""
        out: dict[str, tuple[int, int]] = {}
        for item in self.copies.in_flight.values():
            count, oldest = out.get(item.queue, (0, sys.maxsize))
            out[item.queue] = (count + 1, min(oldest, item.start_timestamp_ms))
        self.refs.per_queue(out)
        return out


def _deadline(item: InFlight) -> int:
    return item.deadline_ms
