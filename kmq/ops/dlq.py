"""Dead letters: list a queue's messages on the dead-letter topic, and redrive them back onto the queue.

A letter redriven is still on the topic (Kafka keeps records), but no longer waits: ``list_dead_letters`` shows the
letters still waiting, as SQS's console shows a queue emptied by a redrive (``include_redriven`` shows all, each
marked).

Both read the dead-letter topic to its end offsets (never "until idle": see kmq._kafka.topic_replay). Redrive starts at
the offsets committed in group ``kmq-dlq-redrive-<queue>`` and commits once the copies are durable, so each dead
letter is redriven once; two redrives of one queue running at the same time may both redrive a letter. The redriven
copy starts again at delivery count 1 and keeps the first delivery's id, so the audit still links it to the original.

A queue moving to another topic set has dead letters in both sets: both are listed, and redrive puts them all onto
the queue's new set (docs/concepts/topic-sets.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import Message as KafkaMessage
from confluent_kafka import TopicPartition

from kmq import _kafka, wire
from kmq._kafka import PolledProducer
from kmq._kafka.offsets import group_offsets
from kmq._kafka.topic_replay import TopicReplay
from kmq.config import Config
from kmq.errors import KafkaClientError
from kmq.topic_sets import DEFAULT_SET, TopicSet
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
    #: Moved back onto the queue by an earlier ``redrive`` (it no longer waits on the dead-letter topic).
    redriven: bool = False
    #: The topic set whose dead-letter topic holds it (``dlq_id`` is a position there).
    topic_set: str = DEFAULT_SET

    def as_dict(self) -> dict[str, object]:
        """For ``kmq dlq list --json``: the payload as text (UTF-8, undecodable bytes replaced)."""
        return {"queue": self.queue, "topic_set": self.topic_set, "dlq_id": str(self.dlq_id),
                "first_message_id": self.first_message_id,
                "delivery_count": self.delivery_count, "reason": self.reason, "redriven": self.redriven,
                "payload": self.payload.decode("utf-8", "replace"),
                "headers": {k: v.decode("utf-8", "replace") for k, v in self.headers.items()}}


Found = list[tuple[DeadLetter, TopicPartition]]


def dead_letter(record: KafkaMessage, queue: str, topics: TopicSet) -> DeadLetter:
    """A record of ``topics``' dead-letter topic, of ``queue``, as a DeadLetter."""
    headers = _kafka.header_dict(record)
    said = wire.DeadLetterHeaders.parse(headers)
    return DeadLetter(queue=queue, payload=record.value() or b"", headers=wire.user_headers(headers),
                      reason=said.reason, delivery_count=said.delivery.delivery_count,
                      first_message_id=str(said.delivery.first_message_id or ""), dlq_id=_kafka.message_id(record),
                      topic_set=topics.name)


def _read(replay: TopicReplay, topics: TopicSet, queue: str, limit: int | None) -> Found:
    key = queue.encode()
    found: Found = []
    for record in replay.records():
        if record.key() != key:
            continue
        letter = dead_letter(record, queue, topics)
        found.append((letter, TopicPartition(record.topic() or "", record.partition() or 0,
                                             (record.offset() or 0) + 1)))
        if limit is not None and len(found) >= limit:
            break
    return found


def list_dead_letters(config: Config, queue: str, limit: int | None = 100, *, include_redriven: bool = False,
                      topic_set: str | None = None) -> list[DeadLetter]:
    """The queue's dead letters still waiting (oldest first, up to ``limit``), without consuming them; with
    ``include_redriven``, the redriven ones too (marked ``redriven``). From every set that may hold the queue's
    messages (``Config.reading_sets``), or from ``topic_set`` only."""
    letters: list[DeadLetter] = []
    for topics in _sets(config, queue, topic_set):
        redriven_up_to = group_offsets(config, topics.redrive_group(queue), topics.dead_letters)
        with TopicReplay(config, topics, topics.dead_letters) as replay:
            for letter, _ in _read(replay, topics, queue, None):
                redriven = letter.dlq_id.offset < redriven_up_to.get(letter.dlq_id.partition, 0)
                if redriven and not include_redriven:
                    continue
                letters.append(dataclasses.replace(letter, redriven=redriven))
                if limit is not None and len(letters) >= limit:
                    return letters
    return letters


def redrive(config: Config, queue: str, limit: int | None = None, *, topic_set: str | None = None) -> int:
    """Moves the queue's dead letters not redriven before back onto the queue (in the set it lives in, from every
    set that may hold its messages, or from ``topic_set`` only); returns how many were redriven."""
    redriven = 0
    for topics in _sets(config, queue, topic_set):
        redriven += _redrive_set(config, topics, queue, None if limit is None else limit - redriven)
        if limit is not None and redriven >= limit:
            break
    return redriven


def _sets(config: Config, queue: str, topic_set: str | None) -> tuple[TopicSet, ...]:
    return config.reading_sets(queue) if topic_set is None else (config.topic_set(topic_set),)


def _redrive_set(config: Config, topics: TopicSet, queue: str, limit: int | None) -> int:
    with TopicReplay(config, topics, topics.dead_letters, group=topics.redrive_group(queue)) as replay:
        found = _read(replay, topics, queue, limit)
        if found:
            put_back(config, queue, [letter for letter, _ in found])
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


def put_back(config: Config, queue: str, letters: list[DeadLetter]) -> None:
    """Writes each letter back onto the queue, durably (it starts again at delivery count 1, under its first id)."""
    producer = PolledProducer(_kafka.messages_producer_settings(config, "kmq-dlq-redrive"), "redrive",
                              warm_topic=config.topics_for(queue).messages)
    try:
        futures = []
        now_ms = wire.now_ms()
        for letter in letters:
            headers = redriven_headers(letter.headers, now_ms)
            if letter.first_message_id:
                headers.append((wire.HEADER_FIRST_ID, letter.first_message_id.encode()))
            futures.append(producer.produce_future(config.topics_for(queue).messages, letter.payload, queue.encode(),
                                                   headers))
        for future in futures:
            future.result(config.connect_timeout_ms / 1000 + 20)
    finally:
        producer.close()


def redriven_headers(headers: Mapping[str, bytes], now_ms: int) -> list[tuple[str, bytes]]:
    """A redriven copy's headers: the letter's, less an expiry already past (the copy of a letter dead-lettered
    as expired went straight back to the dead-letter topic). The time limit and the rest stay."""
    expires = headers.get(wire.HEADER_EXPIRES_AT)
    if expires is not None and expires.isdigit() and int(expires) <= now_ms:
        return [(k, v) for k, v in headers.items() if k != wire.HEADER_EXPIRES_AT]
    return list(headers.items())


def _after(found: Found) -> list[TopicPartition]:
    """Per partition, the offset after the last letter found."""
    last: dict[int, TopicPartition] = {}
    for _, tp in found:
        last[tp.partition] = tp
    return list(last.values())
