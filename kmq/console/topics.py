"""The console's one door to Kafka: every read and write it makes, each on the TopicSet it is given.

``Follow`` reads one set's topics on from where it stopped (the follower's rounds); ``Reader`` reads what a page
asks for (records by id, a range, the newest records first for a search); the rest describes a set's groups and
writes the operators' actions through kmq's own writers (the control topic, ``kmq.ops.dlq``). Every client here
reads and writes the set's own topics under the set's own groups (its one-reader, consumer, tracker and redrive
groups), so a console that serves one set needs that set's ACLs only (docs/guides/tenants.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import structlog
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka import Message as KafkaMessage
from confluent_kafka.admin import AdminClient

from kmq import _kafka, wire
from kmq._kafka import control
from kmq._kafka.offsets import committed_of_groups, group_offsets, offsets_only
from kmq._kafka.topic_replay import Progress, TopicReplay
from kmq.config import Config
from kmq.console.workers import Ends, Group, Member
from kmq.errors import KafkaClientError, TopicError
from kmq.ops import dlq, stats
from kmq.topic_sets import TopicSet
from kmq.wire import MessageId

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)


class Follow:
    """Each topic of one set read on from where the last call stopped, up to its end offsets at the call (a topic
    that does not exist yet reads as empty until it does)."""

    def __init__(self, config: Config, topics: TopicSet, progress: Progress | None = None) -> None:
        self._config = config
        self._progress = progress
        self.topics = topics
        self._replays: dict[str, TopicReplay] = {}

    def records(self, topic: str) -> Iterator[KafkaMessage]:
        replay = self._replays.get(topic)
        if replay is None:
            try:
                replay = self._replays[topic] = TopicReplay(self._config, self.topics, topic, self._progress)
            except TopicError:
                return iter(())
        return replay.records()

    def close(self) -> None:
        for replay in self._replays.values():
            replay.close()


class Reader:
    """Reads given records of one set's topics back: by id, by range, or the newest first."""

    def __init__(self, config: Config, topics: TopicSet) -> None:
        self._config = config
        self._timeout_s = config.connect_timeout_ms / 1000
        self._consumer = KafkaConsumer(_kafka.reader_settings(config, topics.private_group("console"),
                                                              "kmq-console"))

    def partitions(self, topic: str) -> list[int]:
        return _kafka.topic_partitions(self._consumer, self._config, topic, "console")

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        return _kafka.watermarks(self._consumer, TopicPartition(topic, partition), self._timeout_s,
                                 f"offsets of {topic!r}")

    def offset_at(self, topic: str, partition: int, at_ms: int) -> int:
        """The first offset written at or after ``at_ms`` (the end offset if none)."""
        try:
            found = self._consumer.offsets_for_times([TopicPartition(topic, partition, max(0, at_ms))],
                                                     timeout=self._timeout_s)
        except KafkaException as exc:
            raise _kafka.to_kmq_error(exc, f"offsets of {topic!r} by time") from exc
        offset = found[0].offset
        return offset if offset >= 0 else self.watermarks(topic, partition)[1]

    def range(self, topic: str, partition: int, start: int, end: int) -> Iterator[KafkaMessage]:
        """Every record of ``topic``/``partition`` in [start, end)."""
        low, high = self.watermarks(topic, partition)
        start, end = max(start, low), min(end, high)
        if start >= end:
            return
        self._consumer.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + self._timeout_s + 20
        next_offset = start
        while time.monotonic() < deadline:
            # consume() waits until it has as many as asked (or the timeout): ask for no more than are left.
            for record in self._consumer.consume(min(1000, end - next_offset), 0.5):
                error = record.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:  # the end (offsets may have gaps)
                        return
                    continue
                offset = record.offset() or 0
                if offset >= end:
                    return
                next_offset = offset + 1
                yield record
                if offset + 1 >= end:
                    return
        raise KafkaClientError(f"reading {topic!r}[{partition}] {start}..{end} stalled")

    def at(self, topic: str, ids: Iterable[MessageId], gap: int = 500) -> dict[MessageId, KafkaMessage]:
        """The records at ``ids``; ids closer than ``gap`` offsets are read in one range."""
        wanted = sorted(set(ids))
        found: dict[MessageId, KafkaMessage] = {}
        spans: list[list[MessageId]] = []
        for mid in wanted:
            if spans and spans[-1][-1].partition == mid.partition and mid.offset - spans[-1][-1].offset <= gap:
                spans[-1].append(mid)
            else:
                spans.append([mid])
        for span in spans:
            want = set(span)
            for record in self.range(topic, span[0].partition, span[0].offset, span[-1].offset + 1):
                if _kafka.message_id(record) in want:
                    found[_kafka.message_id(record)] = record
        return found

    def newest_first(self, topic: str, match: Callable[[KafkaMessage], bool], limit: int, budget: int,
                     cursors: dict[int, int] | None = None, chunk: int = 5_000) -> Scan:
        """Records that ``match``, newest first, reading back at most ``budget`` records from ``cursors`` (per
        partition, the offset to read back from; default: the end)."""
        if cursors is None:
            cursors = {p: self.watermarks(topic, p)[1] for p in self.partitions(topic)}
        lows = {p: self.watermarks(topic, p)[0] for p in cursors}
        cursors = {p: c for p, c in cursors.items() if c > lows[p]}
        found: list[KafkaMessage] = []
        scanned = 0
        while cursors and len(found) < limit and scanned < budget:
            for p in list(cursors):
                start = max(lows[p], cursors[p] - chunk)
                for record in self.range(topic, p, start, cursors[p]):
                    scanned += 1
                    if match(record):
                        found.append(record)
                cursors[p] = start
                if start <= lows[p]:
                    del cursors[p]
        found.sort(key=lambda r: (_kafka.record_timestamp_ms(r), r.offset() or 0), reverse=True)
        return Scan(found[:limit], scanned, cursors or None)

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class Scan:
    records: list[KafkaMessage]
    scanned: int
    #: Where to read back from to search further (None: everything was read).
    cursors: dict[int, int] | None


# --- groups --------------------------------------------------------------------------------------------------------

def describe_groups(config: Config, group_ids: list[str]) -> dict[str, Group]:
    """The consumer groups as their coordinators describe them (a group that does not exist: no members)."""
    if not group_ids:
        return {}
    admin = AdminClient(_kafka.base_settings(config, "kmq-console-admin"))
    timeout_s = config.connect_timeout_ms / 1000
    out = {}
    for group_id, future in admin.describe_consumer_groups(group_ids, request_timeout=timeout_s).items():
        try:
            found = future.result(timeout_s)
        except KafkaException as err:  # a coordinator moving or loading: asked again in a few seconds
            log.debug("group_not_described", group=group_id, error=str(err))
            continue
        members = tuple(Member(m.member_id, m.client_id, m.group_instance_id or "", m.host,
                               tuple(sorted(tp.partition for tp in (m.assignment.topic_partitions or []))))
                        for m in found.members)
        out[group_id] = Group(group_id, str(found.state).rpartition(".")[2], members)
    return out


def markers_ends(config: Config, topics: TopicSet) -> Ends:
    """The set's markers topic's end offsets and its tracker group's committed offsets (none before the topic
    exists)."""
    with Reader(config, topics) as reader:
        try:
            partitions = reader.partitions(topics.markers)
        except TopicError:
            return Ends()
        end = {p: reader.watermarks(topics.markers, p)[1] for p in partitions}
    return Ends(end, group_offsets(config, topics.tracker_group, topics.markers, partitions))


def committed_offsets(config: Config, topics: TopicSet) -> dict[str, dict[int, int]]:
    """Per queue, what its consumer group in the set committed on the set's messages topic."""
    return stats.committed_offsets(config, topics)


def redrive_offsets(config: Config, topics: TopicSet, queues: Iterable[str]) -> dict[str, dict[int, int]]:
    """Per queue, the offsets ``kmq dlq redrive`` committed on the set's dead-letter topic (its redrive group's)."""
    by_group = {topics.redrive_group(q): q for q in queues}
    committed = committed_of_groups(config, "kmq-console-offsets", by_group, topics.dead_letters)
    return {by_group[group]: offsets_only(offsets) for group, offsets in committed.items()}


# --- actions -------------------------------------------------------------------------------------------------------
# A queue's pause, resume and purge go to the control topics of ``sets``: the sets it is read in that the console
# serves (kmq.console.web.Console.control_sets).

def pause(config: Config, sets: Sequence[TopicSet], queue: str, until_ms: int | None) -> None:
    control.pause(config, queue, until_ms, topic_sets=sets)


def resume(config: Config, sets: Sequence[TopicSet], queue: str) -> None:
    control.resume(config, queue, topic_sets=sets)


def purge(config: Config, sets: Sequence[TopicSet], queue: str, before_ms: int) -> None:
    control.purge(config, queue, before_ms, topic_sets=sets)


def redrive(config: Config, topics: TopicSet, queue: str, ids: list[MessageId]) -> int:
    """Puts the queue's dead letters at ``ids`` of the set's dead-letter topic back onto it (in the set it lives
    in); returns how many. (Each copy keeps its message's first id, so the message leaves the dead-lettered state;
    see kmq.ops.dlq.)"""
    with Reader(config, topics) as reader:
        records = reader.at(topics.dead_letters, ids)
    letters = [dlq.dead_letter(records[mid], queue, topics) for mid in sorted(records)]
    letters = [letter for letter in letters if _queue_of(records[letter.dlq_id]) == queue]
    if letters:
        dlq.put_back(config, queue, letters)
    return len(letters)


def commit_redriven(config: Config, topics: TopicSet, queue: str, up_to: dict[int, int]) -> None:
    """Moves the queue's redrive group of the set past letters that no longer wait, so ``kmq dlq`` agrees with the
    console."""
    if not up_to:
        return
    with TopicReplay(config, topics, topics.dead_letters, group=topics.redrive_group(queue)) as replay:
        replay.commit([TopicPartition(topics.dead_letters, p, offset) for p, offset in up_to.items()])


def _queue_of(record: KafkaMessage) -> str:
    headers = _kafka.header_dict(record)
    return (headers.get(wire.HEADER_DLQ_QUEUE) or record.key() or b"").decode("utf-8", "replace")
