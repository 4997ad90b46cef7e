"""How many messages of one queue wait on the shared messages topic: the answer to kombu's ``_size``.

A queue's records are interleaved with every other queue's, so no offset arithmetic answers it: its records past
its consumer group's committed offsets (``Config.consumer_group``) are read and counted by record key
(the queue name). That costs a read of the topic's tail, all queues' records in it: for a consumed queue the tail
is short (its group commits as it goes), for a queue nobody consumes it is the whole topic, so a scan stops after
``limit`` records (the count is then a lower bound, and logged as such). ``kmq stats`` answers more (in flight,
delayed, dead letters) by replaying both topics whole, which is too slow for a queue declaration.
"""

from __future__ import annotations

import time
import uuid

import structlog
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from kmq import Config, KafkaClientError

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

POLL_S = 0.5


class SizeCache:
    """Counts per queue, each reused for ``ttl_s``; one Kafka client, made on first use."""

    def __init__(self, config: Config, limit: int, ttl_s: float) -> None:
        self._config = config
        self._limit = limit
        self._ttl_s = ttl_s
        self._counts: dict[str, tuple[float, int]] = {}

    def count(self, queue: str, *, fresh: bool = False) -> int:
        now = time.monotonic()
        known = self._counts.get(queue)
        if known is not None and not fresh and now - known[0] < self._ttl_s:
            return known[1]
        counted = waiting(self._config, queue, self._limit)
        self._counts[queue] = (now, counted)
        return counted

    def forget(self, queue: str) -> None:
        self._counts.pop(queue, None)

    def close(self) -> None:
        self._counts.clear()


def waiting(config: Config, queue: str, limit: int) -> int:
    """The queue's records past its group's committed offsets (read by no consumer yet), scanning at most
    ``limit`` records."""
    timeout_s = config.connect_timeout_ms / 1000
    reader = Consumer({
        "bootstrap.servers": config.bootstrap_servers, **config.kafka,
        # The group is only asked for its committed offsets: this client never subscribes, so never joins it.
        "group.id": config.topics_for(queue).consumer_group(queue),
        "client.id": f"kmq-kombu-size-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False, "enable.partition.eof": False,
    })
    try:
        return _scan(reader, config.topics_for(queue).messages, queue.encode(), limit, timeout_s)
    except KafkaException as exc:
        raise KafkaClientError(f"cannot count queue {queue!r} on {config.topics_for(queue).messages!r}: "
                               f"{exc.args[0]}",
                               retriable=True) from exc
    finally:
        reader.close()


def _scan(reader: Consumer, topic: str, key: bytes, limit: int, timeout_s: float) -> int:
    meta = reader.list_topics(topic, timeout=timeout_s).topics[topic]
    partitions = [TopicPartition(topic, p) for p in sorted(meta.partitions)]
    committed = reader.committed(partitions, timeout=timeout_s)
    ends: dict[int, int] = {}
    starts: list[TopicPartition] = []
    for tp in committed:
        low, high = reader.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=timeout_s)
        start = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
        if (start if start >= 0 else low) < high:
            ends[tp.partition] = high
            starts.append(TopicPartition(topic, tp.partition, max(start, low) if start >= 0 else OFFSET_BEGINNING))
    if not starts:
        return 0
    reader.assign(starts)
    count = scanned = 0
    deadline = time.monotonic() + timeout_s
    while ends and scanned < limit:
        records = reader.consume(min(1000, limit - scanned), POLL_S)
        if not records:
            if time.monotonic() > deadline:
                raise KafkaClientError(f"counting {key.decode()!r}: no records for {timeout_s:.0f}s with "
                                       f"{sum(ends.values())} offsets still to read", retriable=True)
            continue
        deadline = time.monotonic() + timeout_s
        for record in records:
            if record.error() is not None:
                continue
            scanned += 1
            partition, offset = record.partition(), record.offset()
            if partition is None or offset is None or partition not in ends or offset >= ends[partition]:
                continue
            if record.key() == key:
                count += 1
            if offset + 1 >= ends[partition]:
                del ends[partition]
    if ends:
        log.info("kombu_queue_size_lower_bound", queue=key.decode(), scanned=scanned, limit=limit, count=count)
    return count
