"""Producer: puts payloads on one logical queue (record key = queue id) of the shared messages topic."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from types import TracebackType
from typing import Any, NamedTuple

import structlog

from kmq import _kafka, otel, wire
from kmq.config import Config
from kmq.delivery import Delivery
from kmq.errors import DeliveryError, KmqError, PayloadError, PayloadTooLargeError
from kmq.wire import MessageId
from kmq.wire.partitioning import partition_for

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

Payload = bytes | bytearray | memoryview
HeadersIn = Mapping[str, bytes | str] | None
DeliveryCallback = Callable[[KmqError | None, MessageId | None], None]


class OutgoingRecord(NamedTuple):
    """One send, checked and ready to produce: the value, every header, its ``send`` span when tracing, and its
    partition when its key chooses one (None: librdkafka's random partitioner)."""

    data: bytes
    headers: list[tuple[str, bytes]]
    span: Any = None
    partition: int | None = None


def check_payload(payload: object, limit: int) -> bytes:
    if not isinstance(payload, bytes | bytearray | memoryview):
        raise PayloadError(f"payload must be bytes-like, got {type(payload).__name__}; encode it first")
    data = bytes(payload)
    if len(data) > limit:
        raise PayloadTooLargeError(len(data), limit)
    return data


def _seconds(name: str, value: object, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or (positive and value == 0):
        raise PayloadError(f"{name} must be a {'positive' if positive else 'non-negative'} number of seconds, "
                           f"got {value!r}")
    return float(value)


def due_time_ms(delay: float | None, deliver_at: datetime | None) -> int | None:
    """The ``kmq-deliver-at-ms`` of a send with ``delay`` (seconds) or ``deliver_at`` (an aware datetime); rounded
    up, so a due time is never before what was asked."""
    if delay is not None and deliver_at is not None:
        raise PayloadError("give delay or deliver_at, not both")
    if delay is not None:
        return wire.ms_after(_seconds("delay", delay, positive=False))
    if deliver_at is not None:
        if not isinstance(deliver_at, datetime) or deliver_at.tzinfo is None:
            raise PayloadError(f"deliver_at must be a timezone-aware datetime, got {deliver_at!r}")
        return wire.ms_from_datetime(deliver_at)
    return None


def option_headers(*, time_limit: float | None, deliver_at_ms: int | None,
                   expires_at_ms: int | None) -> list[tuple[str, bytes]]:
    """The kmq headers of a send's options (they travel with the payload through Starts and copies)."""
    out: list[tuple[str, bytes]] = []
    if time_limit is not None:
        limit_s = _seconds("time_limit", time_limit, positive=True)
        out.append((wire.HEADER_TIME_LIMIT, str(wire.ms_from_seconds(limit_s)).encode()))
    if deliver_at_ms is not None:
        out.append((wire.HEADER_DELIVER_AT, str(deliver_at_ms).encode()))
    if expires_at_ms is not None:
        out.append((wire.HEADER_EXPIRES_AT, str(expires_at_ms).encode()))
    return out


def check_headers(headers: HeadersIn) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    for key, value in (headers or {}).items():
        if not isinstance(key, str) or not key:
            raise PayloadError(f"header names must be non-empty strings, got {key!r}")
        if key.startswith(wire.RESERVED_HEADER_PREFIX):
            raise PayloadError(f"header {key!r}: the prefix {wire.RESERVED_HEADER_PREFIX!r} is reserved for kmq")
        if isinstance(value, str):
            value = value.encode()
        if not isinstance(value, bytes):
            raise PayloadError(f"header {key!r} must be bytes or str, got {type(value).__name__}")
        out.append((key, value))
    return out


def _ender(span: Any) -> Callable[[Delivery[MessageId]], None]:
    def end(done: Delivery[MessageId]) -> None:
        error = done.exception()
        otel.end_send(span, None if error else done.result(), error)

    return end


class Producer:
    """Sends messages to one queue. Thread-safe; use as a context manager or call ``close()``.

    ``send`` blocks until the record is durable (acks=all, idempotent); ``send_async`` returns a Future-like Delivery.
    """

    def __init__(self, config: Config, queue: str) -> None:
        self._config = config
        self._queue = queue
        self._key = queue.encode()
        #: Where this queue's messages go (routes: Config.topics_for).
        self._topics = config.topics_for(queue)
        self._client = _kafka.PolledProducer(
            _kafka.messages_producer_settings(config, f"kmq-producer-{queue}"), f"producer-{queue}",
            warm_topic=self._topics.messages, spread=True)
        self._closed = False
        self._default_ttl_ms = config.queue_ttl_ms.get(queue, 0)
        self._content_dedup = queue in config.content_dedup_queues
        #: The messages topic's partition count, looked up at the first send that needs it (a keyed send).
        self._partition_count = 0

    @property
    def queue(self) -> str:
        """The queue this producer sends to."""
        return self._queue

    def send_async(self, payload: Payload, headers: HeadersIn = None,
                   on_delivery: DeliveryCallback | None = None, *, time_limit: float | None = None,
                   delay: float | None = None, deliver_at: datetime | None = None,
                   ttl: float | None = None, dedup_id: str | None = None) -> Delivery[MessageId]:
        """Queues one message; the returned Future-like Delivery resolves to its MessageId once durable, or
        raises DeliveryError. ``time_limit`` (seconds) overrides the worker's handler time limit for it; ``delay``
        (seconds) or ``deliver_at`` (an aware datetime) hold it back from every handler until then; past ``ttl``
        seconds (default: the queue's ``queue_ttl_ms``) no handler gets it. A send whose ``dedup_id`` the queue
        saw less than ``dedup_window_ms`` before is accepted, and never handed to a handler
        (docs/concepts/dedup.md)."""
        data, out, span, partition = self._prepare(payload, headers, time_limit=time_limit, delay=delay,
                                                   deliver_at=deliver_at, ttl=ttl, dedup_id=dedup_id)
        if span is None:  # not tracing: the path of every send, kept as short as before
            future = self._client.produce_future(
                self._topics.messages, data, self._key, out,
                partition=self._client.next_partition() if partition is None else partition)
        else:
            future = self._produce(OutgoingRecord(data, out, span, partition))
        if on_delivery is not None:
            callback = on_delivery

            def report(done: Delivery[MessageId]) -> None:
                err = done.exception()
                callback(err if isinstance(err, KmqError) else None, None if err else done.result())

            future.add_done_callback(report)
        return future

    def _prepare(self, payload: Payload, headers: HeadersIn, *, time_limit: float | None, delay: float | None,
                 deliver_at: datetime | None, ttl: float | None, dedup_id: str | None = None) -> OutgoingRecord:
        """A send checked and made a record (kmq's option headers, the trace context when tracing), not produced
        yet: ``kmq.aio`` produces it when librdkafka's queue has room, without blocking its event loop."""
        if self._closed:
            raise KmqError(f"producer for queue {self._queue!r} is closed")
        data = check_payload(payload, self._config.max_payload_bytes)
        out = check_headers(headers)
        if dedup_id is not None:
            try:
                wire.validate_dedup_id(dedup_id)
            except ValueError as err:
                raise PayloadError(str(err)) from None
        elif self._content_dedup:
            dedup_id = wire.content_dedup_id(data, out)
        partition = None
        if dedup_id is not None:
            partition = self._partition_of(dedup_id)
            out.append((wire.HEADER_DEDUP_ID, dedup_id.encode()))
        if time_limit is not None or delay is not None or deliver_at is not None or ttl is not None \
                or self._default_ttl_ms:
            ttl_s = _seconds("ttl", ttl, positive=True) if ttl is not None else self._default_ttl_ms / 1000
            out += option_headers(time_limit=time_limit, deliver_at_ms=due_time_ms(delay, deliver_at),
                                  expires_at_ms=wire.ms_after(ttl_s) if ttl_s else None)
        tracing = otel.tracer()
        span = None if tracing is None else otel.start_send(tracing, self._topics.messages, self._queue, out)
        return OutgoingRecord(data, out, span, partition)

    def _partition_of(self, dedup_id: str) -> int:
        """The partition of a keyed send: its dedup key's, so one consumer of the queue sees every send of it
        (docs/concepts/dedup.md). A send's message group, once it has one, keys it instead (docs/concepts/groups.md):
        the one place that chooses."""
        return partition_for(self._queue, dedup_id, self._partition_count or self._partitions())

    def _partitions(self) -> int:
        """The messages topic's partition count, asked once (adding partitions moves keys: docs/concepts/dedup.md)."""
        if not self._partition_count:
            self._partition_count = len(_kafka.topic_partitions(self._client.client, self._config,
                                                                self._topics.messages, "message"))
        return self._partition_count

    def _needs_partitions(self, dedup_id: str | None) -> bool:
        """Whether a send would look the partition count up first."""
        return not self._partition_count and (dedup_id is not None or self._content_dedup)

    def _produce(self, record: OutgoingRecord, block: bool = True) -> Delivery[MessageId]:
        """Produces a prepared record. ``block=False``: raises BufferError while librdkafka's queue is full instead
        of waiting for room."""
        try:
            future = self._client.produce_future(
                self._topics.messages, record.data, self._key, record.headers, block=block,
                partition=self._client.next_partition() if record.partition is None else record.partition)
        except Exception as err:
            if record.span is not None and not isinstance(err, BufferError):  # a full queue: produced again later
                otel.end_send(record.span, None, err)
            raise
        if record.span is not None:
            future.add_done_callback(_ender(record.span))
        return future

    def send(self, payload: Payload, headers: HeadersIn = None, timeout: float | None = None, *,
             time_limit: float | None = None, delay: float | None = None,
             deliver_at: datetime | None = None, ttl: float | None = None, dedup_id: str | None = None) -> MessageId:
        """Sends one message and waits until it is durable; raises DeliveryError on failure or timeout. See
        ``send_async`` for the keyword options."""
        wait_s = timeout if timeout is not None else self._config.connect_timeout_ms / 1000 + 20
        future = self.send_async(payload, headers, time_limit=time_limit, delay=delay, deliver_at=deliver_at,
                                 ttl=ttl, dedup_id=dedup_id)
        if not self._client.wait(future, wait_s):
            raise DeliveryError(
                f"send to queue {self._queue!r} not acknowledged within {wait_s:.0f}s: "
                f"is Kafka reachable at {self._config.bootstrap_servers}?", retriable=True)
        return future.result(0)

    def flush(self, timeout: float = 30.0) -> int:
        """Waits for every queued message; returns how many are still undelivered after ``timeout``."""
        return self._client.flush(timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Flushes, then releases the client. Messages still undelivered after ``timeout`` are logged."""
        if self._closed:
            return
        self._closed = True
        remaining = self._client.close(timeout)
        if remaining:
            log.warning("producer_closed_with_undelivered", queue=self._queue, undelivered=remaining)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
