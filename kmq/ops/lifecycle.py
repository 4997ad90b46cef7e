"""Message lifecycles from the topics, in Python: the per-message fold behind ``kmq stats`` and the reference the
Spark audit (kmq.ops.audit.classification) is held to. Pure: no Kafka; the caller feeds it what it read.

Three steps, each a definition from kmq.wire.vocabulary:
1. ``DeliveryFold``: markers (in any order; ``seq`` orders one delivery's markers) → per delivery (a Started record)
   its counts of each ``MarkerEvent``, its first Start, and the deadline its last Start or KeepAlive set;
2. ``go_links``: kafka-mq-go trackers' copies (no kmq headers) linked to their originals by queue and payload;
3. ``classify``: deliveries, messages-topic records, dead letters, the queues' committed offsets and purge times →
   per message its facts, its state (``STATE_RULES``) and its counters; ``summarise`` sums them per queue.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from kmq.errors import MarkerDecodeError
from kmq.wire import HEADER_DLQ_QUEUE, HEADER_DLQ_REASON, HEADER_FIRST_ID, DeliveryHeaders, MessageId
from kmq.wire import vocabulary as v
from kmq.wire.marker_batch import decode_record
from kmq.wire.markers import Marker
from kmq.wire.vocabulary import MarkerEvent as E

_EVENTS = len(E)
#: A marker's ``seq``: its record's offset shifted by this, plus its index in the record (a batch holds many).
SEQ_SHIFT = 20


@dataclass(slots=True)
class Delivery:
    """One Started record of a message and what its markers say."""

    message_id: MessageId
    queue: str = ""
    first_id: MessageId | None = None
    starts: int = 0
    start_ms: int = 0
    delivery_count: int = 0
    #: (seq, deadline ms) of its last Start or KeepAlive: the tracker's deadline for it.
    deadline: tuple[int, int] = (-1, 0)
    first_ack_ms: int = 0
    #: When its newest final End (``vocabulary.FINAL_END_EVENTS``) was written, 0 if none.
    final_end_ms: int = 0
    events: list[int] = field(default_factory=lambda: [0] * _EVENTS)

    def count(self, *events: E) -> int:
        return sum(self.events[e] for e in events)

    @property
    def open(self) -> bool:
        return not any(self.events[e] for e in v.END_EVENTS)

    @property
    def handled(self) -> bool:
        """Counts as delivered: no marker says no handler had it."""
        return not any(self.events[e] for e in v.UNHANDLED_EVENTS)


class DeliveryFold:
    """Markers → deliveries. ``add`` takes each marker with its log timestamp and a ``seq`` that grows along the log
    of its partition (e.g. ``offset << 20 | index in record``). Order-independent but for the deadline."""

    def __init__(self) -> None:
        self.deliveries: dict[MessageId, Delivery] = {}
        self.malformed = 0

    def add(self, marker: Marker, timestamp_ms: int, seq: int) -> None:
        event = v.marker_event(marker)
        found = self.deliveries.get(marker.message_id)
        if found is None:
            found = self.deliveries[marker.message_id] = Delivery(marker.message_id)
        found.events[event] += 1
        if event is E.START:
            # Two Starts of one record say the same; were they to differ, the least is taken (as the audit does).
            if not found.starts:
                found.queue, found.first_id, found.start_ms = marker.queue, marker.first_id, timestamp_ms
            else:
                found.queue, found.start_ms = min(found.queue, marker.queue), min(found.start_ms, timestamp_ms)
                found.first_id = min(found.first_id or marker.first_id, marker.first_id)
            found.starts += 1
            found.delivery_count = max(found.delivery_count, marker.delivery_count or 1)
        elif event is E.ACK and (not found.first_ack_ms or timestamp_ms < found.first_ack_ms):
            found.first_ack_ms = timestamp_ms
        elif event in v.FINAL_END_EVENTS:
            found.final_end_ms = max(found.final_end_ms, timestamp_ms)
        if event not in v.END_EVENTS and seq > found.deadline[0]:
            found.deadline = (seq, timestamp_ms + marker.redeliver_after_ms)

    def add_record(self, value: bytes | None, timestamp_ms: int, offset: int) -> list[Marker]:
        """Every marker of one markers-topic record (either format), returned; an undecodable one is counted."""
        try:
            markers = decode_record(value)
        except MarkerDecodeError:
            self.malformed += 1
            return []
        base = offset << SEQ_SHIFT
        for index, marker in enumerate(markers):
            self.add(marker, timestamp_ms, base + index)
        return markers

    def started(self) -> Iterable[Delivery]:
        """Deliveries with a Start: markers of a record never Started (read past) are ignored."""
        return (d for d in self.deliveries.values() if d.starts)


class Record(NamedTuple):
    """A messages-topic record, as the classification needs it."""

    message_id: MessageId
    queue: str
    timestamp_ms: int
    #: The first-id header (a kmq tracker's or a redrive's copy), None on an original or a Go tracker's copy.
    first_id_header: MessageId | None
    #: The enqueued-at header (a copy), 0 if absent.
    enqueued_at_ms: int
    #: A digest of the payload: links a Go tracker's copy to its original.
    content: bytes = b""

    @property
    def enqueued_ms(self) -> int:
        return self.enqueued_at_ms or self.timestamp_ms


def to_record(message_id: MessageId, key: bytes | None, timestamp_ms: int, headers: Mapping[str, bytes],
              value: bytes | None) -> Record:
    """A messages-topic record as the classification needs it."""
    delivery = DeliveryHeaders.parse(headers) if headers else DeliveryHeaders(1, None, 0)
    first = delivery.first_message_id
    # A kafka-mq-go tracker's copy is found by its payload (a digest: a copy keeps the original's).
    content = hashlib.blake2b(value or b"", digest_size=16).digest()
    return Record(message_id, (key or b"").decode("utf-8", "replace"), timestamp_ms, first,
                  delivery.enqueued_at_ms, content)


class DeadLetter(NamedTuple):
    queue: str
    first_id: MessageId | None
    reason: str
    #: When it was written: a delivery of its message Started later (a redrive) puts it behind the message.
    timestamp_ms: int


def to_dead_letter(key: bytes | None, headers: Mapping[str, bytes], timestamp_ms: int) -> DeadLetter:
    """A dead letter as the classification needs it: its queue, first id, reason and time."""
    first = headers.get(HEADER_FIRST_ID)
    queue = headers.get(HEADER_DLQ_QUEUE) or key or b""
    return DeadLetter(queue.decode("utf-8", "replace"), MessageId.parse(first.decode()) if first else None,
                      headers.get(HEADER_DLQ_REASON, b"").decode("utf-8", "replace"), timestamp_ms)


@dataclass(frozen=True, slots=True)
class Window:
    """An incremental audit's window: messages enqueued in [from_ms, to_ms); records before ``start_offsets``
    (per messages partition) were not read."""

    start_offsets: Mapping[int, int]
    from_ms: int | None = None
    to_ms: int | None = None

    def before(self, first_id: MessageId) -> bool:
        return first_id.offset < self.start_offsets.get(first_id.partition, 0)


@dataclass(frozen=True, slots=True)
class Context:
    """What else the classification needs: group offsets, purge times, at-most-once queues, now, a window."""

    now_ms: int
    committed: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    purged_before: Mapping[str, int] = field(default_factory=dict)
    at_most_once: frozenset[str] = frozenset()
    window: Window | None = None


class GoLinks(NamedTuple):
    #: Copy record id -> the first id of the message it is a copy of.
    links: dict[MessageId, MessageId]
    #: Record ids of the originals a copy follows (their bare End was a Go tracker's redelivery).
    followed: set[MessageId]


def go_links(deliveries: Mapping[MessageId, Delivery], records: Iterable[Record]) -> GoLinks:
    """kafka-mq-go trackers' copies, linked to their originals. A Go copy is a record without a first-id header with
    the queue and payload of an earlier record whose delivery got a bare End; each original takes its earliest such
    copy, and a copy claimed by several originals goes to the latest of them. ("Earlier": by timestamp, then
    partition and offset.)"""
    bare = {mid for mid, d in deliveries.items() if d.starts and d.events[E.GO_END]}
    if not bare:
        return GoLinks({}, set())
    originals: dict[tuple[str, bytes], list[Record]] = defaultdict(list)
    candidates: dict[tuple[str, bytes], list[Record]] = defaultdict(list)
    for r in records:
        if r.message_id in bare:
            originals[(r.queue, r.content)].append(r)
        if r.first_id_header is None:
            candidates[(r.queue, r.content)].append(r)
    chosen: dict[MessageId, Record] = {}  # copy id -> the latest original claiming it
    for key, group in originals.items():
        for original in group:
            after = [c for c in candidates.get(key, ()) if _order(c) > _order(original)]
            if after:
                taken = min(after, key=_order).message_id
                if taken not in chosen or _order(original) > _order(chosen[taken]):
                    chosen[taken] = original
    links = {copy_id: original.first_id_header or original.message_id for copy_id, original in chosen.items()}
    for copy_id in links:  # a copy of a copy: follow the chain to the first original (chains go back in time)
        while links[copy_id] in links:
            links[copy_id] = links[links[copy_id]]
    return GoLinks(links, {original.message_id for original in chosen.values()})


def _order(r: Record) -> tuple[int, int, int]:
    return r.timestamp_ms, r.message_id.partition, r.message_id.offset


#: Where a message stands to an audit's window: enqueued in it, before it (its original was not read), after it.
IN_WINDOW, BEFORE_WINDOW, AFTER_WINDOW = "in", "before", "after"


@dataclass(slots=True)
class MessageLife:
    """One message: its facts (``vocabulary.FACTS``), state, counters, and what the audit's extras need."""

    queue: str
    first_id: MessageId
    facts: Counter[str] = field(default_factory=Counter)
    counters: Counter[str] = field(default_factory=Counter)
    enqueued_ms: int | None = None
    first_start_ms: int | None = None
    max_delivery_count: int = 0
    acks: int = 0
    in_flight_since_ms: int | None = None
    waiting_since_ms: int | None = None
    #: The latest first Start of its deliveries, and per fact of ``vocabulary.UNDONE_BY_A_LATER_START`` when its
    #: newest marker or letter was written: a fact older than the last Start no longer counts.
    last_start_ms: int | None = None
    newest_ms: dict[str, int] = field(default_factory=dict)
    state: str = ""
    scope: str = IN_WINDOW


Key = tuple[str, MessageId]


def classify(deliveries: Mapping[MessageId, Delivery], records: Iterable[Record], dead_letters: Iterable[DeadLetter],
             context: Context) -> dict[Key, MessageLife]:
    """Every message's facts, state and counters."""
    records = list(records)
    links, followed = go_links(deliveries, records)
    lives: dict[Key, MessageLife] = {}

    def life(queue: str, first_id: MessageId) -> MessageLife:
        first_id = links.get(first_id, first_id)
        found = lives.get((queue, first_id))
        if found is None:
            found = lives[(queue, first_id)] = MessageLife(queue, first_id)
        return found

    # A delivery belongs to the message of its record (the first-id header its Start copied), or, its record not
    # read, to its Start's first id.
    by_id = {r.message_id: r for r in records}
    for mid, d in deliveries.items():
        if d.starts:
            r = by_id.get(mid)
            queue, first = (r.queue, r.first_id_header or mid) if r is not None else (d.queue, d.first_id or mid)
            _add_delivery(life(queue, first), d, mid in followed, context.now_ms)
    for r in records:
        _add_record(life(r.queue, r.first_id_header or r.message_id), r, deliveries, context, r.message_id in links)
    for letter in dead_letters:
        if letter.first_id is not None:
            event = v.dead_letter_event(letter.reason)
            m = life(letter.queue, letter.first_id)
            _add_fact(m, "expired_letters" if event is E.EXPIRE else "dead_letters", 1, letter.timestamp_ms)
            m.counters["refused_letters"] += event is E.REJECT
    for m in lives.values():
        _finish(m, context.window)
    return lives


def _add_delivery(m: MessageLife, d: Delivery, go_copied: bool, now_ms: int) -> None:
    f, c, ev = m.facts, m.counters, d.events
    f["acks"] += ev[E.ACK]
    m.acks += ev[E.ACK]
    if d.open:
        if d.deadline[1] < now_ms:
            f["open_overdue"] += 1
        elif ev[E.DELAY]:
            f["open_delayed"] += 1
        else:
            f["open_in_flight"] += 1
            m.in_flight_since_ms = min(m.in_flight_since_ms or d.start_ms, d.start_ms)
    _add_fact(m, "purge_ends", ev[E.PURGE] + ev[E.TRACKER_PURGE], d.final_end_ms)
    _add_fact(m, "expire_ends", ev[E.EXPIRE], d.final_end_ms)
    _add_fact(m, "dead_ends", ev[E.REJECT] + ev[E.DEAD_LETTER], d.final_end_ms)
    f["dedup_ends"] += ev[E.DEDUPLICATE]
    f["go_ends"] += bool(ev[E.GO_END]) and not go_copied
    c["refused_ends"] += ev[E.REJECT]
    c[v.DELIVERED] += d.handled
    c[v.RELEASED] += ev[E.RELEASE]
    c[v.RETURNED] += ev[E.RETURN]
    if not d.count(*v.UNCOUNTED_COPY_EVENTS):
        copies = ev[E.REDELIVER] + go_copied
        c[v.REDELIVERED] += copies
        c[v.GO_REDELIVERED] += go_copied
        c[v.RECOVERED] += bool(copies) and not ev[E.RELEASE]
    m.first_start_ms = min(m.first_start_ms or d.start_ms, d.start_ms)
    m.last_start_ms = max(m.last_start_ms or d.start_ms, d.start_ms)
    m.max_delivery_count = max(m.max_delivery_count, d.delivery_count or 1)


def _add_fact(m: MessageLife, name: str, count: int, written_ms: int) -> None:
    """A fact of ``vocabulary.UNDONE_BY_A_LATER_START``, with when its marker or letter was written."""
    if count:
        m.facts[name] += count
        m.newest_ms[name] = max(m.newest_ms.get(name, written_ms), written_ms)


def _add_record(m: MessageLife, r: Record, deliveries: Mapping[MessageId, Delivery], context: Context,
                go_copy: bool) -> None:
    if r.first_id_header is None and not go_copy:
        m.enqueued_ms = r.timestamp_ms
        m.counters[v.PRODUCED] += 1
    started = deliveries.get(r.message_id)
    if started is not None and started.starts:
        return
    if started is not None and started.events[E.DEDUPLICATE]:  # a duplicate send: Ended instead of Started
        m.facts["dedup_ends"] += started.events[E.DEDUPLICATE]
        return
    if r.message_id.offset < context.committed.get(r.queue, {}).get(r.message_id.partition, 0):
        if r.queue in context.at_most_once:
            m.facts["consumed_records"] += 1
    elif r.enqueued_ms < context.purged_before.get(r.queue, r.enqueued_ms):
        m.facts["purged_records"] += 1
    else:
        m.facts["waiting_records"] += 1
        m.waiting_since_ms = min(m.waiting_since_ms or r.timestamp_ms, r.timestamp_ms)


def _finish(m: MessageLife, window: Window | None) -> None:
    if m.last_start_ms is not None:
        for name, written_ms in m.newest_ms.items():
            if written_ms < m.last_start_ms:
                m.facts[name] = 0
    m.state = v.state_of(m.facts)
    # An event count (a redrive does not undo a refusal): a refusal writes a REJECT End and a letter; either may be
    # all that was read.
    refused = max(m.counters.pop("refused_ends", 0), m.counters.pop("refused_letters", 0))
    if refused:
        m.counters[v.REJECTED] = refused
    if window is None:
        return
    if window.before(m.first_id) or (m.enqueued_ms is not None and window.from_ms is not None
                                     and m.enqueued_ms < window.from_ms):
        m.scope = BEFORE_WINDOW
    elif m.enqueued_ms is not None and window.to_ms is not None and m.enqueued_ms >= window.to_ms:
        m.scope = AFTER_WINDOW


@dataclass(slots=True)
class QueueSummary:
    """One queue's messages: how many are in each state, its counters, and the oldest waiting and in-flight."""

    states: Counter[str] = field(default_factory=Counter)
    counters: Counter[str] = field(default_factory=Counter)
    #: Messages enqueued before an audit's window whose markers it read ("started before the window").
    before_window: int = 0
    oldest_waiting_ms: int = 0
    oldest_in_flight_ms: int = 0
    #: State -> first ids of its messages (only with ``summarise(…, keep_ids=True)``).
    first_ids: dict[str, set[MessageId]] = field(default_factory=lambda: defaultdict(set))

    def figures(self) -> dict[str, int]:
        """Every state and counter of the vocabulary, and the duplicate figures, by name."""
        return {**{s: self.states[s] for s in v.STATES}, v.LOST: sum(self.states[s] for s in v.LOST_STATES),
                **{c: self.counters[c] for c in (*v.COUNTERS, *v.DUPLICATES)}}


def summarise(lives: Iterable[MessageLife], keep_ids: bool = False) -> dict[str, QueueSummary]:
    """Per queue, the messages in the window (all, without one) summed."""
    out: dict[str, QueueSummary] = {}
    for m in lives:
        q = out.get(m.queue)
        if q is None:
            q = out[m.queue] = QueueSummary()
        if m.scope != IN_WINDOW:
            q.before_window += m.scope == BEFORE_WINDOW
            continue
        q.states[m.state] += 1
        q.counters.update(m.counters)
        q.counters[v.DUPLICATE_ACKS] += max(0, m.acks - 1)
        q.counters[v.ACKED_MORE_THAN_ONCE] += m.acks > 1
        q.counters[v.DELIVERED_MORE_THAN_ONCE] += m.counters[v.DELIVERED] > 1
        if m.state == v.IN_FLIGHT and m.in_flight_since_ms is not None:
            q.oldest_in_flight_ms = min(q.oldest_in_flight_ms or m.in_flight_since_ms, m.in_flight_since_ms)
        if m.state == v.WAITING and m.waiting_since_ms is not None:
            q.oldest_waiting_ms = min(q.oldest_waiting_ms or m.waiting_since_ms, m.waiting_since_ms)
        if keep_ids:
            q.first_ids[m.state].add(m.first_id)
    return out
