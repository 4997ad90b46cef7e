"""Message lifecycles folded from the markers topic: per queue, what was delivered, acked, redelivered,
dead-lettered, and what is still in flight. Pure: no Kafka; the caller feeds it marker records in log order.

kmq's Ends say what they are (an ack carries its writer's instance id; a tracker's End its reason). A *bare* End
(no reason, no writer) comes from a kafka-mq-go component: a Go consumer's ack, or a Go tracker's End after it
produced a copy (key and value only, no kmq headers). It is classified when it can be: a first-delivery Start of
the same queue and payload near it (just before or after) is that copy, so the End is a redelivery and the copy is
folded into the original. A bare End that matches no copy is counted on its own (``go_ends``), never as an ack.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from kmq.wire import DELAY_REASON, EXPIRED_REASON, PURGED_REASON, RELEASE_REASON, RETURN_REASON, MessageId
from kmq.wire.markers import EndReason, Marker, MarkerType


@dataclass(slots=True)
class QueueSummary:
    deliveries: int = 0
    redelivered: int = 0
    acked: int = 0
    rejected: int = 0
    dead_lettered: int = 0
    released: int = 0
    #: Given back unprocessed (consumer close, worker shutdown): redelivered without counting a delivery.
    returned: int = 0
    #: Redeliveries of messages nobody released: their worker crashed or went silent past the deadline.
    recovered: int = 0
    #: Read after their expiry time: never handed out (dead-lettered or dropped, per ``expired_messages``).
    expired: int = 0
    #: Settled by ``kmq purge`` without a handler.
    purged: int = 0
    #: Read before their due time and waiting for it (``send(delay=…)``): neither in flight nor a delivery.
    delayed: int = 0
    #: Of ``redelivered``: copies a kafka-mq-go tracker made (matched by queue and payload).
    go_redelivered: int = 0
    #: Bare Ends (kafka-mq-go) matched to no copy: a Go consumer's ack, or a Go redelivery not read yet.
    go_ends: int = 0
    in_flight: int = 0
    oldest_in_flight_ms: int = 0
    acked_first_ids: set[MessageId] = field(default_factory=set, repr=False)
    dead_first_ids: set[MessageId] = field(default_factory=set, repr=False)
    #: First-delivery ids of the messages in flight now (Started, not Ended).
    in_flight_first_ids: set[MessageId] = field(default_factory=set, repr=False)

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in (
            "deliveries", "redelivered", "acked", "rejected", "dead_lettered", "released", "returned", "recovered",
            "go_redelivered", "go_ends", "delayed", "expired", "purged", "in_flight")}


@dataclass(slots=True)
class _Open:
    message_id: MessageId
    queue: str
    first_id: MessageId
    started_ms: int
    #: The payload: what links a kafka-mq-go tracker's copy (which has no first-id header) to this message.
    value: bytes
    released: bool = False
    #: Waiting for its due time (a "delayed" KeepAlive): the tracker brings it back then.
    delayed: bool = False


Content = tuple[str, bytes]


class LifecycleFold:
    """Feeds on (marker, log timestamp); ``summary()`` gives per-queue figures. Duplicate acks count once."""

    def __init__(self) -> None:
        self._open: dict[MessageId, _Open] = {}
        self._queues: dict[str, QueueSummary] = {}
        #: Open messages by (queue, payload), and originals whose bare End matched no copy yet.
        self._open_by_content: dict[Content, dict[MessageId, _Open]] = defaultdict(dict)
        self._bare_ended: dict[Content, list[_Open]] = defaultdict(list)
        #: Original → a first-delivery Start of the same content seen while the original was open.
        self._copy_candidates: dict[MessageId, _Open] = {}
        self.malformed = 0

    def queue(self, name: str) -> QueueSummary:
        return self._queues.setdefault(name, QueueSummary())

    def add(self, marker: Marker, timestamp_ms: int) -> None:
        if marker.type is MarkerType.START:
            self._start(marker, timestamp_ms)
            return
        known = self._open.get(marker.message_id)
        if known is None:
            return
        summary = self.queue(known.queue)
        if marker.type is MarkerType.KEEPALIVE:
            if marker.reason == RELEASE_REASON:
                summary.released += 1
                known.released = True
            elif marker.reason == RETURN_REASON:
                summary.returned += 1
                known.released = True
            elif marker.reason == DELAY_REASON and not known.delayed:
                summary.deliveries -= 1  # a hop towards the due time, not a delivery
                known.released = known.delayed = True
            return
        copy = self._copy_candidates.pop(known.message_id, None)
        self._close(known)
        if is_kafka_mq_go_end(marker):
            self._bare_end(known, copy, summary)
        elif marker.end_reason is EndReason.REDELIVERED:
            summary.recovered += not known.released
        elif marker.end_reason is EndReason.ACKED:
            if known.first_id not in summary.acked_first_ids:
                summary.acked_first_ids.add(known.first_id)
                summary.acked += 1
        elif marker.end_reason is EndReason.REJECTED and marker.reason == PURGED_REASON:
            summary.purged += 1
        elif marker.end_reason is EndReason.REJECTED and marker.reason == EXPIRED_REASON:
            summary.expired += 1
            summary.deliveries -= 1  # read, never handed out
        elif marker.end_reason in (EndReason.REJECTED, EndReason.DEAD_LETTERED):
            summary.rejected += marker.end_reason is EndReason.REJECTED
            if known.first_id not in summary.dead_first_ids:
                summary.dead_first_ids.add(known.first_id)
                summary.dead_lettered += 1

    def _start(self, marker: Marker, timestamp_ms: int) -> None:
        if marker.message_id in self._open:
            return  # a consumer re-read the record after a failed commit
        summary = self.queue(marker.queue)
        summary.deliveries += 1
        summary.redelivered += (marker.delivery_count or 1) > 1
        item = _Open(marker.message_id, marker.queue, marker.first_id, timestamp_ms, marker.value)
        content = (marker.queue, marker.value)
        if marker.first_message_id in (None, marker.message_id):  # a first delivery, as far as headers tell
            waiting = self._bare_ended.get(content)
            if waiting:  # a kafka-mq-go tracker's copy of an original it already Ended
                self._link(waiting.pop(0), item, summary)
                summary.go_ends -= 1
            else:
                for original in self._open_by_content.get(content, {}).values():
                    self._copy_candidates.setdefault(original.message_id, item)
                    break
        self._open[marker.message_id] = item
        self._open_by_content[content][marker.message_id] = item

    def _bare_end(self, original: _Open, copy: _Open | None, summary: QueueSummary) -> None:
        if copy is not None and copy.message_id in self._open:
            self._link(original, copy, summary)
        else:
            self._bare_ended[(original.queue, original.value)].append(original)
            summary.go_ends += 1

    def _link(self, original: _Open, copy: _Open, summary: QueueSummary) -> None:
        """``copy`` is the kafka-mq-go tracker's redelivery of ``original``: it counts as the original's."""
        copy.first_id = original.first_id
        summary.redelivered += 1
        summary.go_redelivered += 1
        summary.recovered += not original.released

    def _close(self, item: _Open) -> None:
        del self._open[item.message_id]
        same = self._open_by_content.get((item.queue, item.value))
        if same is not None:
            same.pop(item.message_id, None)
            if not same:
                del self._open_by_content[(item.queue, item.value)]

    def summary(self) -> dict[str, QueueSummary]:
        for summary in self._queues.values():
            summary.in_flight = 0
            summary.oldest_in_flight_ms = 0
            summary.in_flight_first_ids = set()
        for summary in self._queues.values():
            summary.delayed = 0
        for item in self._open.values():
            summary = self.queue(item.queue)
            if item.delayed:
                summary.delayed += 1
                continue
            summary.in_flight += 1
            summary.in_flight_first_ids.add(item.first_id)
            if not summary.oldest_in_flight_ms or item.started_ms < summary.oldest_in_flight_ms:
                summary.oldest_in_flight_ms = item.started_ms
        return dict(self._queues)


def is_kafka_mq_go_end(marker: Marker) -> bool:
    """A bare End, which no kmq component writes: kmq's acks carry their writer's instance id, its tracker's
    Ends a reason."""
    return (marker.type is MarkerType.END and marker.end_reason is EndReason.ACKED and not marker.client_id
            and not marker.instance_id)
