"""Intake: records fetched from the messages topic and not yet taken (the backlog), and flow control.

Two limits: past the soft one (4 Start batches' worth of records) the intake takes one record per poll instead of
a batch, so librdkafka's own queue fills and its fetcher stops by itself; past the hard one
(``max_read_ahead_records``, reached only while the workers are stalled) it pauses fetching, and resumes once the
backlog is back under the soft limit. Pausing is the exception because a resume costs about a second before
records flow again (librdkafka 2.16 drops the prefetched records of a paused partition and fetches them anew).

The pause state is the consumer's intent, and every path that changes the assignment applies it to every partition
held afterwards, new or kept: librdkafka keeps a partition's paused flag across revoke/lost and a later
re-assignment, so a partition paused before it left would otherwise come back paused and never be read. One rule
for all held partitions, rather than for the new ones only, leaves nothing to reason about per rebalance; its cost
is one pause or resume call per rebalance (librdkafka refetches what it had prefetched for them).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from kmq.client.consumer.offset_book import TopicPartitionKey

MAX_BATCH = 500
SOFT_LIMIT_BATCHES = 4


class Record(Protocol):
    """The parts of a fetched record the intake reads (confluent_kafka.Message has them)."""

    def topic(self) -> str | None: ...
    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...
    def key(self) -> str | bytes | None: ...
    def error(self) -> object: ...


class FetchClient(Protocol):
    """The Kafka consumer calls the intake makes (confluent_kafka.Consumer has them)."""

    def poll(self, timeout: float) -> Record | None: ...
    def consume(self, num_messages: int, timeout: float) -> Sequence[Record]: ...
    def pause(self, partitions: list[Any]) -> None: ...
    def resume(self, partitions: list[Any]) -> None: ...
    def assignment(self) -> list[Any]: ...


class Intake:
    """The backlog and the pause state of one Kafka consumer. Loop thread only (rebalance callbacks included)."""

    def __init__(self, client: FetchClient, key: bytes, on_error: Callable[[Record], None],
                 batch_records: int = MAX_BATCH, hard_limit: int = 20_000) -> None:
        self._client = client
        self._key = key
        self._on_error = on_error
        self._backlog: deque[Record] = deque()
        self._soft_limit = min(SOFT_LIMIT_BATCHES * batch_records, hard_limit // 2)
        self._hard_limit = hard_limit
        self.paused = False
        #: Records read from the messages topic, this queue's and others' (read amplification).
        self.records_read = 0
        #: Partitions this member gave up (revoked or lost) and was not given again. Their records are dropped
        #: wherever they turn up: librdkafka can still return one fetched before the loss in the same poll that ran
        #: the lost callback, and a commit of it, with this member's next generation, would move the new owner's
        #: committed offset back (a thawed worker re-ran 126 records that way).
        self.left: set[int] = set()

    def __len__(self) -> int:
        return len(self._backlog)

    def update_pause(self) -> None:
        """Pauses fetching past the hard limit, resumes it once the backlog is back under the soft one."""
        backlog = len(self._backlog)
        paused = backlog >= self._hard_limit or (self.paused and backlog > self._soft_limit)
        if paused != self.paused:
            self.paused = paused
            self._apply(self._client.assignment())

    def rebalanced(self) -> None:
        """After any change of the assignment (assign, revoke, lost): every partition held, new or kept, gets the
        intended pause state, whatever librdkafka remembered or did to it meanwhile."""
        self._apply(self._client.assignment())

    def _apply(self, partitions: list[Any]) -> None:
        if not partitions:
            return
        if self.paused:
            self._client.pause(partitions)
        else:
            self._client.resume(partitions)

    def fetch(self, wait_s: float) -> int:
        """Adds what the client has to the backlog, waiting up to ``wait_s`` for the first record."""
        # poll() returns the first record as soon as it arrives; consume(n, 0) then takes what is already
        # fetched. consume(n, timeout) alone would wait the whole timeout for n records.
        first = self._client.poll(wait_s)  # may run rebalance callbacks, which call forget()/assigned()
        if first is None:
            return 0
        full = len(self._backlog) >= self._soft_limit  # then one record per poll: librdkafka's queue fills
        records = [first] if full else [first, *self._client.consume(MAX_BATCH - 1, 0)]
        self.records_read += len(records)
        good = [r for r in records if r.error() is None]
        if len(good) != len(records):
            for record in records:
                if record.error() is not None:
                    self._on_error(record)
        if self.left:
            good = self._held(good)
        self._backlog.extend(good)
        return len(good)

    def _held(self, records: list[Record]) -> list[Record]:
        left = self.left
        return [r for r in records if r.partition() not in left]

    def take(self, room: int) -> list[Record]:
        """Records from the backlog's front, up to ``room`` of this queue's (other queues' ride along)."""
        taken: list[Record] = []
        own = 0
        backlog, key = self._backlog, self._key
        while backlog and own < room:
            record = backlog.popleft()
            own += record.key() == key
            taken.append(record)
        return taken

    def put_back(self, records: Sequence[Record]) -> None:
        """Records taken but not handed out go back to the front, in order, to be taken again (those of partitions
        given up meanwhile are dropped: their next owner reads them)."""
        if self.left:
            records = self._held(list(records))
        self._backlog.extendleft(reversed(records))

    def assigned(self, partitions: Iterable[int]) -> None:
        """Partitions given to this member: their records are taken from now on."""
        self.left.difference_update(partitions)

    def forget(self, partitions: Iterable[TopicPartitionKey]) -> None:
        """Drops records of partitions this member no longer owns, now and whenever they turn up later: their next
        owner reads them again."""
        gone = set(partitions)
        self.left.update(p for _topic, p in gone)
        kept = [r for r in self._backlog if (r.topic(), r.partition()) not in gone]
        self._backlog.clear()  # in place: a caller may be iterating it (this runs inside poll)
        self._backlog.extend(kept)


def offsets_and_own(records: list[Record], key: bytes) -> tuple[dict[TopicPartitionKey, int], list[Record]]:
    """Of a batch taken: per partition, the offset after its last record; and its records of this queue (``key``),
    in order. One compiled pass, since this runs for every record read; a partition's records come in runs, so its
    entry is written once a run."""
    offsets: dict[TopicPartitionKey, int] = {}
    own: list[Record] = []
    topic, partition, offset = "", -1, -1
    for record in records:
        record_topic, record_partition = record.topic() or "", record.partition() or 0
        if record_partition != partition or record_topic != topic:
            if partition >= 0:
                offsets[(topic, partition)] = offset + 1
            topic, partition = record_topic, record_partition
        offset = record.offset() or 0
        if record.key() == key:
            own.append(record)
    if partition >= 0:
        offsets[(topic, partition)] = offset + 1
    return offsets, own
