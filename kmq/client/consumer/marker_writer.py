"""MarkerWriter: writes one queue's markers, in the configured marker format.

Starts are written when the consumer asks, one record per batch (``kmq``) or per message (``kafka-mq-go``), and
each record gives a Delivery to wait on. Once a Start or keep-alive record is durable, ``on_durable`` learns its
message ids and broker append time (what the tracker's deadline for them is counted from), and ``broker_time``
learns how promptly the broker took it. Settles (ack, keep-alive, release, reject, the tracker's Ends) are O(1)
appends to a buffer; a writer thread turns the buffer into records every ``settle_linger_ms`` or as soon as
``settle_batch_size`` settles wait. Within one write, keep-alives apply before releases and Ends, and those before
acks, so a keep-alive that raced with a settle of the same message never outlives it.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from kmq._kafka.producer import MarkerProducer
from kmq._kafka.records import log_append_time_ms
from kmq._util import take_all
from kmq.client.consumer.broker_time import BrokerTime
from kmq.client.consumer.reference_policy import ReferencePolicy
from kmq.config import MARKER_FORMAT_KMQ, Config
from kmq.delivery import Delivery
from kmq.errors import DeliveryError, KmqError
from kmq.wire import DELAY_REASON, RELEASE_REASON, RETURN_REASON, MessageId, deduplicated_reason
from kmq.wire.marker_batch import (
    START_OVERHEAD_BYTES,
    Startable,
    encode_hello,
    encode_settles,
    encode_starts,
    start_size,
)
from kmq.wire.markers import EndReason, Marker, MarkerType, encode, encode_end, encode_keep_alive, encode_start

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

#: How long the writer thread sleeps when nothing waits (a settle arriving then waits at most this long).
IDLE_WAIT_S = 0.05
#: Entries of packed id lists per settle record; ~20 B each keeps a record far below the broker's 1 MB limit.
MAX_SETTLES_PER_RECORD = 20_000

#: Told the ids of a durable Start or keep-alive record and the broker time it was appended at (ms).
Durable = Callable[[Sequence[MessageId], int], None]


def _ignore(_ids: Sequence[MessageId], _appended_ms: int) -> None:
    pass


class MarkerWriter:
    """One queue's marker output. ``start`` from the loop thread; settles from any thread."""

    def __init__(self, config: Config, topic: str, key: bytes, producer: MarkerProducer, *, instance_id: str = "",
                 client_id: str = "") -> None:
        self._topic = topic
        self._key = key
        self._producer = producer
        self._batched = config.marker_format == MARKER_FORMAT_KMQ
        self._after_ms = config.redelivery_timeout_ms
        self._linger_s = config.settle_linger_ms / 1000
        self._batch_size = config.settle_batch_size
        # A Start batch may grow to one payload's worth beyond this: a record of max_payload_bytes alone must fit.
        self._start_record_bytes = config.max_payload_bytes
        #: Which Starts name their record instead of copying it (kmq format); None: all copy. Set by the consumer
        #: once it knows the topics' retention, before its first Start.
        self.references: ReferencePolicy | None = None
        self._client_id = client_id
        self._instance_id = instance_id
        self._acks: deque[MessageId] = deque()
        self._keep_alives: deque[MessageId] = deque()
        self._others: deque[Marker] = deque()
        self._drain_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        #: Settle markers whose record failed to be written, since the start.
        self.undelivered = 0
        self.broker_time = BrokerTime()
        self.on_durable: Durable = _ignore
        self._thread = threading.Thread(target=self._run, name=f"kmq-markers-{key.decode(errors='replace')}",
                                        daemon=True)
        self._thread.start()

    # --- Starts -------------------------------------------------------------------------------------------

    def start(self, messages: Sequence[Startable]) -> list[Delivery[MessageId]]:
        """Writes the Starts of ``messages``; the batch may be handed out once every Delivery succeeded."""
        if not messages:
            return []
        if not self._batched:
            return [self._write_plain_starts(messages)]
        copies, refs = self.references.split(messages) if self.references is not None else (messages, ())
        deliveries = []
        chunk: list[Startable] = []
        size = 0
        for message in copies:
            cost = start_size(message)
            if chunk and size + cost > self._start_record_bytes:
                deliveries.append(self._write_starts(chunk, ()))
                chunk, size = [], 0
            chunk.append(message)
            size += cost
        # References cost at most START_OVERHEAD_BYTES each: they fill the last record, then records of their own.
        room = max(0, self._start_record_bytes - size) // START_OVERHEAD_BYTES
        step = max(1, self._start_record_bytes // START_OVERHEAD_BYTES)
        if chunk or refs:
            deliveries.append(self._write_starts(chunk, refs[:room]))
        for at in range(room, len(refs), step):
            deliveries.append(self._write_starts((), refs[at:at + step]))
        return deliveries

    def _write_starts(self, chunk: Sequence[Startable], refs: Sequence[Startable]) -> Delivery[MessageId]:
        value = encode_starts(self._key, self._after_ms, chunk, refs=refs, client_id=self._client_id,
                              instance_id=self._instance_id)
        ids = [m.message_id for m in (*chunk, *refs)]  # every message this record Starts, by copy or reference
        sent_at = time.monotonic()
        return self._producer.produce_future(self._topic, value, self._key,
                                             on_record=lambda record: self._durable(ids, sent_at, record))

    def _write_plain_starts(self, messages: Sequence[Startable]) -> Delivery[MessageId]:
        """One record per Start, one Delivery for them all: done when the last is, failed if any failed."""
        delivery: Delivery[MessageId] = Delivery()
        reported = itertools.count(1)  # next() is atomic: callbacks may run on the poll thread and in flush()
        errors: list[BaseException] = []
        total = len(messages)
        sent_at = time.monotonic()

        ids = [m.message_id for m in messages]
        appended: list[int] = []

        def done(err: Any, record: Any) -> None:
            # One callback for the batch (librdkafka's batch produce): the messages' deadlines count from the
            # earliest append time among the batch's records, a few ms apart at most.
            if err is not None:
                errors.append(DeliveryError(f"delivery to {self._topic} failed: {err.str()}",
                                            retriable=err.retriable(), code=err.code()))
            elif (appended_ms := log_append_time_ms(record) if record is not None else 0):
                self.broker_time.observe(sent_at, appended_ms)
                appended.append(appended_ms)
            if next(reported) == total:
                if not errors and appended:
                    self.on_durable(ids, min(appended))
                delivery._set(None, errors[0] if errors else None)

        key, after, client_id, instance_id = self._key, self._after_ms, self._client_id, self._instance_id
        self._producer.produce_many(self._topic, [
            encode_start(m.message_id, after, key, m.payload, delivery_count=m.delivery_count,
                         first_message_id=m.first_message_id, enqueued_at_ms=m.enqueued_at_ms,
                         headers=m.record_headers.items(), client_id=client_id, instance_id=instance_id)
            for m in messages], key, done)
        return delivery

    def _durable(self, ids: Sequence[MessageId], sent_at: float, record: Any) -> None:
        appended_ms = log_append_time_ms(record) if record is not None else 0
        if appended_ms:
            self.broker_time.observe(sent_at, appended_ms)
            if ids:
                self.on_durable(ids, appended_ms)

    # --- settles (any thread: deque appends are atomic) -------------------------------------------------------

    def ack(self, message_id: MessageId) -> None:
        self._acks.append(message_id)
        if len(self._acks) >= self._batch_size:
            self._wake.set()

    def ack_many(self, message_ids: Sequence[MessageId]) -> None:
        self._acks.extend(message_ids)
        if len(self._acks) >= self._batch_size:
            self._wake.set()

    def keep_alive(self, message_id: MessageId) -> None:
        self._keep_alives.append(message_id)

    def release(self, message_id: MessageId, delay_ms: int) -> None:
        """A KeepAlive with the delay as deadline, then silence: the tracker (Go's too) redelivers after it."""
        self._others.append(Marker(MarkerType.KEEPALIVE, message_id, delay_ms, reason=RELEASE_REASON))

    def give_back(self, message_id: MessageId) -> None:
        """Like ``release(0)``, for a message no handler saw: a kmq tracker's copy keeps its delivery count."""
        self._others.append(Marker(MarkerType.KEEPALIVE, message_id, 0, reason=RETURN_REASON))

    def delay(self, message_id: MessageId, delay_ms: int) -> None:
        """For a message read before its due time: the tracker redelivers it after ``delay_ms``, count unchanged."""
        self._others.append(Marker(MarkerType.KEEPALIVE, message_id, delay_ms, reason=DELAY_REASON))

    def end(self, message_id: MessageId, end_reason: EndReason, reason: str = "") -> None:
        self._others.append(Marker(MarkerType.END, message_id, end_reason=end_reason, reason=reason))

    def deduplicated(self, duplicates: Sequence[tuple[MessageId, MessageId]]) -> Delivery[MessageId]:
        """Writes at once the End (deduplicated) of each (duplicate, the message it repeats), instead of a Start; the
        Delivery is done when all are durable, failed if any failed (nothing past them may be committed before)."""
        markers = [Marker(MarkerType.END, duplicate, end_reason=EndReason.REJECTED, reason=deduplicated_reason(of),
                          instance_id=self._instance_id) for duplicate, of in duplicates]
        if self._batched:
            value = encode_settles(self._key, self._after_ms, others=markers, client_id=self._client_id,
                                   instance_id=self._instance_id)
            return self._producer.produce_future(self._topic, value, self._key)
        delivery: Delivery[MessageId] = Delivery()
        reported = itertools.count(1)
        errors: list[BaseException] = []

        def done(err: Any, _record: Any) -> None:
            if err is not None:
                errors.append(DeliveryError(f"delivery to {self._topic} failed: {err.str()}",
                                            retriable=err.retriable(), code=err.code()))
            if next(reported) == len(markers):
                delivery._set(None, errors[0] if errors else None)

        self._producer.produce_many(self._topic, [encode(m) for m in markers], self._key, done)
        return delivery

    def hello(self) -> None:
        """Announces this (re)started consumer: a kmq tracker redelivers at once what earlier instances of the same
        ``client_id`` still hold (kmq format only: kafka-mq-go's trackers would count the record as malformed)."""
        if self._batched and self._client_id:
            self._produce(encode_hello(self._key, self._client_id, self._instance_id), 0)

    def flush(self, timeout_s: float) -> int:
        """Writes every settle appended so far and waits until all records are durable; returns how many
        records are not."""
        self._drain()
        return self._producer.flush(timeout_s)

    def close(self, timeout_s: float) -> int:
        """Stops the writer thread after a last write; returns how many records are not durable."""
        self._stop.set()
        self._wake.set()
        self._thread.join()
        return self.flush(timeout_s)

    # --- the writer thread ----------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            waiting = self._acks or self._keep_alives or self._others
            self._wake.wait(self._linger_s if waiting else IDLE_WAIT_S)
            self._wake.clear()
            self._drain()

    def _drain(self) -> None:
        with self._drain_lock:
            keep_alives, others, acks = take_all(self._keep_alives), take_all(self._others), take_all(self._acks)
            if not (keep_alives or others or acks):
                return
            try:
                if self._batched:
                    self._write_batches(keep_alives, others, acks)
                else:
                    self._write_plain(keep_alives, others, acks)
            except KmqError as err:
                # librdkafka refused the records outright (e.g. the topic is gone): they are lost, not retried,
                # and the writer thread must live on for the next settles.
                lost = len(keep_alives) + len(others) + len(acks)
                self.undelivered += lost
                log.error("markers_not_written", queue=self._key.decode(errors="replace"), markers=lost,
                          error=str(err))

    def _write_plain(self, keep_alives: list[MessageId], others: list[Marker], acks: list[MessageId]) -> None:
        produce, topic, key, after = self._producer.produce, self._topic, self._key, self._after_ms
        for message_id in keep_alives:  # one record each, so each reports its own message's new deadline
            produce(topic, encode_keep_alive(message_id, after), key, on_done=self._reporter(1, (message_id,)))
        values = [encode(marker) for marker in others]
        values += [encode_end(message_id, self._instance_id) for message_id in acks]
        if values:
            self._producer.produce_many(topic, values, key, self._one_delivered)

    def _write_batches(self, keep_alives: list[MessageId], others: list[Marker], acks: list[MessageId]) -> None:
        step = MAX_SETTLES_PER_RECORD
        for i in range(0, max(len(keep_alives), len(others), len(acks)), step):
            part_k, part_o, part_a = keep_alives[i:i + step], others[i:i + step], acks[i:i + step]
            value = encode_settles(self._key, self._after_ms, keep_alives=part_k, acks=part_a, others=part_o,
                                   client_id=self._client_id, instance_id=self._instance_id)
            self._produce(value, len(part_k) + len(part_o) + len(part_a), part_k)

    def _one_delivered(self, err: Any, _record: Any) -> None:
        if err is not None:
            self.undelivered += 1
            log.error("markers_not_delivered", queue=self._key.decode(errors="replace"), markers=1, error=err.str())

    def _reporter(self, count: int, kept_alive: Sequence[MessageId]) -> Callable[[Any, Any], None]:
        """The delivery callback of a settle record of ``count`` markers, ``kept_alive`` among them."""
        sent_at = time.monotonic()

        def done(err: Any, record: Any) -> None:
            if err is not None:
                self.undelivered += count
                log.error("markers_not_delivered", queue=self._key.decode(errors="replace"), markers=count,
                          error=err.str())
            else:
                self._durable(kept_alive, sent_at, record)
        return done

    def _produce(self, value: bytes, count: int, kept_alive: Sequence[MessageId] = ()) -> None:
        self._producer.produce(self._topic, value, self._key, on_done=self._reporter(count, kept_alive))
