"""``kmq inspect``: one message's life, read from the three topics and told as a story.

A message is every record one ``send`` produced: the original on the messages topic and every copy of it (the
tracker's redeliveries, a delayed message's hops, a redrive), linked by the first delivery's id. Its story, in
causal order: enqueued; each delivery (to whom: client id and host:pid; with which delivery count) or a read before
its due time; keep-alives; releases and give-backs; each copy with the act that made it (a redelivery after a
deadline, a delayed message falling due, a redrive); the end (acked, dead-lettered with its reason, expired,
purged); and its state now, the one ``kmq stats`` and the audit give it (kmq.ops.lifecycle's classification of
what was read), with who holds it if it is in flight.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from confluent_kafka import Message as KafkaMessage

from kmq import _kafka, wire
from kmq._kafka.topic_replay import TopicReplay
from kmq.config import Config
from kmq.errors import KmqError
from kmq.ops import stats
from kmq.ops.lifecycle import Context, DeliveryFold, classify
from kmq.ops.stats import committed_offsets, purge_times
from kmq.topic_sets import TopicSet
from kmq.wire import MessageId, vocabulary
from kmq.wire.markers import EndReason, Marker, MarkerType

#: Order of events that share a millisecond: the way one act leads to the next.
_CAUSAL_RANK = {"enqueued": 0, "copy": 1, "delivered": 2, "read_early": 2, "kept_alive": 3, "released": 4,
                "returned": 4, "acked": 5, "dead_lettered": 5, "expired": 5, "purged": 5, "ended": 5,
                "deduplicated": 5}


@dataclass(frozen=True, slots=True)
class Event:
    at_ms: int
    #: enqueued, copy (what made it: ``detail["because"]``), delivered, read_early, kept_alive, released, returned,
    #: acked, dead_lettered, expired, purged, ended (a kafka-mq-go End).
    what: str
    message_id: str
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Life:
    queue: str
    first_message_id: str
    payload_bytes: int = 0
    #: The sender's headers (kmq's own are told as events or fields).
    headers: dict[str, str] = field(default_factory=dict)
    #: One of kmq.wire.vocabulary.STATES.
    state: str = vocabulary.WAITING
    #: The state in a sentence: "acked on delivery 2", "dead-lettered after 3 deliveries: …".
    summary: str = ""
    holder: str = ""
    deliveries: int = 0
    events: list[Event] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def inspect_message(config: Config, queue: str, message_id: MessageId, *, topic_set: str | None = None) -> Life:
    """The life of the message at ``message_id`` on the messages topic (or of the one it is a copy of), in the
    topic set the queue lives in, or in ``topic_set`` (a queue moving between sets has messages in both)."""
    # Read in kmq stats' order where its state depends on it: committed offsets and purge times first, and every
    # copy a tracker made before an End that was read (the messages replay goes on after the markers).
    topics = config.topics_for(queue) if topic_set is None else config.topic_set(topic_set)
    committed, purges = committed_offsets(config, topics, [queue]), purge_times(config, topics)
    key = queue.encode()
    with TopicReplay(config, topics, topics.messages) as messages:
        records, owner = _queue_records(messages.records(), key, message_id)
        if owner is None:
            others = [s.name for s in config.reading_sets(queue) if s != topics]
            hint = f" (the queue moves from set {others[0]}: kmq inspect --set {others[0]})" if others else ""
            raise KmqError(f"no record at {topics.messages}[{message_id}]: kmq inspect takes PARTITION:OFFSET "
                           f"of a record on the messages topic{hint}")
        if owner != queue:
            raise KmqError(f"message {message_id} belongs to queue {owner!r}, not {queue!r}: "
                           f"kmq inspect {owner} {message_id}")
        first = next(_kafka.first_id(r) for r in records if _kafka.message_id(r) == message_id)
        copies = {_kafka.message_id(r): r for r in records if _kafka.first_id(r) == first}
        # The whole queue's deliveries, as kmq stats folds them: a kafka-mq-go tracker's copy is linked to its
        # original only among all of them.
        fold = DeliveryFold()
        markers: list[tuple[Marker, int]] = []
        for record in _records(config, topics, topics.markers, key):
            at_ms = _kafka.record_timestamp_ms(record)
            markers.extend((m, at_ms) for m in fold.add_record(record.value(), at_ms, record.offset() or 0)
                           if m.message_id in copies)
        records.extend(r for r in messages.records() if r.key() == key)
    letter_records = list(_records(config, topics, topics.dead_letters, key))
    # The state is the one kmq stats and the audit give (one classification); the story tells how it came to be.
    context = Context(wire.now_ms(), committed, purges, frozenset(config.at_most_once_queues))
    found = classify(fold.deliveries, map(stats.to_record, records), map(stats.to_dead_letter, letter_records),
                     context).get((queue, first))
    return tell(queue, first, copies, markers, letter_records, None if found is None else found.state)


def tell(queue: str, first: MessageId, copies: Mapping[MessageId, KafkaMessage],
         markers: Iterable[tuple[Marker, int]], letters: Iterable[KafkaMessage], state: str | None = None) -> Life:
    """A message's story from its own records (the original and its copies on the messages topic, by id), the
    markers of their deliveries (each with its log time) and its dead letters, however they were read
    (``inspect_message`` replays the topics; the console reads where it knows they are). ``state``, the
    classification's, is the one told when the story's own ending says otherwise."""
    original = copies.get(first) or next(iter(copies.values()))
    life = Life(queue, str(first), len(original.value() or b""),
                {k: v.decode("utf-8", "replace") for k, v in wire.user_headers(_kafka.header_dict(original)).items()})
    story = _Story(life, dict(copies), first)
    for marker, at_ms in markers:
        if marker.message_id in copies:
            story.marker(marker, at_ms)
    for record in letters:
        said = wire.DeadLetterHeaders.parse(_kafka.header_dict(record))
        if said.delivery.first_message_id == first:
            story.dead_letter(_kafka.record_timestamp_ms(record), str(_kafka.message_id(record)), said)
    told = story.told()
    if state is not None and state != told.state:
        held = state in (vocabulary.IN_FLIGHT, vocabulary.OVERDUE)
        told.state, told.summary, told.holder = state, _SAYS[state], told.holder if held else ""
    return told


#: The state in a sentence, where the story's own ending does not say it.
_SAYS = {
    vocabulary.ACKED: "acked",
    vocabulary.IN_FLIGHT: "in flight",
    vocabulary.DELAYED: "waiting for its due time",
    vocabulary.OVERDUE: "overdue: in flight past its deadline, and no tracker has brought it back yet",
    vocabulary.WAITING: "waiting on the messages topic",
    vocabulary.PURGED: "purged: enqueued before the queue's purge time",
    vocabulary.EXPIRED: "expired before a handler got it",
    vocabulary.DEDUPLICATED: "a duplicate send (its dedup id came within the window): never handed out",
    vocabulary.DEAD_LETTERED: "dead-lettered",
    vocabulary.CONSUMED: "read by an at-most-once consumer (what its handler did, only the handler knows)",
    vocabulary.ENDED_BY_GO: "ended by a kafka-mq-go component (a Go consumer's ack, or a Go tracker's copy not read "
                            "yet)",
    vocabulary.VANISHED: "vanished: its last delivery was redelivered but no copy of it exists (lost)",
}


class _Story:
    """Folds a message's records into its events, merging the acts that several records tell (a copy and the End
    that says why it was made; a dead letter and its End; a read before the due time and its hop)."""

    def __init__(self, life: Life, copies: dict[MessageId, KafkaMessage], first: MessageId) -> None:
        self._life = life
        self._first = first
        self._copies = {mid: _kafka.record_timestamp_ms(r) for mid, r in copies.items()}
        self._open: dict[MessageId, Marker] = {}
        self._ended: dict[MessageId, Event] = {}
        #: Ends(REDELIVERED) already matched to the copy they made.
        self._matched: set[MessageId] = set()
        self._dead: Event | None = None
        self._events: list[Event] = [Event(at, "enqueued", str(mid)) for mid, at in self._copies.items()
                                     if mid == first]

    def marker(self, marker: Marker, at_ms: int) -> None:
        mid = marker.message_id
        if marker.type is MarkerType.START:
            self._open[mid] = marker
            self._events.append(Event(at_ms, "delivered", str(mid),
                                      {"to": _who(marker), "delivery_count": marker.delivery_count or 1}))
        elif marker.type is MarkerType.KEEPALIVE:
            self._keep_alive(marker, at_ms)
        else:
            self._open.pop(mid, None)
            self._end(marker, at_ms)

    def _keep_alive(self, marker: Marker, at_ms: int) -> None:
        mid = str(marker.message_id)
        if marker.reason == wire.DELAY_REASON:  # a hop, not a delivery: its Start was a read before the due time
            for i in range(len(self._events) - 1, -1, -1):
                if self._events[i].what == "delivered" and self._events[i].message_id == mid:
                    self._events[i] = Event(self._events[i].at_ms, "read_early", mid,
                                            {"due_in_ms": marker.redeliver_after_ms, "by": _who(marker)})
                    break
            return
        if marker.reason in (wire.RELEASE_REASON, wire.RETURN_REASON):
            self._events.append(Event(at_ms, marker.reason, mid,
                                      {"by": _who(marker), "delay_ms": marker.redeliver_after_ms}))
        else:
            self._events.append(Event(at_ms, "kept_alive", mid, {"by": _who(marker)}))

    def _end(self, marker: Marker, at_ms: int) -> None:
        mid = str(marker.message_id)
        detail: dict[str, Any] = {"by": _who(marker)}
        if marker.reason:
            detail["reason"] = marker.reason
        reason = marker.end_reason
        if reason is EndReason.REDELIVERED:
            self._ended[marker.message_id] = Event(at_ms, "copy", mid, detail)
            return
        if reason is EndReason.ACKED and not marker.client_id and not marker.instance_id:
            what = "ended"  # a kafka-mq-go End: an ack, or a copy by a Go tracker (it says neither)
        elif reason is EndReason.ACKED:
            what = "acked"
        elif marker.reason == wire.EXPIRED_REASON:
            what = "expired"
        elif marker.reason == wire.PURGED_REASON:
            what = "purged"
        elif wire.is_deduplicated(marker.reason):
            what = "deduplicated"
            repeats = wire.duplicate_of(marker.reason)
            if repeats is not None:
                detail["duplicate_of"] = str(repeats)
        else:
            what = "dead_lettered"
        self._ended[marker.message_id] = Event(at_ms, what, mid, detail)

    def dead_letter(self, at_ms: int, dlq_id: str, said: wire.DeadLetterHeaders) -> None:
        self._dead = Event(at_ms, "dead_letter", dlq_id, {"reason": said.reason,
                                                          "delivery_count": said.delivery.delivery_count})

    def told(self) -> Life:
        life = self._life
        events = self._events + self._copy_events() + self._end_events()
        events.sort(key=lambda e: (e.at_ms, _CAUSAL_RANK.get(e.what, 9)))
        life.events = events
        life.deliveries = sum(e.what == "delivered" for e in events)
        life.state, life.summary, life.holder = self._state(events)
        return life

    def _copy_events(self) -> list[Event]:
        """Each copy at the time it was made, with why: the End of the delivery it replaces says (a tracker writes
        the End once the copy is durable, so the End comes after, sometimes after the copy's own delivery)."""
        out = []
        for mid, at_ms in sorted(self._copies.items(), key=lambda item: item[1]):
            if mid == self._first:
                continue
            made_by = self._replaced_by(at_ms)
            detail = {"because": made_by, "copy_of": str(self._first)}
            out.append(Event(at_ms, "copy", str(mid), detail))
        return out

    def _replaced_by(self, copy_at_ms: int) -> str:
        """Why the copy made at ``copy_at_ms`` exists: the nearest End(REDELIVERED) whose delivery was released,
        read early, or went silent; else a redrive (no End asks for it)."""
        candidates = [(mid, e) for mid, e in self._ended.items() if e.what == "copy" and mid not in self._matched]
        if not candidates:
            return "redrive"
        mid, _end = min(candidates, key=lambda item: abs(item[1].at_ms - copy_at_ms))
        self._matched.add(mid)
        released = any(e.what == "released" and e.message_id == str(mid) for e in self._events)
        early = any(e.what == "read_early" and e.message_id == str(mid) for e in self._events)
        returned = any(e.what == "returned" and e.message_id == str(mid) for e in self._events)
        if early:
            return "due"
        if returned:
            return "given back"
        return "released" if released else "deadline passed (worker silent)"

    def _end_events(self) -> list[Event]:
        out = [e for e in self._ended.values() if e.what != "copy"]
        if self._dead is not None:
            # One act: the dead letter and the End that follows it.
            ended = next((e for e in out if e.what in ("dead_lettered", "expired")), None)
            if ended is not None:
                out.remove(ended)
                ended.detail.update(self._dead.detail, dead_letter=self._dead.message_id)
                out.append(Event(self._dead.at_ms, ended.what, ended.message_id, ended.detail))
            else:  # the End not written yet (or lost): the letter alone says it
                out.append(Event(self._dead.at_ms, "dead_lettered", self._dead.message_id, self._dead.detail))
        return out

    def _state(self, events: list[Event]) -> tuple[str, str, str]:
        deliveries = sum(e.what == "delivered" for e in events)
        for event in reversed(events):
            if event.what == "acked":
                return vocabulary.ACKED, f"acked on delivery {deliveries}", ""
            if event.what == "dead_lettered":
                reason = event.detail.get("reason", "")
                return (vocabulary.DEAD_LETTERED,
                        f"dead-lettered after {_plural(deliveries, 'delivery', 'deliveries')}"
                        + (f": {reason}" if reason else ""), "")
            if event.what == "expired":
                return vocabulary.EXPIRED, "expired before a handler got it", ""
            if event.what == "purged":
                return vocabulary.PURGED, f"purged after {_plural(deliveries, 'delivery', 'deliveries')}", ""
            if event.what == "deduplicated":
                repeats = event.detail.get("duplicate_of")
                said = f"duplicate of {repeats}" if repeats else _SAYS[vocabulary.DEDUPLICATED]
                return vocabulary.DEDUPLICATED, said, ""
        if self._open:
            mid, start = max(self._open.items(), key=lambda item: item[1].delivery_count or 1)
            if any(e.what == "read_early" and e.message_id == str(mid) for e in events):
                return vocabulary.DELAYED, "waiting for its due time", ""
            return (vocabulary.IN_FLIGHT, f"in flight as {mid}, delivery {start.delivery_count or 1}",
                    _who(start))
        unstarted = [mid for mid in self._copies if mid not in {MessageId.parse(e.message_id) for e in events
                                                                 if e.what in ("delivered", "read_early")}]
        if unstarted:
            return vocabulary.WAITING, f"waiting on the messages topic as {unstarted[-1]}", ""
        return vocabulary.WAITING, "ended by a kafka-mq-go component; no copy seen yet", ""


def _queue_records(read: Iterable[KafkaMessage], key: bytes,
                   message_id: MessageId) -> tuple[list[KafkaMessage], str | None]:
    """The queue's records on the messages topic, and the queue whose record sits at ``message_id`` (None: none)."""
    mine: list[KafkaMessage] = []
    owner = None
    for record in read:
        if _kafka.message_id(record) == message_id:
            owner = (record.key() or b"").decode("utf-8", "replace")
        if record.key() == key:
            mine.append(record)
    return mine, owner


def _records(config: Config, topics: TopicSet, topic: str, key: bytes) -> Iterator[KafkaMessage]:
    with TopicReplay(config, topics, topic) as replay:
        for record in replay.records():
            if record.key() == key:
                yield record


def _who(marker: Marker) -> str:
    return " ".join(p for p in (marker.client_id, marker.instance_id) if p) or "a kafka-mq-go component"


def _plural(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"
