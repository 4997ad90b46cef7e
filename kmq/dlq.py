"""Dead letters: list a queue's messages on the dead-letter topic, and redrive them back onto the queue.

Both read the dead-letter topic to its end offsets (never "until idle": see kmq.topic_replay). Redrive starts at
the offsets committed in group ``kmq-dlq-redrive-<queue>`` and commits once the copies are durable, so each dead
letter is redriven once; two redrives of one queue running at the same time may both redrive a letter. The redriven
copy starts again at delivery count 1 and keeps the first delivery's id, so the audit still links it to the original.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import TopicPartition

from kmq import _kafka, wire
from kmq._kafka import PolledProducer
from kmq.config import Config
from kmq.errors import KafkaClientError
from kmq.topic_replay import TopicReplay
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


def _read(replay: TopicReplay, queue: str, limit: int | None) -> Found:
    key = queue.encode()
    found: Found = []
    for record in replay.records():
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
        if limit is not None and len(found) >= limit:
            break
    return found


def list_dead_letters(config: Config, queue: str, limit: int | None = 100) -> list[DeadLetter]:
    """The queue's dead letters (oldest first, up to ``limit``), without consuming them."""
    replay = TopicReplay(config, config.dlq_topic)
    try:
        return [letter for letter, _ in _read(replay, queue, limit)]
    finally:
        replay.close()


def redrive(config: Config, queue: str, limit: int | None = None) -> int:
    """Moves the queue's dead letters not redriven before back onto the queue; returns how many were redriven."""
    replay = TopicReplay(config, config.dlq_topic, group=f"kmq-dlq-redrive-{queue}")
    try:
        found = _read(replay, queue, limit)
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
        try:
            replay.commit(list(last.values()))
        except KafkaClientError as err:
            raise KafkaClientError(f"{len(found)} dead letter(s) of {queue!r} were put back on the queue, but "
                                   f"recording that failed ({err}): a redrive run again redrives them again",
                                   retriable=err.retriable, code=err.code) from err
        return len(found)
    finally:
        replay.close()
