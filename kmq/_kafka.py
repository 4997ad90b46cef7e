"""The confluent-kafka edge: client settings kmq relies on, error classification, record conversion."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka import Message as KafkaMessage
from confluent_kafka import Producer as KafkaProducer

from kmq import logs, wire
from kmq.config import Config
from kmq.delivery import Delivery
from kmq.errors import DeliveryError, KafkaClientError, TopicError
from kmq.message import Message, Settler
from kmq.offset_book import CommitOutcome
from kmq.wire import MessageId

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

COMMIT_ATTEMPTS = 3

# Commit errors that mean this member no longer owns its partitions: retrying cannot succeed.
OWNERSHIP_LOST = frozenset({
    KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID, KafkaError.REBALANCE_IN_PROGRESS,
    KafkaError.FENCED_INSTANCE_ID, getattr(KafkaError, "STALE_MEMBER_EPOCH", -10_000),
    KafkaError._ASSIGNMENT_LOST, KafkaError._STATE,
})

# Offset-query errors of a partition whose leader is moving or not yet serving (a topic created a moment ago gives
# NOT_LEADER_FOR_PARTITION until its broker has loaded it): they pass, so a one-shot query retries them.
LEADERSHIP_MOVING = frozenset({
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE,
})


def base_settings(config: Config, client_id: str) -> dict[str, Any]:
    settings: dict[str, Any] = {"bootstrap.servers": config.bootstrap_servers, "client.id": client_id,
                                "logger": logs.librdkafka_logger()}
    settings.update(config.kafka)
    return settings


def messages_producer_settings(config: Config, client_id: str) -> dict[str, Any]:
    return {
        **base_settings(config, client_id),
        "enable.idempotence": True,
        # kafka-mq-go spreads one queue over all partitions; Python's default would pin a queue to one.
        "partitioner": "random",
        "linger.ms": 5,
        "message.max.bytes": config.max_payload_bytes + 100_000,
    }


def markers_producer_settings(config: Config, client_id: str) -> dict[str, Any]:
    return {
        **base_settings(config, client_id),
        "enable.idempotence": True,  # implies acks=all and keeps a queue's markers in order across retries
        "partitioner": "murmur2_random",  # Java-compatible: a queue's markers share one partition with Go's
        # kmq batches markers itself (a Start record per poll batch, settles every settle_linger_ms): a linger here
        # only delays the Start a hand-out waits for (2 ms cost ~25% of consumer throughput).
        "linger.ms": 0,
        # A Start carries the payload plus its headers and the marker fields.
        "message.max.bytes": config.max_payload_bytes + 200_000,
    }


def consumer_settings(config: Config, group: str, client_id: str) -> dict[str, Any]:
    settings = {
        **base_settings(config, client_id),
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "partition.assignment.strategy": config.assignment_strategy,
        "enable.partition.eof": False,
        **config.consumer_kafka,
    }
    if config.client_id:
        settings["group.instance.id"] = config.client_id
    return settings


def assign(consumer: KafkaConsumer, partitions: list[TopicPartition], eager: bool) -> None:
    """In an on_assign callback: an eager rebalance hands over the whole assignment, a cooperative one a delta."""
    if eager:
        consumer.assign(partitions)
    else:
        consumer.incremental_assign(partitions)


def unassign(consumer: KafkaConsumer, partitions: list[TopicPartition], eager: bool) -> None:
    """In an on_revoke/on_lost callback: an eager rebalance takes everything back, a cooperative one a delta."""
    if eager:
        consumer.unassign()
    else:
        consumer.incremental_unassign(partitions)


class GroupJoinWatch:
    """Turns "cannot join the group" (no assignment strategy in common with its members) into a fatal error once
    it has lasted ``bound_s`` with nothing assigned: librdkafka retries it for ever, silently to the caller."""

    def __init__(self, group: str, strategy: str, bound_s: float) -> None:
        self._group = group
        self._strategy = strategy
        self._bound_s = bound_s
        self._since: float | None = None

    def assigned(self) -> None:
        self._since = None

    def check(self, err: KafkaError, has_assignment: bool) -> KafkaClientError | None:
        """For each client error: the fatal error to raise, or None."""
        if err.code() != KafkaError.INCONSISTENT_GROUP_PROTOCOL or has_assignment:
            return None
        now = time.monotonic()
        if self._since is None:
            self._since = now
        if now - self._since < self._bound_s:
            return None
        return KafkaClientError(
            f"cannot join consumer group {self._group!r}: its members use a partition assignment strategy this "
            f"member does not ({self._strategy!r} here; kafka-mq-go's members use 'range,roundrobin'). Give every "
            "kmq member of a group shared with kafka-mq-go rebalance_protocol: eager (the default with "
            "marker_format: kafka-mq-go)", code=err.code())


def is_fatal(err: KafkaError) -> bool:
    # librdkafka reports a fatal error (e.g. a fenced static member) as an event whose code is _FATAL.
    return bool(err.fatal()) or err.code() == KafkaError._FATAL


def client_error(err: KafkaError, what: str) -> KafkaClientError:
    return KafkaClientError(f"{what}: {err.str()} ({err.name()})", retriable=err.retriable(), code=err.code())


def to_kmq_error(exc: KafkaException, what: str) -> KafkaClientError:
    err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    if err is None:
        return KafkaClientError(f"{what}: {exc}")
    return client_error(err, what)


def topic_partitions(client: KafkaConsumer | KafkaProducer, config: Config, topic: str, role: str) -> list[int]:
    """The partitions of ``topic`` (the ``role`` topic: "message", "dead-letter" …); a clear KafkaClientError when the
    broker does not answer within the connect timeout, a TopicError when the topic does not exist."""
    timeout_s = config.connect_timeout_ms / 1000
    try:
        meta = client.list_topics(topic, timeout=timeout_s)
    except KafkaException as exc:
        raise KafkaClientError(f"cannot reach Kafka at {config.bootstrap_servers} within {timeout_s:.0f}s: "
                               f"{to_kmq_error(exc, 'metadata')}", retriable=True) from exc
    info = meta.topics.get(topic)
    if info is None or info.error is not None:
        raise TopicError(f"{role} topic {topic!r} does not exist: create it with `kmq topics create`")
    return list(info.partitions)


def watermarks(consumer: KafkaConsumer, tp: TopicPartition, timeout_s: float, what: str,
               sleep: Callable[[float], None] = time.sleep) -> tuple[int, int]:
    """The low and high watermarks of ``tp``, retrying transient errors for up to ``timeout_s``; a
    KafkaClientError naming ``what`` (e.g. "end offsets of 'q.control'") once they persist or are not transient."""
    deadline = time.monotonic() + timeout_s
    pause_s = 0.05
    while True:
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=max(0.1, deadline - time.monotonic()))
            return int(low), int(high)
        except KafkaException as exc:
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            transient = err is not None and (err.retriable() or err.code() in LEADERSHIP_MOVING
                                             or err.code() == KafkaError._TIMED_OUT)
            if not transient or time.monotonic() + pause_s >= deadline:
                raise to_kmq_error(exc, what) from exc
            log.debug("offsets_query_retried", of=what, error=err.str() if err else str(exc))
        sleep(pause_s)
        pause_s = min(pause_s * 2, 1.0)


def instance_id() -> str:
    """Who writes a marker: host and process, short and set once per process."""
    return f"{socket.gethostname()[:32]}:{os.getpid()}"


def commit(consumer: KafkaConsumer, offsets: Mapping[tuple[str, int], int], what: str,
           attempts: int = COMMIT_ATTEMPTS) -> CommitOutcome:
    """Commits ``offsets`` synchronously, retrying transient errors; FENCED when this member lost the partitions."""
    partitions = [TopicPartition(topic, partition, offset) for (topic, partition), offset in offsets.items()]
    for attempt in range(1, attempts + 1):
        try:
            results = consumer.commit(offsets=partitions, asynchronous=False) or []
            errors = [tp.error for tp in results if tp.error is not None]
            if not errors:
                return CommitOutcome.COMMITTED
            error: KafkaError = errors[0]
        except KafkaException as exc:
            error = exc.args[0]
        if error.code() in OWNERSHIP_LOST:
            log.info("commit_fenced", of=what, error=error.str())
            return CommitOutcome.FENCED
        log.warning("commit_failed", of=what, error=error.str(), attempt=attempt)
        time.sleep(0.2 * attempt)
    return CommitOutcome.FAILED


def message_id(record: KafkaMessage) -> MessageId:
    return MessageId(record.partition() or 0, record.offset() or 0)


def first_id(record: KafkaMessage) -> MessageId:
    """The first delivery's id of a messages-topic record: its first-id header, or its own id on a first delivery."""
    first = header_dict(record).get(wire.HEADER_FIRST_ID)
    return MessageId.parse(first.decode()) if first else message_id(record)


def to_message(record: KafkaMessage, queue: str, settler: Settler, next_keep_alive: float) -> Message:
    """A record of ``queue`` as the Message handed to a worker (kmq headers parsed, user headers kept)."""
    msg_id = MessageId(record.partition() or 0, record.offset() or 0)
    raw: list[tuple[str, bytes]] | None = record.headers()  # type: ignore[assignment]
    if not raw:  # a first delivery without user headers: the common case, kept cheap
        return Message(record.value() or b"", {}, queue, msg_id, 1, msg_id, record_timestamp_ms(record),
                       settler, _next_keep_alive=next_keep_alive)
    internal = wire.INTERNAL_HEADERS
    kmq = wire.DeliveryHeaders.parse({k: v or b"" for k, v in raw if k in internal})
    return Message(
        payload=record.value() or b"", queue=queue, message_id=msg_id,
        headers={k: v or b"" for k, v in raw if k not in internal},
        delivery_count=kmq.delivery_count, first_message_id=kmq.first_message_id or msg_id,
        enqueued_at_ms=kmq.enqueued_at_ms or record_timestamp_ms(record),
        _settler=settler, _next_keep_alive=next_keep_alive,
    )


def header_dict(record: KafkaMessage) -> dict[str, bytes]:
    headers: list[tuple[str, bytes]] | None = record.headers()  # type: ignore[assignment]
    return {k: v or b"" for k, v in headers} if headers else {}


def record_timestamp_ms(record: KafkaMessage) -> int:
    kind, ts = record.timestamp()
    return int(ts) if kind != 0 and ts is not None and ts >= 0 else 0


class PolledProducer:
    """A confluent Producer with a thread serving delivery callbacks, and per-record futures."""

    def __init__(self, settings: dict[str, Any], name: str) -> None:
        self._producer = KafkaProducer(settings)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"kmq-{name}-poll", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._closed.is_set():
            self._producer.poll(0.05)

    def produce(self, topic: str, value: bytes, key: bytes | None,
                headers: Sequence[tuple[str, bytes]] | None = None,
                on_done: Callable[[KafkaError | None, KafkaMessage], None] | None = None,
                partition: int | None = None) -> None:
        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": on_done}
        if headers:
            kwargs["headers"] = list(headers)
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                self._producer.produce(topic, **kwargs)
                return
            except BufferError:
                # librdkafka's local queue is full: wait for deliveries to drain it instead of failing.
                self._producer.poll(0.05)
            except KafkaException as exc:
                raise to_kmq_error(exc, f"cannot produce to {topic}") from exc

    def produce_future(self, topic: str, value: bytes, key: bytes | None,
                       headers: Sequence[tuple[str, bytes]] | None = None) -> Delivery[MessageId]:
        delivery: Delivery[MessageId] = Delivery()

        def done(err: KafkaError | None, record: KafkaMessage) -> None:
            if err is not None:
                delivery._set(None, DeliveryError(f"delivery to {topic} failed: {err.str()}",
                                                  retriable=err.retriable(), code=err.code()))
            else:
                delivery._set(message_id(record), None)

        self.produce(topic, value, key, headers, done)
        return delivery

    def flush(self, timeout_s: float) -> int:
        return int(self._producer.flush(timeout_s))

    def close(self, timeout_s: float = 10.0) -> int:
        if self._closed.is_set():
            return 0
        remaining = self.flush(timeout_s)
        self._closed.set()
        self._thread.join()
        return remaining

    @property
    def client(self) -> KafkaProducer:
        return self._producer
