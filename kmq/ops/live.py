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
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
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
from kmq.wire import MessageId
from kmq.wire import vocabulary as v
from kmq.wire.markers import Marker
from kmq.wire.vocabulary import MarkerEvent as E


class Change(NamedTuple):
    """A message whose life a refresh changed: before (None: new) and after (None: gone, folded into another)."""

    key: Key
    old: MessageLife | None
    new: MessageLife | None


@dataclass(slots=True)
class _Members:
    """What one message is made of: its records on the messages topic and its Started deliveries."""

    records: set[MessageId] = field(default_factory=set)
    deliveries: set[MessageId] = field(default_factory=set)


@dataclass(slots=True)
class _Tally:
    """One queue's ``QueueSummary`` figures, kept by adding and taking away each message's share."""

    states: Counter[str] = field(default_factory=Counter)
    counters: Counter[str] = field(default_factory=Counter)

    def add(self, m: MessageLife, sign: int) -> None:
        self.states[m.state] += sign
        for name, count in m.counters.items():
            self.counters[name] += sign * count
        self.counters[v.DUPLICATE_ACKS] += sign * max(0, m.acks - 1)
        self.counters[v.ACKED_MORE_THAN_ONCE] += sign * (m.acks > 1)
        self.counters[v.DELIVERED_MORE_THAN_ONCE] += sign * (m.counters[v.DELIVERED] > 1)


class LiveLifecycles:
    """Every message's life, classified again only where something changed (see the module docstring)."""

    def __init__(self, at_most_once: frozenset[str] = frozenset(), *, forget_acked: bool = False) -> None:
        self.fold = DeliveryFold()
        self.lives: dict[Key, MessageLife] = {}
        self._at_most_once = at_most_once
        self._forget_acked = forget_acked
        self._records: dict[MessageId, Record] = {}
        self._letters: dict[Key, list[DeadLetter]] = {}
        self._members: dict[Key, _Members] = {}
        self._delivery_key: dict[MessageId, Key] = {}
        self._by_queue: dict[str, set[Key]] = {}
        #: queue -> state -> its messages, in the order they came to it (acked ones stay here when forgotten).
        self._by_state: dict[str, dict[str, dict[Key, None]]] = {}
        self._tallies: dict[str, _Tally] = {}
        self._dirty: set[Key] = set()
        self._dirty_queues: set[str] = set()
        self._go_queues: set[str] = set()
        self._committed: dict[str, dict[int, int]] = {}
        self._purged_before: dict[str, int] = {}
        # Lazy heaps (an entry no longer true is dropped when it reaches the top).
        self._deadlines: list[tuple[int, Key]] = []
        self._unstarted: dict[tuple[str, int], list[tuple[int, Key]]] = {}
        self._oldest: dict[tuple[str, str], list[tuple[int, Key]]] = {}

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
                record = self._records.get(mid)
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
        self._records[record.message_id] = record
        self._member(key).records.add(record.message_id)
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
        self._letters.setdefault(key, []).append(letter)
        self._member(key)
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
        a message that is waiting (one in a state before it keeps that state, one after it has no waiting record):
        those are classified again."""
        for queue, before in purged_before.items():
            if before > self._purged_before.get(queue, 0):
                self._dirty.update(self._by_state.get(queue, {}).get(v.WAITING, ()))
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
            keys |= self._by_queue.get(queue, set())
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
                self._schedule(key, old, new, now_ms)
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
            records.extend(self._records[rid] for rid in members.records)
            letters.extend(self._letters.get(key, ()))
        return classify(deliveries, records, letters, context)

    def _replace(self, key: Key, old: MessageLife | None, new: MessageLife | None) -> None:
        queue = key[0]
        tally = self._tallies.setdefault(queue, _Tally())
        states = self._by_state.setdefault(queue, {})
        if old is not None:
            tally.add(old, -1)
            states[old.state].pop(key, None)
        if new is None:
            self.lives.pop(key, None)
            return
        tally.add(new, +1)
        states.setdefault(new.state, {})[key] = None
        if new.state == v.ACKED and self._forget_acked and queue not in self._go_queues:
            self._forget(key)
        else:
            self.lives[key] = new

    def _schedule(self, key: Key, old: MessageLife | None, m: MessageLife, now_ms: int) -> None:
        """When this message must be classified again by itself (a deadline of an open delivery of it), and where
        it stands among its queue's oldest waiting and in-flight messages."""
        for state, since in ((v.WAITING, m.waiting_since_ms), (v.IN_FLIGHT, m.in_flight_since_ms)):
            was = None if old is None or old.state != state else (
                old.waiting_since_ms if state == v.WAITING else old.in_flight_since_ms)
            if m.state == state and since is not None and since != was:
                heapq.heappush(self._oldest.setdefault((key[0], state), []), (since, key))
        members = self._members.get(key)
        if members is None:
            return
        for mid in members.deliveries:
            d = self.fold.deliveries[mid]
            if d.open and d.deadline[1] >= now_ms:
                heapq.heappush(self._deadlines, (d.deadline[1], key))

    # --- what the console asks -------------------------------------------------------------------------------------

    def queues(self) -> list[str]:
        return sorted(self._tallies)

    def summary(self, queue: str) -> QueueSummary:
        """``lifecycle.summarise``'s figures for one queue (no window)."""
        tally = self._tallies.get(queue) or _Tally()
        return QueueSummary(states=+tally.states, counters=+tally.counters,
                            oldest_waiting_ms=self._oldest_since(queue, v.WAITING),
                            oldest_in_flight_ms=self._oldest_since(queue, v.IN_FLIGHT))

    def count(self, queue: str, state: str) -> int:
        return len(self._by_state.get(queue, {}).get(state, ()))

    def keys(self, queue: str, state: str, newest_first: bool = True) -> Iterator[Key]:
        """The queue's messages in ``state``, by when they came to it."""
        found = self._by_state.get(queue, {}).get(state, {})
        return iter(reversed(found) if newest_first else found)

    def state_of(self, key: Key) -> str | None:
        life = self.lives.get(key)
        if life is not None:
            return life.state
        return v.ACKED if self._forgotten(key) else None

    def key_of(self, message_id: MessageId) -> Key | None:
        """The message that a record or delivery id belongs to (a forgotten acked message: by its first id only)."""
        record = self._records.get(message_id)
        if record is not None:
            return record.queue, record.first_id_header or message_id
        if message_id in self._delivery_key:
            return self._delivery_key[message_id]
        return next(((q, message_id) for q in self._by_state if self._forgotten((q, message_id))), None)

    def record_ids(self, key: Key) -> list[MessageId]:
        members = self._members.get(key)
        return sorted(members.records | members.deliveries) if members else []

    def record(self, message_id: MessageId) -> Record | None:
        return self._records.get(message_id)

    def deliveries(self, key: Key) -> list[tuple[MessageId, Delivery]]:
        members = self._members.get(key)
        return sorted((mid, self.fold.deliveries[mid]) for mid in members.deliveries) if members else []

    def dead_letters(self, key: Key) -> list[DeadLetter]:
        return list(self._letters.get(key, ()))

    # --- bookkeeping -----------------------------------------------------------------------------------------------

    def _key_of(self, mid: MessageId, d: Delivery) -> Key:
        """As classify keys a delivery: by its record if read, else by its Start."""
        r = self._records.get(mid)
        return (r.queue, r.first_id_header or mid) if r is not None else (d.queue, d.first_id or mid)

    def _place_delivery(self, mid: MessageId, d: Delivery) -> None:
        key = self._key_of(mid, d)
        if self._forgotten(key):
            self.fold.deliveries.pop(mid, None)
            return
        was = self._delivery_key.get(mid)
        if was is not None and was != key:
            self._members[was].deliveries.discard(mid)
            self._dirty.add(was)
        self._delivery_key[mid] = key
        self._member(key).deliveries.add(mid)
        self._dirty.add(key)

    def _member(self, key: Key) -> _Members:
        found = self._members.get(key)
        if found is None:
            found = self._members[key] = _Members()
            self._by_queue.setdefault(key[0], set()).add(key)
        return found

    def _forgotten(self, key: Key) -> bool:
        return self._forget_acked and key not in self._members and key in self._by_state.get(key[0], {}).get(
            v.ACKED, {})

    def _forget(self, key: Key) -> None:
        self.lives.pop(key, None)
        members = self._members.pop(key, None)
        self._by_queue.get(key[0], set()).discard(key)
        self._letters.pop(key, None)
        if members is None:
            return
        for rid in members.records:
            self._records.pop(rid, None)
        for mid in members.deliveries:
            self.fold.deliveries.pop(mid, None)
            self._delivery_key.pop(mid, None)

    def _pop_below(self, heap: list[tuple[int, Key]] | None, bound: int) -> None:
        while heap and heap[0][0] < bound:
            self._dirty.add(heapq.heappop(heap)[1])

    def _oldest_since(self, queue: str, state: str) -> int:
        heap = self._oldest.get((queue, state))
        while heap:
            since, key = heap[0]
            life = self.lives.get(key)
            held = life is not None and life.state == state and since == (
                life.waiting_since_ms if state == v.WAITING else life.in_flight_since_ms)
            if held:
                return since
            heapq.heappop(heap)
        return 0

