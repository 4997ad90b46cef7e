"""QueueWatch: how many of a queue's messages are not settled yet, read from the topics, for ``join()``.

``kmq stats`` replays both topics in full; ``join`` runs after nearly every step of a test, so a watch follows the
topics instead: one reader per topic, assigned (no group, nothing committed) and kept between calls, so each call
reads only what was written since the last. A message is pending from its record on the messages topic until an
End marker names it (ack, reject, dead letter, expiry, purge, or the tracker's End once it copied the message: the
copy is a record of its own, pending in its turn). Waiting, in flight, delayed and released messages are all
pending, whichever process holds them.

Order matters: markers are read first, then the messages topic up to its end offsets asked for afterwards. A
handler's sends (a retry, a pipeline's next step, a callback) are durable before its ack is written, so the call
that sees an ack also sees what the handler sent, and ``join`` never returns between the two.

One watch per topic set and process (``shared_watch``), closed at exit: each new watch reads both topics once from
their start, which is what a test session on one set of topics wants, and what a production topic does not (join is
a testing tool, as in every Dramatiq broker).
"""

from __future__ import annotations

import atexit
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator

import structlog
from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Message as KafkaMessage

from kmq import Config, KafkaClientError, MarkerDecodeError, MessageId

# The marker codecs (both formats) are not part of kmq's public API: this module is their only user outside kmq.
from kmq.wire.marker_batch import decode_record
from kmq.wire.markers import MarkerType

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

#: A read that gets no record for this long before reaching the end offsets fails (the broker is gone).
STALL_S = 30.0


def _client(config: Config, **settings: object) -> KafkaConsumer:
    return KafkaConsumer({
        "bootstrap.servers": config.bootstrap_servers,
        **config.kafka,
        "group.id": f"kmq-join-{uuid.uuid4().hex}",  # librdkafka wants one; nothing is ever committed
        "client.id": "kmq-dramatiq-join",
        "enable.auto.commit": False,
        "enable.partition.eof": False,
        **settings,
    })


class TopicTail:
    """Every record of one topic, from its earliest kept one, read in calls of ``read_to_end()``.

    End offsets are asked through ``offsets``, a client that fetches nothing: a broker answers a connection's
    requests in order, so on the reading client the question would wait behind a fetch the broker holds open until
    data comes (up to ``fetch.wait.max.ms``, 0.5 s).
    """

    def __init__(self, config: Config, topic: str, offsets: KafkaConsumer) -> None:
        self._topic = topic
        self._timeout_s = config.connect_timeout_ms / 1000
        self._offsets = offsets
        # Only what a test's topics hold; the default lets librdkafka buffer up to 64 MiB per partition.
        self._consumer = _client(config, **{"queued.max.messages.kbytes": 4096})
        try:
            metadata = self._consumer.list_topics(topic, timeout=self._timeout_s)
        except KafkaException as exc:
            self._consumer.close()
            raise KafkaClientError(f"cannot read the partitions of {topic!r}: {exc}", retriable=True) from exc
        info = metadata.topics.get(topic)
        if info is None or info.error is not None:
            self._consumer.close()
            raise KafkaClientError(f"topic {topic!r} does not exist: create it with `kmq topics create`")
        self._partitions = sorted(info.partitions)
        #: Partition → next offset to read. The consumer stays assigned, so librdkafka keeps fetching between calls.
        self._next = dict.fromkeys(self._partitions, 0)
        self._consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in self._partitions])

    def read_to_end(self) -> Iterator[KafkaMessage]:
        """The records written since the last call, at least up to the end offsets as they are now."""
        ends = self._ends_now()
        last_record = time.monotonic()
        while ends:
            batch = self._consumer.consume(500, 0.05)
            for record in batch:
                if record.error() is not None:
                    continue
                partition, offset = record.partition() or 0, record.offset() or 0
                self._next[partition] = offset + 1
                if offset + 1 >= ends.get(partition, 0):
                    ends.pop(partition, None)
                yield record
            if batch:
                last_record = time.monotonic()
            elif self._reached(ends):
                return
            elif time.monotonic() - last_record > STALL_S:
                raise KafkaClientError(f"reading {self._topic!r} stalled: nothing for {STALL_S:.0f}s before its end "
                                       f"offsets {ends}", retriable=True)

    def _ends_now(self) -> dict[int, int]:
        ends = {}
        for partition in self._partitions:
            try:
                low, high = self._offsets.get_watermark_offsets(TopicPartition(self._topic, partition),
                                                                timeout=self._timeout_s, cached=False)
            except KafkaException as exc:
                raise KafkaClientError(f"end offsets of {self._topic!r}: {exc}", retriable=True) from exc
            if high > max(low, self._next[partition]):
                ends[partition] = high
        return ends

    def _reached(self, ends: dict[int, int]) -> bool:
        """Offsets have gaps (transaction markers, compaction): a partition is done once its position passed its
        end, whether or not a record sat at end - 1."""
        for tp in self._consumer.position([TopicPartition(self._topic, p) for p in ends]):
            if tp.offset >= ends[tp.partition]:
                self._next[tp.partition] = tp.offset
                del ends[tp.partition]
        return not ends

    def close(self) -> None:
        self._consumer.close()


class QueueWatch:
    """Pending messages per queue, from the messages and markers topics. Thread-safe."""

    def __init__(self, config: Config) -> None:
        self._at_most_once = frozenset(config.at_most_once_queues)
        self._lock = threading.Lock()
        #: Records on the messages topic without an End yet: id → (queue, record timestamp ms).
        self._open: dict[MessageId, tuple[str, int]] = {}
        self._count: Counter[str] = Counter()
        self._purged_before: dict[str, int] = {}
        self._offsets = _client(config)
        try:
            self._markers = TopicTail(config, config.default_topics.markers, self._offsets)
            try:
                self._messages = TopicTail(config, config.default_topics.messages, self._offsets)
            except BaseException:
                self._markers.close()
                raise
        except BaseException:
            self._offsets.close()
            raise
        self.malformed_markers = 0

    def pending(self, queue: str) -> int:
        """How many of ``queue``'s messages, sent before this call, no End has settled (waiting, delayed, in flight
        or on their way back from the tracker)."""
        if queue in self._at_most_once:
            raise ValueError(f"queue {queue!r} is consumed at most once: it writes no markers, so nothing tells "
                             "when its messages are done")
        with self._lock:
            self._catch_up()
            return self._count[queue]

    def purged(self, queue: str, before_ms: int) -> None:
        """A purge of ``queue`` (``flush``): its messages sent before ``before_ms`` are settled without waiting for a
        consumer to read them and write their End."""
        with self._lock:
            self._purged_before[queue] = max(before_ms, self._purged_before.get(queue, 0))
            for message_id, (name, timestamp_ms) in list(self._open.items()):
                if name == queue and timestamp_ms < before_ms:
                    self._settle(message_id)

    def _catch_up(self) -> None:
        ended: set[MessageId] = set()
        for record in self._markers.read_to_end():
            try:
                markers = decode_record(record.value())
            except MarkerDecodeError:
                self.malformed_markers += 1
                continue
            ended.update(m.message_id for m in markers if m.type is MarkerType.END)
        for message_id in ended & self._open.keys():
            self._settle(message_id)
        ended -= self._open.keys()
        for record in self._messages.read_to_end():
            message_id = MessageId(record.partition() or 0, record.offset() or 0)
            if message_id in ended:
                continue  # its End came in this call's markers
            queue = (record.key() or b"").decode("utf-8", "replace")
            timestamp_ms = record.timestamp()[1]
            if queue in self._at_most_once or timestamp_ms < self._purged_before.get(queue, 0):
                continue
            self._open[message_id] = (queue, timestamp_ms)
            self._count[queue] += 1

    def _settle(self, message_id: MessageId) -> None:
        queue, _ = self._open.pop(message_id)
        self._count[queue] -= 1

    def close(self) -> None:
        with self._lock:
            self._markers.close()
            self._messages.close()
            self._offsets.close()


_watches: dict[tuple[object, ...], QueueWatch] = {}
_watches_lock = threading.Lock()


def shared_watch(config: Config) -> QueueWatch:
    """The process's watch of ``config``'s topics, made at the first call."""
    key = (config.bootstrap_servers, config.default_topics.messages, config.default_topics.markers,
           tuple(sorted(config.kafka.items())),
           config.at_most_once_queues)
    with _watches_lock:
        watch = _watches.get(key)
        if watch is None:
            watch = _watches[key] = QueueWatch(config)
        return watch


@atexit.register
def close_watches() -> None:
    """Closes the process's watches (at exit, or before their topics or broker go away); a later join makes anew."""
    with _watches_lock:
        for watch in _watches.values():
            try:
                watch.close()
            except KafkaException:  # the process is ending; the broker may be gone
                log.debug("queue_watch_close_failed")
        _watches.clear()
