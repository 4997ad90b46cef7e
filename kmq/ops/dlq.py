"""Dead letters: list a queue's messages on the dead-letter topic, and redrive them back onto the queue.

Both read the dead-letter topic to its end offsets (never "until idle": see kmq._kafka.topic_replay). Redrive starts at
the offsets committed in group ``kmq-dlq-redrive-<queue>`` and commits once the copies are durable, so each dead
letter is redriven once; two redrives of one queue running at the same time may both redrive a letter. The redriven
copy starts again at delivery count 1 and keeps the first delivery's id, so the audit still links it to the original.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import TopicPartition

from kmq import _kafka, wire
from kmq._kafka import PolledProducer
from kmq._kafka.topic_replay import TopicReplay
from kmq.config import Config
from kmq.errors import KafkaClientError
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
    with TopicReplay(config, config.dlq_topic) as replay:
        return [letter for letter, _ in _read(replay, queue, limit)]


def redrive(config: Config, queue: str, limit: int | None = None) -> int:
    """Moves the queue's dead letters not redriven before back onto the queue; returns how many were redriven."""
    with TopicReplay(config, config.dlq_topic, group=f"kmq-dlq-redrive-{queue}") as replay:
        found = _read(replay, queue, limit)
        if found:
            _put_back(config, queue, [letter for letter, _ in found])
        # Commit only once every copy is durable: a crash in between redrives twice, never loses one. A read not
        # stopped by the limit saw everything up to the end: the next redrive starts there, not at the last letter.
        positions = replay.positions() if limit is None or len(found) < limit else _after(found)
        try:
            replay.commit(positions)
        except KafkaClientError as err:
            if not found:
                return 0  # nothing was redriven; the next redrive only reads a little more
            raise KafkaClientError(f"{len(found)} dead letter(s) of {queue!r} were put back on the queue, but "
                                   f"recording that failed ({err}): a redrive run again redrives them again",
                                   retriable=err.retriable, code=err.code) from err
        return len(found)


def _put_back(config: Config, queue: str, letters: list[DeadLetter]) -> None:
    producer = PolledProducer(_kafka.messages_producer_settings(config, "kmq-dlq-redrive"), "redrive")
    try:
        futures = []
        for letter in letters:
            headers = list(letter.headers.items())
            if letter.first_message_id:
                headers.append((wire.HEADER_FIRST_ID, letter.first_message_id.encode()))
            futures.append(producer.produce_future(config.message_topic, letter.payload, queue.encode(), headers))
        for future in futures:
            future.result(config.connect_timeout_ms / 1000 + 20)
    finally:
        producer.close()


def _after(found: Found) -> list[TopicPartition]:
    """Per partition, the offset after the last letter found."""
    last: dict[int, TopicPartition] = {}
    for _, tp in found:
        last[tp.partition] = tp
    return list(last.values())
