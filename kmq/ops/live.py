"""LiveLifecycles: kmq.ops.lifecycle's classification kept up to date as records arrive, for a reader that follows
the topics (the console) instead of replaying them for each question. Pure: no Kafka; the caller feeds it what it
read, in ``kmq stats``' order for each round (committed offsets and purge times, markers, messages, dead letters),
then calls ``refresh``.

After any rounds, ``lives`` is what ``lifecycle.classify`` gives for everything added with the same context (a
property test holds it to that), but a refresh classifies only the messages something touched: a marker, record or
dead letter of theirs, a deadline passing, their queue's committed offset or purge time moving past a record no
consumer Started. A queue where a kafka-mq-go End was seen is classified whole (``go_links`` finds a Go tracker's
copies by payload, across messages).

With ``forget_acked``, a message once acked keeps its state (``acked`` is final: the first of ``STATE_RULES``) but
no longer its records and deliveries, so memory follows the messages still moving; events after its ack (a late
duplicate ack, a tracker's copy racing it) no longer change its queue's counters. (Not in a queue with kafka-mq-go
Ends: a Go tracker's copy is linked to its original by the original's record.)
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping
from itertools import islice
from typing import NamedTuple

from kmq.ops.lifecycle import (
    Context,
    DeadLetter,
    Delivery,
    DeliveryFold,
    Key,
    MessageLife,
    QueueSummary,
    Record,
    classify,
)
from kmq.ops.live_index import QueueIndex
from kmq.ops.live_members import MessageMembers
from kmq.wire import MessageId
from kmq.wire import vocabulary as v
from kmq.wire.markers import Marker
from kmq.wire.vocabulary import MarkerEvent as E


class Change(NamedTuple):
    """A message whose life a refresh changed: before (None: new) and after (None: gone, folded into another)."""

    key: Key
    old: MessageLife | None
    new: MessageLife | None


class LiveLifecycles:
    """Every message's life, classified again only where something changed (see the module docstring)."""

    def __init__(self, at_most_once: frozenset[str] = frozenset(), *, forget_acked: bool = False) -> None:
        self.fold = DeliveryFold()
        self.lives: dict[Key, MessageLife] = {}
        self._at_most_once = at_most_once
        self._forget_acked = forget_acked
        self._members = MessageMembers()
        self._index = QueueIndex()
        self._dirty: set[Key] = set()
        self._dirty_queues: set[str] = set()
        self._go_queues: set[str] = set()
        #: Queues a record with a message group was seen in (a page of groups looks no further elsewhere).
        self.grouped_queues: set[str] = set()
        self._committed: dict[str, dict[int, int]] = {}
        self._purged_before: dict[str, int] = {}
        # Lazy heaps (an entry no longer true is dropped when it reaches the top): deadlines of open deliveries, and
        # per (queue, partition) the records no committed offset has passed yet.
        self._deadlines: list[tuple[int, Key]] = []
        self._unstarted: dict[tuple[str, int], list[tuple[int, Key]]] = {}

    # --- what was read ---------------------------------------------------------------------------------------------

    def add_markers(self, value: bytes | None, timestamp_ms: int, offset: int) -> list[Marker]:
        """One markers-topic record (``DeliveryFold.add_record``); returns its markers."""
        markers = self.fold.add_record(value, timestamp_ms, offset)
        for marker in markers:
            mid = marker.message_id
            delivery = self.fold.deliveries[mid]
            if not delivery.starts:
                # A delivery counts from its Start, but an End of a record never Started (a duplicate send, Ended
                # instead) speaks of its record's message.
                record = self._members.record(mid)
                if record is not None:
                    self._dirty.add((record.queue, record.first_id_header or mid))
                continue
            if self.fold.deliveries[mid].events[E.GO_END]:
                self._go_queues.add(self._key_of(mid, delivery)[0])
            self._place_delivery(mid, delivery)
        return markers

    def add_record(self, record: Record) -> None:
        """One messages-topic record (``lifecycle.to_record``)."""
        key = (record.queue, record.first_id_header or record.message_id)
        if self._forgotten(key):
            return
        self._members.add_record(key, record)
        if record.group is not None:
            self.grouped_queues.add(record.queue)
        self._dirty.add(key)
        heapq.heappush(self._unstarted.setdefault((record.queue, record.message_id.partition), []),
                       (record.message_id.offset, key))
        delivery = self.fold.deliveries.get(record.message_id)
        if delivery is not None and delivery.starts:
            self._place_delivery(record.message_id, delivery)  # its record now says whose it is

    def add_dead_letter(self, letter: DeadLetter) -> None:
        """One dead-letter-topic record (``lifecycle.to_dead_letter``); one without a first id names no message."""
        if letter.first_id is None:
            return
        key = (letter.queue, letter.first_id)
        if self._forgotten(key):
            return
        self._members.add_letter(key, letter)
        self._dirty.add(key)

    def set_committed(self, committed: Mapping[str, Mapping[int, int]]) -> None:
        """The queues' committed offsets on the messages topic (``stats.committed_offsets``)."""
        for queue in {*committed, *self._committed}:
            old, new = self._committed.get(queue, {}), committed.get(queue, {})
            for partition in {*old, *new}:
                before, after = old.get(partition, 0), new.get(partition, 0)
                if after < before:
                    self._dirty_queues.add(queue)  # offsets reset: what was consumed waits again
                elif after > before:
                    self._pop_below(self._unstarted.get((queue, partition)), after)
        self._committed = {q: dict(offsets) for q, offsets in committed.items()}

    def set_purged_before(self, purged_before: Mapping[str, int]) -> None:
        """The queues' purge times (``ControlState.purged_before``; they only move forward). A purge can only end
        a waiting record: the messages that have one are classified again, those waiting and those in another state
        that a waiting record stands beside (a released message whose copy waits while its delivery is overdue:
        the purge leaves its state but not when it began waiting)."""
        for queue, before in purged_before.items():
            if before > self._purged_before.get(queue, 0):
                self._dirty.update(self._index.in_state(queue, v.WAITING))
                self._dirty.update(k for k, m in self.lives.items() if k[0] == queue and m.waiting_since_ms is not None)
        self._purged_before = dict(purged_before)

    # --- classification --------------------------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Messages waiting for a refresh to classify them (after one that stopped at ``most``)."""
        return len(self._dirty) + len(self._dirty_queues)

    def refresh(self, now_ms: int, most: int | None = None) -> list[Change]:
        """Classifies again what changed since the last refresh (``now_ms`` never goes back); returns the changes.
        With ``most``, about that many messages at a time (a whole queue's go together): call again while
        ``pending``, e.g. to let readers in between."""
        while self._deadlines and self._deadlines[0][0] < now_ms:
            self._dirty.add(heapq.heappop(self._deadlines)[1])
        whole = self._dirty_queues | {q for q in self._go_queues if any(k[0] == q for k in self._dirty)}
        keys = {k for k in self._dirty if k[0] not in whole}
        for queue in whole:
            keys |= self._members.of_queue(queue)
        self._dirty, self._dirty_queues = set(), set()
        if most is not None and len(keys) > most:
            later = {k for k in keys if k[0] not in whole}
            later = set(islice(later, max(0, len(later) - max(0, most - (len(keys) - len(later))))))
            keys -= later
            self._dirty = later
        if not keys:
            return []
        context = Context(now_ms, self._committed, self._purged_before, self._at_most_once)
        found = self._classify(keys, context)
        changes = []
        for key in keys:
            new, old = found.get(key), self.lives.get(key)
            if new is None and old is None:
                continue
            self._replace(key, old, new)
            changes.append(Change(key, old, new))
            if new is not None:
                self._schedule(key, new, now_ms)
        return changes

    def _classify(self, keys: set[Key], context: Context) -> dict[Key, MessageLife]:
        deliveries: dict[MessageId, Delivery] = {}
        records: list[Record] = []
        letters: list[DeadLetter] = []
        for key in keys:
            members = self._members.get(key)
            if members is None:
                continue
            deliveries.update((mid, self.fold.deliveries[mid]) for mid in members.deliveries)
            # and what was said of its records never Started (classify reads an End deduplicated there)
            deliveries.update((rid, d) for rid in members.records if (d := self.fold.deliveries.get(rid)) is not None)
            records.extend(self._members.records_of(key))
            letters.extend(self._members.letters(key))
        return classify(deliveries, records, letters, context)

    def _replace(self, key: Key, old: MessageLife | None, new: MessageLife | None) -> None:
        self._index.replace(key, old, new)
        if new is None:
            self.lives.pop(key, None)
        elif new.state == v.ACKED and self._forget_acked and key[0] not in self._go_queues:
            self._forget(key)
        else:
            self.lives[key] = new

    def _schedule(self, key: Key, m: MessageLife, now_ms: int) -> None:
        """When this message must be classified again by itself: a deadline of an open delivery of it."""
        members = self._members.get(key)
        if members is None:
            return
        for mid in members.deliveries:
            d = self.fold.deliveries[mid]
            if d.open and d.deadline[1] >= now_ms:
                heapq.heappush(self._deadlines, (d.deadline[1], key))

    # --- what the console asks -------------------------------------------------------------------------------------

    def queues(self) -> list[str]:
        return self._index.queues()

    def summary(self, queue: str) -> QueueSummary:
        """``lifecycle.summarise``'s figures for one queue (no window)."""
        return self._index.summary(queue, self.lives)

    def count(self, queue: str, state: str) -> int:
        return self._index.count(queue, state)

    def keys(self, queue: str, state: str, newest_first: bool = True) -> Iterator[Key]:
        """The queue's messages in ``state``, by when they came to it."""
        return self._index.keys(queue, state, newest_first)

    def state_of(self, key: Key) -> str | None:
        life = self.lives.get(key)
        if life is not None:
            return life.state
        return v.ACKED if self._forgotten(key) else None

    def key_of(self, message_id: MessageId) -> Key | None:
        """The message that a record or delivery id belongs to (a forgotten acked message: by its first id only)."""
        record = self._members.record(message_id)
        if record is not None:
            return record.queue, record.first_id_header or message_id
        key = self._members.delivery_key(message_id)
        if key is not None:
            return key
        return next(((q, message_id) for q in self._index.queues() if self._forgotten((q, message_id))), None)

    def record_ids(self, key: Key) -> list[MessageId]:
        members = self._members.get(key)
        return sorted(members.records | members.deliveries) if members else []

    def record(self, message_id: MessageId) -> Record | None:
        return self._members.record(message_id)

    def deliveries(self, key: Key) -> list[tuple[MessageId, Delivery]]:
        members = self._members.get(key)
        return sorted((mid, self.fold.deliveries[mid]) for mid in members.deliveries) if members else []

    def dead_letters(self, key: Key) -> list[DeadLetter]:
        return list(self._members.letters(key))

    # --- bookkeeping -----------------------------------------------------------------------------------------------

    def _key_of(self, mid: MessageId, d: Delivery) -> Key:
        """As classify keys a delivery: by its record if read, else by its Start."""
        r = self._members.record(mid)
        return (r.queue, r.first_id_header or mid) if r is not None else (d.queue, d.first_id or mid)

    def _place_delivery(self, mid: MessageId, d: Delivery) -> None:
        key = self._key_of(mid, d)
        if self._forgotten(key):
            self.fold.deliveries.pop(mid, None)
            return
        moved_from = self._members.place_delivery(mid, key)
        if moved_from is not None:
            self._dirty.add(moved_from)
        self._dirty.add(key)

    def _forgotten(self, key: Key) -> bool:
        return self._forget_acked and key not in self._members and key in self._index.in_state(key[0], v.ACKED)

    def _forget(self, key: Key) -> None:
        self.lives.pop(key, None)
        for mid in self._members.forget(key):
            self.fold.deliveries.pop(mid, None)

    def _pop_below(self, heap: list[tuple[int, Key]] | None, bound: int) -> None:
        while heap and heap[0][0] < bound:
            self._dirty.add(heapq.heappop(heap)[1])
