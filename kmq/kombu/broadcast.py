"""Broadcast: kombu's fanout exchanges (Celery's remote control, broadcast tasks) and publishes to exchanges this
process has no binding for (remote-control replies, Celery's events), over one plain Kafka topic.

A kmq queue is a work queue: its consumers compete for each message. Fanout needs the opposite, every subscriber
gets every message, which is what a Kafka topic read by readers outside any group gives. Redis's transport does it
with PUBLISH/SUBSCRIBE and the same semantics hold here: **at most once, to live subscribers**. A subscriber (a
transient queue bound to such an exchange) reads the topic from the time its queue was bound, routes each record
through its own bindings (the exchange's type: fanout, direct or topic), and never acks (nothing is redelivered).
Records are keyed by exchange name; the topic has one partition (the volume is control traffic) and keeps records
for ``RETENTION_MS``.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from confluent_kafka import OFFSET_END, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from kmq import Config, KafkaClientError, wire

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

RETENTION_MS = 60 * 60 * 1000
MAX_RECORDS_PER_POLL = 100


def topic_for(config: Config, configured: str) -> str:
    return configured or f"{config.default_topics.messages}.broadcast"


@dataclass(frozen=True, slots=True)
class Broadcast:
    """One record: the exchange (the record key), the routing key, the kombu message, and when it was published."""

    exchange: str
    routing_key: str
    message: dict[str, Any]
    timestamp_ms: int = 0

    def expired(self, now_ms: int) -> bool:
        """Past kombu's ``expiration`` property (milliseconds after publishing), as a TTL-honouring broker drops it."""
        expiration = (self.message.get("properties") or {}).get("expiration")
        try:
            return expiration is not None and self.timestamp_ms + float(expiration) <= now_ms
        except ValueError:
            return False


def encode(routing_key: str, message: dict[str, Any]) -> bytes:
    return json.dumps({"routing_key": routing_key, "message": message}, separators=(",", ":")).encode()


def decode(exchange: str, value: bytes, timestamp_ms: int = 0) -> Broadcast | None:
    try:
        data = json.loads(value)
        return Broadcast(exchange, str(data["routing_key"]), dict(data["message"]), timestamp_ms)
    except (ValueError, KeyError, TypeError):
        return None


#: librdkafka's own lines from the broadcast clients: silent unless an application gives this logger a handler
#: (a broadcast is at most once; a failed one is logged as ``kombu_broadcast_failed``).
LIBRDKAFKA_LOG = logging.getLogger("kmq.kombu.librdkafka")
LIBRDKAFKA_LOG.addHandler(logging.NullHandler())
LIBRDKAFKA_LOG.propagate = False


def _settings(config: Config, role: str) -> dict[str, Any]:
    return {"bootstrap.servers": config.bootstrap_servers, **config.kafka,
            "client.id": f"kmq-kombu-broadcast-{role}", "logger": LIBRDKAFKA_LOG}


class Publisher:
    """One Kafka producer per process (and per broker) for broadcasts; fire and forget, failures logged."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._producers: dict[str, Producer] = {}
        self._topics: set[tuple[str, str]] = set()

    def publish(self, config: Config, topic: str, exchange: str, routing_key: str, message: dict[str, Any]) -> None:
        producer = self._producer(config, topic)
        producer.produce(topic, encode(routing_key, message), exchange.encode(), on_delivery=_log_failure)
        producer.poll(0)

    def _producer(self, config: Config, topic: str) -> Producer:
        with self._lock:
            if self._pid != os.getpid():  # a forked child must not use its parent's client
                self._producers, self._topics, self._pid = {}, set(), os.getpid()
            ensure_topic(config, topic, self._topics)
            producer = self._producers.get(config.bootstrap_servers)
            if producer is None:
                producer = self._producers[config.bootstrap_servers] = Producer(
                    {**_settings(config, "publisher"), "linger.ms": 1})
            return producer

    def flush(self, timeout_s: float = 5.0) -> None:
        """Waits for the broadcasts still in the clients, then lets the clients go."""
        with self._lock:
            if self._pid != os.getpid():
                return
            producers = list(self._producers.values())
            self._producers = {}
        for producer in producers:
            left = producer.flush(timeout_s)
            if left:
                log.warning("kombu_broadcasts_undelivered", count=left)


def _log_failure(err: KafkaError | None, _record: object) -> None:
    if err is not None:
        log.warning("kombu_broadcast_failed", error=err.str())


def ensure_topic(config: Config, topic: str, known: set[tuple[str, str]]) -> None:
    """Creates the broadcast topic if missing (once per process and broker)."""
    if (config.bootstrap_servers, topic) in known:
        return
    admin = AdminClient(_settings(config, "admin"))
    timeout_s = config.connect_timeout_ms / 1000
    new = NewTopic(topic, 1, -1, config={"retention.ms": str(RETENTION_MS)})  # -1: the broker's replication factor
    try:
        admin.create_topics([new], operation_timeout=timeout_s)[topic].result(timeout=timeout_s)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise KafkaClientError(f"cannot create broadcast topic {topic!r}: {exc.args[0].str()}",
                                   retriable=exc.args[0].retriable()) from exc
    known.add((config.bootstrap_servers, topic))


PUBLISHER = Publisher()
atexit.register(PUBLISHER.flush)


class Subscription:
    """One transient queue's reader: the broadcast records keyed by ``exchanges`` since ``since_ms``."""

    def __init__(self, config: Config, topic: str, exchanges: set[str], since_ms: int) -> None:
        self.exchanges = {name.encode() for name in exchanges}
        timeout_s = config.connect_timeout_ms / 1000
        ensure_topic(config, topic, set())
        # Never subscribes or commits: the group id is required by the client, no group is ever formed.
        self._reader = Consumer({**_settings(config, "reader"), "group.id": f"kmq-kombu-{uuid.uuid4().hex}",
                                 "enable.auto.commit": False, "enable.partition.eof": False,
                                 "fetch.wait.max.ms": 50})
        try:
            meta = self._reader.list_topics(topic, timeout=timeout_s).topics[topic]
            wanted = [TopicPartition(topic, p, since_ms) for p in sorted(meta.partitions)]
            found = self._reader.offsets_for_times(wanted, timeout=timeout_s)
            self._reader.assign([TopicPartition(topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_END)
                                 for tp in found])
        except KafkaException as exc:
            self._reader.close()
            raise KafkaClientError(f"cannot read broadcast topic {topic!r}: {exc.args[0]}", retriable=True) from exc

    def poll(self) -> list[Broadcast]:
        """What arrived since the last poll, for this queue's exchanges; never blocks."""
        out: list[Broadcast] = []
        for record in self._reader.consume(MAX_RECORDS_PER_POLL, 0):
            key = record.key()
            if record.error() is not None or key not in self.exchanges:
                continue
            value = record.value()
            kind, timestamp_ms = record.timestamp()
            got = decode(key.decode(errors="replace"), value, timestamp_ms if kind else 0) if value else None
            if got is not None:
                out.append(got)
        return out

    def close(self) -> None:
        self._reader.close()


#: ``route(exchange, routing_key)``: the queues a channel's bindings send a broadcast to.
Route = Callable[[str, str], set[str]]


class Subscribers:
    """A channel's broadcast subscribers: a reader per queue, and what each read and has not yet delivered."""

    def __init__(self, config: Config, topic: str, prefix: str) -> None:
        self._config = config
        self._topic = topic
        self._prefix = prefix  # the queue-name prefix, which namespaces exchange names (the record keys) too
        self._readers: dict[str, Subscription] = {}
        self._ready: dict[str, deque[Broadcast]] = {}

    def open(self, queue: str, exchanges: set[str], since_ms: int) -> None:
        if queue not in self._readers:
            self._readers[queue] = Subscription(self._config, self._topic,
                                                {self._prefix + name for name in exchanges}, since_ms)

    def next(self, queue: str, route: Route, timeout_s: float, poll_s: float) -> dict[str, Any] | None:
        """The next broadcast ``route`` sends to ``queue`` (expired ones skipped), or None after ``timeout_s``."""
        ready = self._ready.setdefault(queue, deque())
        deadline = time.monotonic() + timeout_s
        while not ready:
            now_ms = wire.now_ms()
            for record in self._readers[queue].poll():
                if not record.expired(now_ms) and queue in route(record.exchange.removeprefix(self._prefix),
                                                                 record.routing_key):
                    ready.append(record)
            if not ready:
                if time.monotonic() >= deadline:
                    return None
                time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))
        return ready.popleft().message

    def waiting(self, queue: str) -> int:
        return len(self._ready.get(queue, ()))

    def drop_waiting(self, queue: str) -> int:
        return len(self._ready.pop(queue, ()))

    def close(self, queue: str) -> None:
        self._ready.pop(queue, None)
        reader = self._readers.pop(queue, None)
        if reader is not None:
            reader.close()

    def close_all(self) -> None:
        for queue in list(self._readers):
            self.close(queue)
