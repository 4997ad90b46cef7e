"""PolledProducer: a confluent Producer with a thread serving delivery reports, and per-record futures."""

from __future__ import annotations

import itertools
import random
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

#: One metadata answer for the idempotent producer's id (see PolledProducer); it is an optimisation, so short.
WARM_UP_TIMEOUT_S = 1.0
#: How long one flush slice of ``wait`` runs (it ends with its record's report, not with the whole queue's), and
#: the longer slice after ``LONG_WAIT_S`` (a slow broker: fewer wake-ups, overshoot still small beside the wait).
FLUSH_SLICE_S, LONG_SLICE_S, LONG_WAIT_S = 0.001, 0.01, 0.05
#: How often a spreading producer looks for partitions added to its topic.
PARTITIONS_REFRESH_S = 60.0


class MarkerProducer(Protocol):
    """The producer calls the writer makes (PolledProducer has them)."""

    def produce(self, topic: str, value: bytes, key: bytes | None, headers: Any = None,
                on_done: Callable[[Any, Any], None] | None = None) -> None: ...
    def produce_future(self, topic: str, value: bytes, key: bytes | None, headers: Any = None,
                       on_record: Callable[[Any], None] | None = None) -> Delivery[MessageId]: ...
    def produce_many(self, topic: str, values: Sequence[bytes], key: bytes | None,
                     on_done: Callable[[Any, Any], None]) -> None: ...
    def flush(self, timeout_s: float) -> int: ...


class PolledProducer:
    """A confluent Producer with a thread serving delivery callbacks, and per-record futures.

    ``warm_topic``: the topic it will write to. An idempotent librdkafka producer asks for its producer id 500 ms
    after it is made (or when a metadata answer comes in with a broker up), and holds every record until it has
    one: so the first record of a fresh producer waited ~0.5 s. The poll thread asks for that topic's metadata at
    once (twice: the first answer may come before the broker it names is connected), and the id comes ~one round
    trip after construction, without blocking it.

    ``spread``: ``next_partition`` gives the warm topic's partitions in turn, from a random one (see there).
    """

    def __init__(self, settings: dict[str, Any], name: str, warm_topic: str | None = None,
                 spread: bool = False) -> None:
        self._producer = KafkaProducer(settings)
        self._closed = threading.Event()
        self._warm_topic = warm_topic
        self._spread = spread and warm_topic is not None
        #: The warm topic's partition count (0 until known), and the turn of ``next_partition``.
        self._partitions = 0
        self._turn = itertools.count(random.randrange(1 << 16))
        self._partitions_at = 0.0
        self._lock = threading.Lock()
        self._waiters = 0
        self._progress_at = time.monotonic()
        self._thread = threading.Thread(target=self._serve, name=f"kmq-{name}-poll", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        if self._warm_topic is not None:
            self._warm_up(self._warm_topic)
        pending_before = 0
        while not self._closed.is_set():
            if self._waiters:
                # A synchronous wait serves the reports meanwhile (see wait): two threads polling one queue
                # race for each report, and the loser's flush slice runs out its time.
                self._closed.wait(FLUSH_SLICE_S)
                served = 0
            else:
                served = self._producer.poll(0.05)
            if self._spread and time.monotonic() - self._partitions_at > PARTITIONS_REFRESH_S:
                self._learn_partitions()
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

    def _warm_up(self, topic: str) -> None:
        for _ in range(2):
            if self._closed.is_set():
                return
            if not self._learn_partitions():
                return  # the broker is not there yet: librdkafka's own timer asks for the id later

    def _learn_partitions(self) -> bool:
        assert self._warm_topic is not None
        self._partitions_at = time.monotonic()
        try:
            found = self._producer.list_topics(self._warm_topic, timeout=WARM_UP_TIMEOUT_S).topics.get(
                self._warm_topic)
        except KafkaException:
            return False
        if found is not None and found.error is None and found.partitions:
            self._partitions = len(found.partitions)
        return True

    def next_partition(self) -> int | None:
        """With ``spread``, the partition for the next record: each in turn, so a burst of N records over P
        partitions puts N/P on each (a backlog that P workers share evenly; librdkafka's random partitioner
        gave 13 of 30 to one of 4 partitions). None (librdkafka's partitioner) until the count is known."""
        partitions = self._partitions
        return next(self._turn) % partitions if partitions else None

    def produce(self, topic: str, value: bytes, key: bytes | None,
                headers: Sequence[tuple[str, bytes]] | None = None,
                on_done: Callable[[KafkaError | None, KafkaMessage], None] | None = None,
                partition: int | None = None, block: bool = True) -> None:
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
                if not block:  # the caller waits its own way (kmq.aio: without blocking its event loop)
                    raise
                # librdkafka's local queue is full: wait for deliveries to drain it instead of failing.
                self._producer.poll(0.05)
            except KafkaException as exc:
                raise to_kmq_error(exc, f"cannot produce to {topic}") from exc

    def produce_many(self, topic: str, values: Sequence[bytes], key: bytes | None,
                     on_done: Callable[[KafkaError | None, KafkaMessage], None]) -> None:
        """Records of one key without headers in one call (librdkafka's batch produce: one lock and one wake-up of
        the broker thread for them all, where a kafka-mq-go-format consumer wrote two records per message);
        ``on_done`` is called for each. What librdkafka's queue cannot take now is produced one by one."""
        batch: list[dict[str, Any]] = [{"value": value, "key": key} for value in values]
        if self._producer.produce_batch(topic, batch, on_delivery=on_done) == len(batch):
            return
        for message in batch:
            if "_error" in message:
                self.produce(topic, message["value"], key, on_done=on_done)  # waits for room; raises the rest

    def produce_future(self, topic: str, value: bytes, key: bytes | None,
                       headers: Sequence[tuple[str, bytes]] | None = None,
                       on_record: Callable[[KafkaMessage], None] | None = None, block: bool = True,
                       partition: int | None = None) -> Delivery[MessageId]:
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

        self.produce(topic, value, key, headers, done, partition=partition, block=block)
        return delivery

    def wait(self, delivery: Delivery[Any], timeout_s: float) -> bool:
        """Waits up to ``timeout_s`` for ``delivery`` without lingering: while a flush runs librdkafka sends what
        it holds at once (``linger.ms``, which makes ``send_async`` batches, is ignored), so a synchronous send
        costs one round trip instead of linger + round trip. Flushes in short slices, so the wait ends with this
        record's report, not with everything queued by other threads. True once done."""
        started = time.monotonic()
        with self._lock:
            self._waiters += 1
        try:
            while not delivery.done():
                waited = time.monotonic() - started
                if waited >= timeout_s:
                    return False
                self._producer.flush(min(timeout_s - waited, FLUSH_SLICE_S if waited < LONG_WAIT_S else LONG_SLICE_S))
            return True
        finally:
            with self._lock:
                self._waiters -= 1

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
