"""Queue control kept in Kafka (a compacted control topic), never in process memory alone: the ControlFollower
that consumers and trackers run, and the writes behind ``kmq pause``/``resume``/``purge``.

Consumers and trackers read the topic from the start when they start, then follow it, so a pause or purge holds
across restarts and for processes started later. The records and their fold are kmq.wire.control.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence

import structlog
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import TopicPartition

from kmq._kafka.metadata import topic_partitions
from kmq._kafka.offsets import watermarks
from kmq._kafka.producer import PolledProducer
from kmq._kafka.settings import consumer_settings, messages_producer_settings
from kmq._kafka.topic_replay import drop_reached
from kmq.config import Config
from kmq.errors import KafkaClientError, TopicError
from kmq.topic_sets import TopicSet
from kmq.wire import ms_after, now_ms
from kmq.wire.control import PAUSE, PURGE, ControlState

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

#: How often a follower polls the control topic: the delay before a pause or purge reaches running consumers.
FOLLOW_POLL_S = 0.2


class ControlFollower:
    """Reads the control topic to its end (``start``), then follows it from a daemon thread. Without a control
    topic (a deployment created before it existed) the state stays empty and nothing is paused or purged."""

    def __init__(self, config: Config, topics: TopicSet,
                 on_change: Callable[[ControlState], None] | None = None) -> None:
        self.state = ControlState()
        self._config = config
        self._topic = topics.control
        self._on_change = on_change
        self._stop = threading.Event()
        self._consumer = KafkaConsumer({
            **consumer_settings(config.replace(client_id=""), topics.private_group("control"), "kmq-control"),
            "fetch.wait.max.ms": 100,  # a pause or purge should reach running consumers within a fraction of a second
        })
        self._thread: threading.Thread | None = None

    def start(self) -> ControlFollower:
        try:
            partitions = topic_partitions(self._consumer, self._config, self._topic, "control")
        except TopicError:
            log.info("no_control_topic", topic=self._topic, note="pause and purge need `kmq topics create`")
            self._consumer.close()
            return self
        self._consumer.assign([TopicPartition(self._topic, p, -2) for p in partitions])
        self._read_to_end(partitions)
        self._thread = threading.Thread(target=self._follow, name="kmq-control", daemon=True)
        self._thread.start()
        return self

    def _read_to_end(self, partitions: list[int]) -> None:
        timeout_s = self._config.connect_timeout_ms / 1000
        ends = {}
        for p in partitions:
            low, high = watermarks(self._consumer, TopicPartition(self._topic, p), timeout_s,
                                          f"end offsets of {self._topic!r}")
            if high > low:
                ends[p] = high
        deadline = time.monotonic() + timeout_s + 20
        while ends and time.monotonic() < deadline:
            batch = self._consumer.consume(500, 0.2)
            for record in batch:
                if record.error() is None:
                    self._apply(record)
                    if (record.offset() or 0) + 1 >= ends.get(record.partition() or 0, 0):
                        ends.pop(record.partition() or 0, None)
            if not batch:
                drop_reached(self._consumer, self._topic, ends)
        if ends:
            raise KafkaClientError(f"could not read control topic {self._topic!r} within {timeout_s + 20:.0f}s")

    @property
    def available(self) -> bool:
        """Whether the control topic exists (and is followed)."""
        return self._thread is not None

    @property
    def topic(self) -> str:
        return self._topic

    def _apply(self, record: object) -> None:
        self.state.apply(record.key() or b"", record.value(), record.offset() or 0)  # type: ignore[attr-defined]
        if self._on_change is not None:
            self._on_change(self.state)

    def _follow(self) -> None:
        while not self._stop.is_set():
            try:
                for record in self._consumer.consume(100, FOLLOW_POLL_S):
                    if record.error() is None:
                        self._apply(record)
            except Exception as err:  # noqa: BLE001 - following is best effort until the next poll
                log.warning("control_follow_failed", error=str(err))
                self._stop.wait(1.0)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._consumer.close()


def write(config: Config, topics: TopicSet, key: str, value: dict[str, object] | None) -> None:
    """Writes one control record durably."""
    write_record(config, topics, key.encode(), None if value is None else json.dumps(value).encode())


def write_record(config: Config, topics: TopicSet, key: bytes, value: bytes | None) -> None:
    """Writes one control record of ``topics`` (already encoded; None: a tombstone) durably."""
    topic = topics.control
    producer = PolledProducer(messages_producer_settings(config, "kmq-control"), "control", warm_topic=topic)
    try:
        topic_partitions(producer.client, config, topic, "control")
        delivery = producer.produce_future(topic, value, key)  # type: ignore[arg-type]
        producer.wait(delivery, config.connect_timeout_ms / 1000 + 20)
        delivery.result(0)
    finally:
        producer.close(5)


# A queue's pause and purge go to the control topic of every set its messages may be in (while it moves, the set
# it moves from too: both sets' consumers and trackers follow them), or of the sets given (a console that serves some
# sets only: it may not have the others' ACLs).

def pause(config: Config, queue: str, until_ms: int | None = None, *,
          topic_sets: Sequence[TopicSet] | None = None) -> None:
    for topics in _sets(config, queue, topic_sets):
        write(config, topics, PAUSE + queue, {"until_ms": until_ms, "at_ms": now_ms()})


def resume(config: Config, queue: str, *, topic_sets: Sequence[TopicSet] | None = None) -> None:
    for topics in _sets(config, queue, topic_sets):
        write(config, topics, PAUSE + queue, None)


def purge(config: Config, queue: str, before_ms: int | None = None, *,
          topic_sets: Sequence[TopicSet] | None = None) -> int:
    """Purges what was enqueued before ``before_ms`` (default now); returns that time."""
    before = ms_after(0) if before_ms is None else before_ms
    for topics in _sets(config, queue, topic_sets):
        write(config, topics, PURGE + queue, {"before_ms": before})
    return before


def _sets(config: Config, queue: str, topic_sets: Sequence[TopicSet] | None) -> Sequence[TopicSet]:
    return config.reading_sets(queue) if topic_sets is None else topic_sets
