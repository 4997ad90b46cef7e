"""The confluent-kafka edge: client settings kmq relies on, error classification, record conversion."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import structlog
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka import Message as KafkaMessage
from confluent_kafka import Producer as KafkaProducer

from kmq.config import Config
from kmq.errors import DeliveryError, KafkaClientError
from kmq.markers import MessageId
from kmq.message import Message, Settler
from kmq.offset_book import CommitOutcome

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

HEADER_DELIVERY_COUNT = "kmq-delivery-count"
HEADER_FIRST_ID = "kmq-first-message-id"
HEADER_ENQUEUED_AT = "kmq-enqueued-at-ms"
HEADER_DLQ_REASON = "kmq-dead-letter-reason"
HEADER_DLQ_QUEUE = "kmq-queue"
RESERVED_HEADER_PREFIX = "kmq-"

TRACKER_GROUP = "kafka-mq-redelivery"
COMMIT_ATTEMPTS = 3

# Commit errors that mean this member no longer owns its partitions: retrying cannot succeed.
OWNERSHIP_LOST = frozenset({
    KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID, KafkaError.REBALANCE_IN_PROGRESS,
    KafkaError.FENCED_INSTANCE_ID, getattr(KafkaError, "STALE_MEMBER_EPOCH", -10_000),
    KafkaError._ASSIGNMENT_LOST, KafkaError._STATE,
})


def consumer_group(queue: str) -> str:
    """kafka-mq-go's group name, so Go and Python consumers of one queue share a group."""
    return f"kafka-mq-{queue}"


def _librdkafka_logger() -> logging.Logger:
    logger = logging.getLogger("kmq.librdkafka")
    logger.setLevel(logging.WARNING)
    return logger


def base_settings(config: Config, client_id: str) -> dict[str, Any]:
    settings: dict[str, Any] = {"bootstrap.servers": config.bootstrap_servers, "client.id": client_id,
                                "logger": _librdkafka_logger()}
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
        "partition.assignment.strategy": "cooperative-sticky",
        "enable.partition.eof": False,
        **config.consumer_kafka,
    }
    if config.client_id:
        settings["group.instance.id"] = config.client_id
    return settings


def is_fatal(err: KafkaError) -> bool:
    # librdkafka reports a fatal error (e.g. a fenced static member) as an event whose code is _FATAL.
    return bool(err.fatal()) or err.code() == KafkaError._FATAL


def client_error(err: KafkaError, what: str) -> KafkaClientError:
    return KafkaClientError(f"{what}: {err.str()} ({err.name()})", retriable=err.retriable(), code=err.code())


def raise_from(exc: KafkaException, what: str) -> KafkaClientError:
    err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    if err is None:
        return KafkaClientError(f"{what}: {exc}")
    return client_error(err, what)


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


def delivery_headers(delivery_count: int, first_message_id: MessageId, enqueued_at_ms: int) -> list[tuple[str, bytes]]:
    """The kmq header triple a redelivered copy or a dead letter carries (read back by ``to_message``)."""
    return [(HEADER_DELIVERY_COUNT, str(delivery_count).encode()),
            (HEADER_FIRST_ID, str(first_message_id).encode()),
            (HEADER_ENQUEUED_AT, str(enqueued_at_ms).encode())]


def origin_id(record: KafkaMessage) -> MessageId:
    """The first delivery's id of a messages-topic record: its first-id header, or its own id on a first delivery."""
    first = header_dict(record).get(HEADER_FIRST_ID)
    return MessageId.parse(first.decode()) if first else message_id(record)


def to_message(record: KafkaMessage, queue: str, settler: Settler, next_keep_alive: float) -> Message:
    """A record of ``queue`` as the Message handed to a worker (kmq headers parsed, user headers kept)."""
    msg_id = MessageId(record.partition() or 0, record.offset() or 0)
    raw: list[tuple[str, bytes]] | None = record.headers()  # type: ignore[assignment]
    if not raw:  # a first delivery without user headers: the common case, kept cheap
        return Message(record.value() or b"", {}, queue, msg_id, 1, msg_id, record_timestamp_ms(record),
                       settler, _next_keep_alive=next_keep_alive)
    kmq = {k: v or b"" for k, v in raw if k.startswith(RESERVED_HEADER_PREFIX)}
    first = kmq.get(HEADER_FIRST_ID)
    enqueued = kmq.get(HEADER_ENQUEUED_AT)
    return Message(
        payload=record.value() or b"", queue=queue, message_id=msg_id,
        headers={k: v or b"" for k, v in raw if not k.startswith(RESERVED_HEADER_PREFIX)},
        delivery_count=int(kmq.get(HEADER_DELIVERY_COUNT, b"1")),
        first_message_id=MessageId.parse(first.decode()) if first else msg_id,
        enqueued_at_ms=int(enqueued) if enqueued else record_timestamp_ms(record),
        _settler=settler, _next_keep_alive=next_keep_alive,
    )


def header_dict(record: KafkaMessage) -> dict[str, bytes]:
    headers: list[tuple[str, bytes]] | None = record.headers()  # type: ignore[assignment]
    return {k: v or b"" for k, v in headers} if headers else {}


def record_timestamp_ms(record: KafkaMessage) -> int:
    kind, ts = record.timestamp()
    return int(ts) if kind != 0 and ts is not None and ts >= 0 else 0


_DELIVERY_LOCK = threading.Lock()
T = TypeVar("T")


class Delivery(Generic[T]):
    """A Future-like handle for one record's delivery report: ``result(timeout)``, ``exception()``, ``done()``,
    ``add_done_callback(fn)``. Unlike concurrent.futures.Future it allocates no lock or condition per record
    (those halved send_async throughput); an Event is made only when someone waits before the report."""

    __slots__ = ("_callbacks", "_done", "_error", "_event", "_value")

    def __init__(self) -> None:
        self._done = False
        self._value: T | None = None
        self._error: BaseException | None = None
        self._event: threading.Event | None = None
        self._callbacks: list[Callable[[Delivery[T]], object]] | None = None

    def _set(self, value: T | None, error: BaseException | None) -> None:
        with _DELIVERY_LOCK:
            self._value, self._error, self._done = value, error, True
            event, callbacks, self._callbacks = self._event, self._callbacks, None
        if event is not None:
            event.set()
        for callback in callbacks or ():
            callback(self)

    def done(self) -> bool:
        return self._done

    def _wait(self, timeout: float | None) -> None:
        with _DELIVERY_LOCK:
            if self._done:
                return
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        if not event.wait(timeout):
            raise TimeoutError(f"no delivery report within {timeout}s")

    def result(self, timeout: float | None = None) -> T:
        self._wait(timeout)
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        return self._error

    def add_done_callback(self, fn: Callable[[Delivery[T]], object]) -> None:
        with _DELIVERY_LOCK:
            if not self._done:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(fn)
                return
        fn(self)


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
                on_done: Callable[[KafkaError | None, KafkaMessage], None] | None = None) -> None:
        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": on_done}
        if headers:
            kwargs["headers"] = list(headers)
        while True:
            try:
                self._producer.produce(topic, **kwargs)
                return
            except BufferError:
                # librdkafka's local queue is full: wait for deliveries to drain it instead of failing.
                self._producer.poll(0.05)
            except KafkaException as exc:
                raise raise_from(exc, f"cannot produce to {topic}") from exc

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
