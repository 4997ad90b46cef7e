"""MarkerBuffers: the markers of one simulated tick, written at its end as kmq's components write them."""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Mapping
from typing import NamedTuple

from kmq.ops.audit.synthetic.life import Life
from kmq.ops.audit.synthetic.plans import QueueSpec
from kmq.ops.audit.synthetic.sink import Sink
from kmq.wire import MessageId
from kmq.wire.marker_batch import encode_settles, encode_starts
from kmq.wire.markers import Marker, MarkerType, encode

TRACKER_ID = "kmq-redelivery-tracker"


class Start(NamedTuple):
    """What ``encode_starts`` needs of a message (marker_batch.Startable)."""

    message_id: MessageId
    payload: bytes
    record_headers: Mapping[str, bytes]
    delivery_count: int
    first_message_id: MessageId
    enqueued_at_ms: int


class MarkerBuffers:
    """Markers of one tick, written at its end as the components would: per queue and consumer instance one Start
    batch and one settle batch (``kmq``), or a record per marker (``kafka-mq-go``); a tracker's Ends apart."""

    def __init__(self, sink: Sink, partitions: int) -> None:
        self._sink = sink
        self._partitions = partitions
        self._starts: dict[tuple[QueueSpec, str], list[Start]] = defaultdict(list)
        self._settles: dict[tuple[QueueSpec, str], list[tuple[Marker, bool]]] = defaultdict(list)
        self._tracker: dict[QueueSpec, list[Marker]] = defaultdict(list)
        self._plain: dict[QueueSpec, list[Marker]] = defaultdict(list)

    def start(self, queue: QueueSpec, life: Life) -> None:
        assert life.record is not None and life.first is not None
        if queue.marker_format == "kmq":
            self._starts[(queue, life.instance)].append(
                Start(life.record, life.payload, {}, life.count, life.first, life.enqueued_ms))
        elif life.go:
            self._plain[queue].append(Marker(MarkerType.START, life.record, queue.redelivery_timeout_ms,
                                             queue.name.encode(), life.payload))
        else:
            self._plain[queue].append(Marker(
                MarkerType.START, life.record, queue.redelivery_timeout_ms, queue.name.encode(), life.payload,
                delivery_count=life.count, first_message_id=life.first, enqueued_at_ms=life.enqueued_ms,
                instance_id=life.instance))

    def consumer_end(self, queue: QueueSpec, life: Life, marker: Marker, ack: bool = False) -> None:
        if queue.marker_format == "kmq":
            self._settles[(queue, life.instance)].append((marker, ack))
        else:
            self._plain[queue].append(marker)

    def tracker_end(self, queue: QueueSpec, marker: Marker) -> None:
        (self._tracker if queue.marker_format == "kmq" else self._plain)[queue].append(marker)

    def go_tracker_end(self, queue: QueueSpec, record: MessageId) -> None:
        self._plain[queue].append(Marker(MarkerType.END, record))

    def flush(self, ts: int) -> None:
        write = self._sink.marker
        for (queue, instance), starts in self._starts.items():
            write(self._partition(queue), queue.name.encode(), encode_starts(
                queue.name.encode(), queue.redelivery_timeout_ms, starts, instance_id=instance), ts)
        for (queue, instance), settles in self._settles.items():
            keep_alives = [m.message_id for m, _ in settles if m.type is MarkerType.KEEPALIVE and not m.reason]
            others = [m for m, ack in settles if not ack and (m.type is MarkerType.END or m.reason)]
            acks = [m.message_id for m, ack in settles if ack]
            write(self._partition(queue), queue.name.encode(), encode_settles(
                queue.name.encode(), queue.redelivery_timeout_ms, keep_alives=keep_alives, acks=acks,
                others=others, instance_id=instance), ts)
        for queue, ends in self._tracker.items():
            write(self._partition(queue), queue.name.encode(),
                  encode_settles(queue.name.encode(), 0, others=ends, client_id=TRACKER_ID), ts)
        for queue, markers in self._plain.items():
            for marker in markers:
                write(self._partition(queue), queue.name.encode(), encode(marker), ts)
        self._starts.clear()
        self._settles.clear()
        self._tracker.clear()
        self._plain.clear()

    def _partition(self, queue: QueueSpec) -> int:
        return zlib.crc32(queue.name.encode()) % self._partitions
