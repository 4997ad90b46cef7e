"""Message lifecycles folded from the markers topic: per queue, what was delivered, acked, redelivered,
dead-lettered, and what is still in flight. Pure: no Kafka; the caller feeds it marker records in log order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kmq.markers import EndReason, Marker, MarkerType
from kmq.wire import RELEASE_REASON, RETURN_REASON, MessageId


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
    in_flight: int = 0
    oldest_in_flight_ms: int = 0
    acked_first_ids: set[MessageId] = field(default_factory=set, repr=False)
    dead_first_ids: set[MessageId] = field(default_factory=set, repr=False)
    #: First-delivery ids of the messages in flight now (Started, not Ended).
    in_flight_first_ids: set[MessageId] = field(default_factory=set, repr=False)

    def as_dict(self) -> dict[str, int]:
        return {"deliveries": self.deliveries, "redelivered": self.redelivered, "acked": self.acked,
                "rejected": self.rejected, "dead_lettered": self.dead_lettered, "released": self.released,
                "returned": self.returned, "recovered": self.recovered, "in_flight": self.in_flight}


@dataclass(slots=True)
class _Open:
    queue: str
    first_id: MessageId
    started_ms: int
    released: bool = False


class LifecycleFold:
    """Feeds on (marker, log timestamp); ``summary()`` gives per-queue figures. Duplicate acks count once."""

    def __init__(self) -> None:
        self._open: dict[MessageId, _Open] = {}
        self._queues: dict[str, QueueSummary] = {}
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
            return
        del self._open[marker.message_id]
        if marker.end_reason is EndReason.REDELIVERED:
            summary.recovered += not known.released
        if marker.end_reason is EndReason.ACKED:
            if known.first_id not in summary.acked_first_ids:
                summary.acked_first_ids.add(known.first_id)
                summary.acked += 1
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
        self._open[marker.message_id] = _Open(marker.queue, marker.first_id, timestamp_ms)

    def summary(self) -> dict[str, QueueSummary]:
        for summary in self._queues.values():
            summary.in_flight = 0
            summary.oldest_in_flight_ms = 0
            summary.in_flight_first_ids = set()
        for item in self._open.values():
            summary = self.queue(item.queue)
            summary.in_flight += 1
            summary.in_flight_first_ids.add(item.first_id)
            if not summary.oldest_in_flight_ms or item.started_ms < summary.oldest_in_flight_ms:
                summary.oldest_in_flight_ms = item.started_ms
        return dict(self._queues)
