"""TopicReplay: every record of a topic up to the end offsets seen when reading starts, never cut short.

Partitions are assigned, never subscribed: a group join can take seconds (a broker's
``group.initial.rebalance.delay.ms``, 3 s by default), and a reader that stops after some idle time would take
"not assigned yet" for "nothing there". Reading ends at the end offsets instead, and a replay that stops making
progress is an error. Used by ``kmq stats``, ``kmq inspect`` and the dead-letter tools.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Message as KafkaMessage

from kmq._kafka.errors import client_error, to_kmq_error
from kmq._kafka.metadata import topic_partitions
from kmq._kafka.offsets import watermarks
from kmq._kafka.settings import consumer_settings
from kmq.config import Config
from kmq.errors import KafkaClientError
from kmq.topic_sets import TopicSet

#: A replay with no record for this long, before its end offsets, fails.
STALL_S = 30.0
#: How long the broker holds a replay's fetch that finds nothing (librdkafka's default: 500 ms).
REPLAY_FETCH_WAIT_MS = 50
#: (records read, records to read) while a replay runs, about once a second.
Progress = Callable[[str, int, int], None]


def drop_reached(consumer: KafkaConsumer, topic: str, ends: dict[int, int]) -> dict[int, int]:
    """Removes from ``ends`` (partition → end offset) the partitions whose position reached their end offset, and
    returns those positions. Offsets can have gaps (a transaction's commit marker; a record removed by compaction,
    a tombstone past its retention), so the last record before an end offset need not be at end - 1: a reader
    that waits for that record waits for ever."""
    reached = {}
    for tp in consumer.position([TopicPartition(topic, p) for p in ends]):
        if tp.offset >= ends[tp.partition]:
            reached[tp.partition] = tp.offset
            del ends[tp.partition]
    return reached


class TopicReplay:
    """Reads every partition of ``topic`` from its earliest kept record, or, with ``group``, from that group's
    committed offsets (``commit`` moves them on). Each ``records()`` call goes on from where the last one stopped,
    up to the end offsets seen when it starts."""

    def __init__(self, config: Config, topics: TopicSet, topic: str, progress: Progress | None = None, *,
                 group: str | None = None) -> None:
        self._config = config
        self._topics = topics
        self._topic = topic
        self._progress = progress
        self._group = group
        self._consumer = KafkaConsumer({
            **consumer_settings(config.replace(client_id=""), group or topics.private_group("replay"), "kmq-replay"),
            # A replay reads to end offsets it knows: the broker need not hold an empty fetch for 0.5 s (the
            # end-offset queries of the next records() call wait behind a fetch held on the same connection).
            "fetch.wait.max.ms": REPLAY_FETCH_WAIT_MS})
        #: Partition → next offset to read; OFFSET_BEGINNING (the earliest kept record: offset 0 may be gone to
        #: retention) until a record of it was read.
        self._next: dict[int, int] = {}
        try:
            self._next = self._starts(self._partitions())
        except BaseException:
            self._consumer.close()
            raise

    def _partitions(self) -> list[int]:
        role = {self._topics.markers: "markers", self._topics.dead_letters: "dead-letter",
                self._topics.control: "control"}.get(self._topic, "message")
        return topic_partitions(self._consumer, self._config, self._topic, role)

    def _starts(self, partitions: list[int]) -> dict[int, int]:
        starts = dict.fromkeys(partitions, OFFSET_BEGINNING)
        if self._group is None:
            return starts
        try:
            committed = self._consumer.committed([TopicPartition(self._topic, p) for p in partitions],
                                                 timeout=self._config.connect_timeout_ms / 1000)
        except KafkaException as exc:
            raise to_kmq_error(exc, f"committed offsets of group {self._group!r}") from exc
        starts.update({tp.partition: tp.offset for tp in committed if tp.offset >= 0})
        return starts

    def _left(self) -> dict[int, tuple[int, int]]:
        """Partition → (next offset to read, end offset now) for each partition with records left."""
        timeout_s = self._config.connect_timeout_ms / 1000
        left = {}
        for p, next_offset in self._next.items():
            low, high = watermarks(self._consumer, TopicPartition(self._topic, p), timeout_s,
                                          f"end offsets of {self._topic!r}")
            start = max(low, next_offset)
            if high > start:
                left[p] = (start, high)
        return left

    def records(self) -> Iterator[KafkaMessage]:
        """Every record up to the end offsets; raises KafkaClientError if reading stalls for STALL_S."""
        left = self._left()
        # Assigned afresh at each call: records fetched past the last call's end offsets were not yielded then.
        self._consumer.assign([TopicPartition(self._topic, p, start) for p, (start, _) in left.items()])
        ends = {p: end for p, (_, end) in left.items()}
        total = sum(end - start for start, end in left.values())
        try:
            yield from self._read(ends, total)
        finally:
            # Nothing fetched between calls: a fetch left waiting on the broker would hold up the next call's
            # offset requests (one connection, requests in order) by up to fetch.wait.max.ms each.
            self._consumer.unassign()

    def _read(self, ends: dict[int, int], total: int) -> Iterator[KafkaMessage]:
        done, last_record, last_report = 0, time.monotonic(), time.monotonic()
        while ends:
            # consume() returns when it has as many as asked, or at the timeout: ask for no more than are left.
            batch = self._consumer.consume(max(1, min(1000, total - done)), 0.2)
            now = time.monotonic()
            if batch:
                last_record = now
            elif self._past_ends(ends):
                break
            elif now - last_record > STALL_S:
                raise KafkaClientError(f"reading {self._topic!r} stalled: {done:,} of {total:,} records read, "
                                       f"nothing for {STALL_S:.0f}s")
            for record in batch:
                if record.error() is not None:
                    continue
                partition, offset = record.partition() or 0, record.offset() or 0
                end = ends.get(partition)
                if end is None or offset >= end:
                    continue  # past this call's end: the next call reads it again
                self._next[partition] = offset + 1
                done += 1
                if offset + 1 >= end:
                    del ends[partition]
                yield record
            if self._progress is not None and now - last_report >= 1.0:
                last_report = now
                self._progress(self._topic, done, total)

    def _past_ends(self, ends: dict[int, int]) -> bool:
        for partition, position in drop_reached(self._consumer, self._topic, ends).items():
            self._next[partition] = position
        return not ends

    def positions(self) -> list[TopicPartition]:
        """Where reading stopped: per partition read from, the next offset to read."""
        return [TopicPartition(self._topic, p, offset) for p, offset in self._next.items() if offset >= 0]

    def commit(self, positions: list[TopicPartition]) -> None:
        """Records in the replay's group that reading is done up to ``positions`` (next offsets to read)."""
        if self._group is None:
            raise ValueError("commit needs a TopicReplay made with a group")
        if not positions:
            return
        what = f"commit in group {self._group!r}"
        try:
            results = self._consumer.commit(offsets=positions, asynchronous=False) or []
        except KafkaException as exc:
            raise to_kmq_error(exc, what) from exc
        errors = [tp.error for tp in results if tp.error is not None]
        if errors:
            raise client_error(errors[0], what)

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> TopicReplay:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
