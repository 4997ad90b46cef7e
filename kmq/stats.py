"""Queue statistics read straight from Kafka (no tracker endpoint needed): the markers topic folded into
lifecycles, plus each queue group's lag on the messages topic."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import structlog
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import TopicPartition

from kmq import _kafka, wire
from kmq.config import Config
from kmq.errors import KafkaClientError, MarkerDecodeError, TopicError
from kmq.lifecycle import LifecycleFold
from kmq.marker_batch import decode_record
from kmq.wire import MessageId

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)


class MarkerScanner:
    """Reads the markers topic from the beginning, folding every record; ``read_to_end()`` catches up."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.fold = LifecycleFold()
        self._consumer = KafkaConsumer({
            **_kafka.consumer_settings(config.replace(client_id=""), f"kmq-stats-{uuid.uuid4().hex}", "kmq-stats"),
        })
        timeout_s = config.connect_timeout_ms / 1000
        try:
            meta = self._consumer.list_topics(config.marker_topic, timeout=timeout_s)
        except Exception as err:
            self._consumer.close()
            raise KafkaClientError(f"cannot reach Kafka at {config.bootstrap_servers} within {timeout_s:.0f}s") \
                from err
        topic = meta.topics.get(config.marker_topic)
        if topic is None or topic.error is not None:
            self._consumer.close()
            raise TopicError(f"markers topic {config.marker_topic!r} does not exist")
        self._partitions = [TopicPartition(config.marker_topic, p, 0) for p in topic.partitions]
        # Offset 0 may be gone to retention: OFFSET_BEGINNING (-2) starts at the earliest kept record.
        self._consumer.assign([TopicPartition(tp.topic, tp.partition, -2) for tp in self._partitions])
        self._next = {tp.partition: 0 for tp in self._partitions}

    def read_to_end(self, timeout_s: float = 30.0) -> LifecycleFold:
        ends = {tp.partition: self._consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in self._partitions}
        deadline = time.monotonic() + timeout_s
        while any(self._next[p] < end for p, end in ends.items()) and time.monotonic() < deadline:
            for record in self._consumer.consume(1000, 0.2):
                if record.error() is not None:
                    continue
                self._next[record.partition() or 0] = (record.offset() or 0) + 1
                try:
                    markers = decode_record(record.value())
                except MarkerDecodeError:
                    self.fold.malformed += 1
                    continue
                timestamp_ms = _kafka.record_timestamp_ms(record)
                for marker in markers:
                    self.fold.add(marker, timestamp_ms)
        return self.fold

    def close(self) -> None:
        self._consumer.close()


@dataclass(frozen=True, slots=True)
class QueueStats:
    queue: str
    in_flight: int
    oldest_in_flight_age_s: float
    deliveries: int
    acked: int
    redelivered: int
    released: int
    dead_lettered: int
    consumer_lag: int


def group_lag(config: Config, queue: str) -> int:
    """Records on the messages topic the queue's group has not yet committed past (all queues' records)."""
    consumer = KafkaConsumer(_kafka.consumer_settings(config.replace(client_id=""), wire.consumer_group(queue),
                                                      "kmq-stats-lag"))
    try:
        meta = consumer.list_topics(config.message_topic, timeout=10)
        parts = [TopicPartition(config.message_topic, p) for p in meta.topics[config.message_topic].partitions]
        committed = consumer.committed(parts, timeout=10)
        lag = 0
        for tp in committed:
            low, high = consumer.get_watermark_offsets(tp, timeout=10)
            lag += high - (tp.offset if tp.offset >= 0 else low)
        return lag
    finally:
        consumer.close()


def waiting_origins(config: Config, queue: str, timeout_s: float = 30.0) -> set[MessageId]:
    """First-delivery ids of the queue's records past its group's committed offsets: read by no consumer yet
    (redelivered copies included, through their first-id header)."""
    consumer = KafkaConsumer(_kafka.consumer_settings(config.replace(client_id=""), wire.consumer_group(queue),
                                                      "kmq-stats-waiting"))
    key = queue.encode()
    waiting: set[MessageId] = set()
    try:
        meta = consumer.list_topics(config.message_topic, timeout=10)
        parts = [TopicPartition(config.message_topic, p) for p in meta.topics[config.message_topic].partitions]
        ends: dict[int, int] = {}
        starts = []
        for tp in consumer.committed(parts, timeout=10):
            low, high = consumer.get_watermark_offsets(tp, timeout=10)
            start = tp.offset if tp.offset >= 0 else low
            if start < high:
                ends[tp.partition] = high
                starts.append(TopicPartition(tp.topic, tp.partition, start))
        consumer.assign(starts)  # assign, not subscribe: reading must not join (and rebalance) the group
        deadline = time.monotonic() + timeout_s
        while ends:
            if time.monotonic() > deadline:
                raise KafkaClientError(f"could not read the waiting records of queue {queue!r} within {timeout_s}s")
            for record in consumer.consume(1000, 0.2):
                if record.error() is not None:
                    continue
                partition, offset = record.partition() or 0, record.offset() or 0
                if offset + 1 >= ends.get(partition, 0):
                    ends.pop(partition, None)
                if record.key() == key:
                    waiting.add(_kafka.origin_id(record))
        return waiting
    finally:
        consumer.close()


def collect(config: Config, queues: list[str] | None = None) -> list[QueueStats]:
    """One snapshot per queue seen on the markers topic (or the ones named)."""
    scanner = MarkerScanner(config)
    try:
        summaries = scanner.read_to_end().summary()
    finally:
        scanner.close()
    now_ms = time.time() * 1000
    out = []
    for name in sorted(queues or summaries):
        s = summaries.get(name)
        if s is None:
            out.append(QueueStats(name, 0, 0.0, 0, 0, 0, 0, 0, group_lag(config, name)))
            continue
        age = max(0.0, (now_ms - s.oldest_in_flight_ms) / 1000) if s.in_flight else 0.0
        out.append(QueueStats(name, s.in_flight, round(age, 1), s.deliveries, s.acked, s.redelivered, s.released,
                              s.dead_lettered, group_lag(config, name)))
    return out
