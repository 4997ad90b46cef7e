"""Dead letters: list a queue's messages on the dead-letter topic, and redrive them back onto the queue.

Redrive reads the dead-letter topic in consumer group ``kmq-dlq-redrive-<queue>`` and commits as it goes,
so each dead letter is redriven once. The redriven copy starts again at delivery count 1 and keeps the
first delivery's id, so the audit still links it to the original.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError, TopicPartition

from kmq import _kafka, wire
from kmq._kafka import PolledProducer
from kmq.config import Config
from kmq.wire import MessageId


@dataclass(frozen=True, slots=True)
class DeadLetter:
    queue: str
    payload: bytes
    headers: dict[str, bytes]
    reason: str
    delivery_count: int
    first_message_id: str
    dlq_id: MessageId


Found = list[tuple[DeadLetter, TopicPartition]]


def _read(config: Config, queue: str, group: str, limit: int | None, idle_s: float) -> tuple[KafkaConsumer, Found]:
    consumer = KafkaConsumer({**_kafka.consumer_settings(config.replace(client_id=""), group, "kmq-dlq"),
                              "enable.partition.eof": True})
    try:
        # An empty answer must mean "no dead letters", never "could not look".
        _kafka.topic_partitions(consumer, config, config.dlq_topic, "dead-letter")
    except BaseException:
        consumer.close()
        raise
    consumer.subscribe([config.dlq_topic])
    key = queue.encode()
    found: list[tuple[DeadLetter, TopicPartition]] = []
    eof: set[int] = set()
    assigned: set[int] | None = None
    last = time.monotonic()
    while (limit is None or len(found) < limit) and time.monotonic() - last < idle_s:
        record = consumer.poll(0.2)
        if assigned is None and consumer.assignment():
            assigned = {tp.partition for tp in consumer.assignment()}
        if record is None:
            if assigned is not None and eof >= assigned:
                break
            continue
        err = record.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                eof.add(record.partition() or 0)
            continue
        last = time.monotonic()
        eof.discard(record.partition() or 0)
        if record.key() != key:
            continue
        headers = _kafka.header_dict(record)
        delivery = wire.DeliveryHeaders.parse(headers)
        letter = DeadLetter(
            queue=queue, payload=record.value() or b"",
            headers={k: v for k, v in headers.items() if k not in wire.INTERNAL_HEADERS},
            reason=headers.get(wire.HEADER_DLQ_REASON, b"").decode(errors="replace"),
            delivery_count=delivery.delivery_count,
            first_message_id=str(delivery.first_message_id or ""),
            dlq_id=_kafka.message_id(record))
        found.append((letter, TopicPartition(record.topic() or "", record.partition() or 0,
                                             (record.offset() or 0) + 1)))
    return consumer, found


def list_dead_letters(config: Config, queue: str, limit: int | None = 100, idle_s: float = 3.0) -> list[DeadLetter]:
    """The queue's dead letters (oldest first), without consuming them."""
    consumer, found = _read(config, queue, f"kmq-dlq-list-{uuid.uuid4().hex}", limit, idle_s)
    consumer.close()
    return [letter for letter, _ in found]


def redrive(config: Config, queue: str, limit: int | None = None, idle_s: float = 3.0) -> int:
    """Moves the queue's dead letters back onto the queue; returns how many were redriven."""
    consumer, found = _read(config, queue, f"kmq-dlq-redrive-{queue}", limit, idle_s)
    try:
        if not found:
            return 0
        producer = PolledProducer(_kafka.messages_producer_settings(config, "kmq-dlq-redrive"), "redrive")
        futures = []
        for letter, _ in found:
            headers = list(letter.headers.items())
            if letter.first_message_id:
                headers.append((wire.HEADER_FIRST_ID, letter.first_message_id.encode()))
            futures.append(producer.produce_future(config.message_topic, letter.payload, queue.encode(), headers))
        for future in futures:
            future.result(config.connect_timeout_ms / 1000 + 20)
        producer.close()
        # Commit only after every copy is durable: a crash in between redrives twice, never loses one.
        last: dict[int, TopicPartition] = {}
        for _, tp in found:
            last[tp.partition] = tp
        consumer.commit(offsets=list(last.values()), asynchronous=False)
        return len(found)
    finally:
        consumer.close()
