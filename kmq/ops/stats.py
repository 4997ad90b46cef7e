"""Queue statistics read straight from Kafka (no tracker endpoint needed).

Two replays, each to the end offsets seen when it starts, never cut short: the markers topic folded into message
lifecycles (delivered, acked, in flight …), and the messages topic for what waits (this queue's records past its
consumer group's committed offset, not yet Started). A long replay reports progress; a replay that stops making
progress is an error, never a silently partial answer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import structlog
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient

from kmq import _kafka, wire
from kmq._kafka.topic_replay import Progress, TopicReplay
from kmq.config import Config
from kmq.errors import MarkerDecodeError
from kmq.ops.lifecycle import LifecycleFold
from kmq.wire import MessageId
from kmq.wire.marker_batch import decode_record

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

class MarkerScanner:
    """The markers topic folded into per-queue lifecycles; ``read_to_end()`` catches up with what was written
    since the last call."""

    def __init__(self, config: Config, progress: Progress | None = None) -> None:
        self.fold = LifecycleFold()
        self._replay = TopicReplay(config, config.marker_topic, progress)

    def read_to_end(self) -> LifecycleFold:
        fold = self.fold
        for record in self._replay.records():
            try:
                markers = decode_record(record.value())
            except MarkerDecodeError:
                fold.malformed += 1
                continue
            timestamp_ms = _kafka.record_timestamp_ms(record)
            for marker in markers:
                fold.add(marker, timestamp_ms)
        return fold

    def close(self) -> None:
        self._replay.close()


class CommittedOffsets:
    """Each queue's group's committed offsets on the messages topic, asked once per queue."""

    def __init__(self, config: Config) -> None:
        self._config = config
        self._admin = AdminClient(_kafka.base_settings(config, "kmq-stats-admin"))
        self._by_queue: dict[str, dict[int, int]] = {}

    def of(self, queue: str) -> dict[int, int]:
        known = self._by_queue.get(queue)
        if known is None:
            group = wire.consumer_group(queue)
            futures = self._admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
            result = futures[group].result(timeout=self._config.connect_timeout_ms / 1000)
            known = {tp.partition: tp.offset for tp in result.topic_partitions or []
                     if tp.topic == self._config.message_topic and tp.offset >= 0}
            self._by_queue[queue] = known
        return known


@dataclass(slots=True)
class Waiting:
    """A queue's records past its group's committed offset (read by no consumer yet)."""

    count: int = 0
    oldest_ms: int = 0
    first_ids: set[MessageId] = field(default_factory=set, repr=False)


def waiting_messages(config: Config, queues: set[str] | None = None, progress: Progress | None = None,
                     keep_first_ids: bool = False) -> dict[str, Waiting]:
    """Per queue (or the ones named), what waits on the messages topic; a queue no consumer ever read is included
    with all of its records."""
    committed = CommittedOffsets(config)
    out: dict[str, Waiting] = {}
    replay = TopicReplay(config, config.message_topic, progress)
    try:
        for record in replay.records():
            queue = (record.key() or b"").decode("utf-8", "replace")
            if queues is not None and queue not in queues:
                continue
            partition, offset = record.partition() or 0, record.offset() or 0
            if offset < committed.of(queue).get(partition, 0):
                continue
            waiting = out.setdefault(queue, Waiting())
            waiting.count += 1
            ts = _kafka.record_timestamp_ms(record)
            waiting.oldest_ms = min(waiting.oldest_ms or ts, ts)
            if keep_first_ids:
                waiting.first_ids.add(_kafka.first_id(record))
    finally:
        replay.close()
    return out


def waiting_first_ids(config: Config, queue: str) -> set[MessageId]:
    """First-delivery ids of the queue's records past its group's committed offsets: read by no consumer yet
    (redelivered copies included, through their first-id header)."""
    found = waiting_messages(config, {queue}, keep_first_ids=True).get(queue)
    return found.first_ids if found else set()


@dataclass(frozen=True, slots=True)
class QueueStats:
    queue: str
    #: On the messages topic past the group's committed offset: not yet Started by any consumer.
    waiting: int
    oldest_waiting_age_s: float
    in_flight: int
    oldest_in_flight_age_s: float
    deliveries: int
    acked: int
    redelivered: int
    released: int
    returned: int
    dead_lettered: int
    #: Read before their due time (``send(delay=…)``) and waiting for it.
    delayed: int
    #: Read after their expiry time (``ttl``): never handed out.
    expired: int
    #: Settled by ``kmq purge`` without a handler.
    purged: int
    #: Bare Ends a kafka-mq-go component wrote that match no copy: a Go consumer's ack or an unread Go redelivery.
    go_ends: int


def collect(config: Config, queues: list[str] | None = None, progress: Progress | None = None) -> list[QueueStats]:
    """One row per queue seen on either topic (or per queue named)."""
    scanner = MarkerScanner(config, progress)
    try:
        summaries = scanner.read_to_end().summary()
    finally:
        scanner.close()
    waiting = waiting_messages(config, set(queues) if queues else None, progress)
    now_ms = time.time() * 1000

    def age(oldest_ms: int) -> float:
        return round(max(0.0, (now_ms - oldest_ms) / 1000), 1) if oldest_ms else 0.0

    out = []
    for name in sorted(queues or (summaries.keys() | waiting.keys())):
        s = summaries.get(name)
        w = waiting.get(name, Waiting())
        if s is None:
            out.append(QueueStats(name, w.count, age(w.oldest_ms), 0, 0.0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0))
            continue
        out.append(QueueStats(name, w.count, age(w.oldest_ms), s.in_flight,
                              age(s.oldest_in_flight_ms) if s.in_flight else 0.0, s.deliveries, s.acked,
                              s.redelivered, s.released, s.returned, s.dead_lettered, s.delayed, s.expired,
                              s.purged, s.go_ends))
    return out
