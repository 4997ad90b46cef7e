"""PolledProducer: a confluent Producer with a thread serving delivery reports, and per-record futures."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Message as KafkaMessage
from confluent_kafka import Producer as KafkaProducer

from kmq._kafka.errors import to_kmq_error
from kmq._kafka.records import message_id
from kmq.delivery import Delivery
from kmq.errors import DeliveryError
from kmq.wire import MessageId


class MarkerProducer(Protocol):
    """The producer calls the writer makes (PolledProducer has them)."""

    def produce(self, topic: str, value: bytes, key: bytes | None, headers: Any = None,
                on_done: Callable[[Any, Any], None] | None = None) -> None: ...
    def produce_future(self, topic: str, value: bytes, key: bytes | None, headers: Any = None,
                       on_record: Callable[[Any], None] | None = None) -> Delivery[MessageId]: ...
    def flush(self, timeout_s: float) -> int: ...


class PolledProducer:
    """A confluent Producer with a thread serving delivery callbacks, and per-record futures."""

    def __init__(self, settings: dict[str, Any], name: str) -> None:
        self._producer = KafkaProducer(settings)
        self._closed = threading.Event()
        self._progress_at = time.monotonic()
        self._thread = threading.Thread(target=self._serve, name=f"kmq-{name}-poll", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        pending_before = 0
        while not self._closed.is_set():
            served = self._producer.poll(0.05)
            pending = len(self._producer)
            if served or pending == 0 or pending < pending_before:
                self._progress_at = time.monotonic()
            pending_before = pending

    def stalled_s(self) -> float:
        """How long records have waited with none acknowledged (0 when none waits): a failover, a partition without
        a leader or without enough in-sync replicas. Costs nothing per record: the poll thread looks."""
        if len(self._producer) == 0:
            return 0.0
        return max(0.0, time.monotonic() - self._progress_at)

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
                       headers: Sequence[tuple[str, bytes]] | None = None,
                       on_record: Callable[[KafkaMessage], None] | None = None) -> Delivery[MessageId]:
        """A Delivery for one record; ``on_record`` sees the delivered record (its broker timestamp) first."""
        delivery: Delivery[MessageId] = Delivery()

        def done(err: KafkaError | None, record: KafkaMessage) -> None:
            if err is not None:
                delivery._set(None, DeliveryError(f"delivery to {topic} failed: {err.str()}",
                                                  retriable=err.retriable(), code=err.code()))
                return
            if on_record is not None:
                on_record(record)
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
