"""Consumer: reads one logical queue, writes Start markers, commits, hands out Messages, keeps them alive.

Data path per poll batch: consume → keep this queue's records → Start markers (async, one wait for all)
→ one offset commit → hand out. A background thread owns the Kafka consumer and never blocks on workers:
when the receive buffer or the in-flight limit is full it pauses fetching but keeps polling.
"""

from __future__ import annotations

import queue as stdqueue
import threading
import time
from collections import deque
from collections.abc import Iterator
from types import TracebackType

import structlog
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka import Message as KafkaMessage

from kmq import _kafka
from kmq._kafka import PolledProducer
from kmq.config import Config
from kmq.errors import ConsumerClosedError, DeliveryError, KafkaClientError, KmqError, TopicError
from kmq.markers import RELEASE_REASON, EndReason, Marker, MarkerType, MessageId, encode
from kmq.message import Message

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

MAX_BATCH = 500
BACKLOG_MAX = 2_000
IDLE_COMMIT_S = 5.0
COMMIT_ATTEMPTS = 3
CLIENT_WARNING_EVERY_S = 30.0


class Consumer:
    """Receives messages of one queue (consumer group ``kafka-mq-<queue>``). Thread-safe.

    ``receive(timeout)`` returns a Message or None; iterate with ``for msg in consumer``. ``close()`` releases
    every unsettled message for prompt redelivery, flushes markers, commits and leaves the group.
    """

    def __init__(self, config: Config, queue: str) -> None:
        self._config = config
        self._queue = queue
        self._key = queue.encode()
        self._log = log.bind(queue=queue)
        self._instance_id = config.client_id or f"{queue}-{id(self):x}"
        self._markers = PolledProducer(
            _kafka.markers_producer_settings(config, f"kmq-markers-{queue}"), f"markers-{queue}")
        self._fatal: KmqError | None = None
        self._kafka = KafkaConsumer({
            **_kafka.consumer_settings(config, _kafka.consumer_group(queue), f"kmq-consumer-{queue}"),
            "error_cb": self._on_client_error,
        })
        self._lock = threading.Lock()
        self._in_flight: dict[MessageId, Message] = {}
        self._buffer: stdqueue.SimpleQueue[Message] = stdqueue.SimpleQueue()
        self._pending: dict[TopicPartition, int] = {}
        self._backlog: deque[KafkaMessage] = deque()
        self._uncommitted = 0
        self._last_commit = time.monotonic()
        self._paused = False
        self._closed = False
        self._stop = threading.Event()
        self._room_freed = threading.Event()
        self._waiting_for_room = False
        self.rebalances = 0
        #: Records read from the messages topic, this queue's and others' (read amplification).
        self.records_read = 0
        self._last_client_warning = 0.0
        self._assigned: frozenset[int] = frozenset()
        try:
            self._check_topics()
            self._kafka.subscribe([config.message_topic], on_assign=self._on_assign,
                                  on_revoke=self._on_revoke, on_lost=self._on_lost)
        except BaseException:
            self._kafka.close()
            self._markers.close(0)
            raise
        self._loop_thread = threading.Thread(target=self._loop, name=f"kmq-consumer-{queue}", daemon=True)
        self._keep_alive_thread = threading.Thread(target=self._keep_alive_loop,
                                                   name=f"kmq-keepalive-{queue}", daemon=True)
        self._loop_thread.start()
        self._keep_alive_thread.start()

    # --- the worker's side --------------------------------------------------------------------------

    @property
    def queue(self) -> str:
        return self._queue

    @property
    def assignment(self) -> frozenset[int]:
        """Messages-topic partitions this consumer owns now."""
        return self._assigned

    @property
    def fetch_paused(self) -> bool:
        """True while fetching is paused because the local backlog of read records is full."""
        return self._paused

    @property
    def in_flight(self) -> int:
        """Messages read and not yet settled (buffered or handed out)."""
        return len(self._in_flight)

    def receive(self, timeout: float | None = None) -> Message | None:
        """The next message, or None after ``timeout`` seconds (None waits for ever)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._fatal is not None:
                raise self._fatal
            if self._closed:
                raise ConsumerClosedError(f"consumer of queue {self._queue!r} is closed")
            wait = 0.2 if deadline is None else min(0.2, max(0.0, deadline - time.monotonic()))
            try:
                msg = self._buffer.get(timeout=wait)
                self._wake_loop()
                return msg
            except stdqueue.Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    return None

    def __iter__(self) -> Iterator[Message]:
        while not self._closed:
            try:
                msg = self.receive(0.5)
            except ConsumerClosedError:
                return
            if msg is not None:
                yield msg

    def flush(self, timeout: float = 30.0) -> int:
        """Waits until every marker written so far (acks included) is durable; returns how many are not."""
        return self._markers.flush(timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Stops fetching, releases unsettled messages, flushes markers, commits and leaves the group."""
        if self._closed:
            return
        self._stop.set()
        self._loop_thread.join()
        with self._lock:
            self._closed = True
            unsettled = list(self._in_flight.values())
            self._in_flight.clear()
        for msg in unsettled:
            self._send_marker(self._marker(MarkerType.KEEPALIVE, msg.message_id, reason=RELEASE_REASON))
        if unsettled:
            self._log.info("consumer_close_released", released=len(unsettled))
        remaining = self._markers.close(timeout)
        if remaining:
            self._log.error("markers_undelivered_at_close", undelivered=remaining)
        if self._pending and self._fatal is None:
            self._commit()
        self._kafka.close()
        self._keep_alive_thread.join()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # --- Message's settle calls (any thread) ----------------------------------------------------------

    def _ack(self, message: Message) -> None:
        self._finish(message, self._marker(MarkerType.END, message.message_id))

    def _release(self, message: Message, delay_ms: int) -> None:
        # A KeepAlive with the delay, then silence: the tracker (Go's too) redelivers after it.
        self._finish(message, self._marker(MarkerType.KEEPALIVE, message.message_id, delay_ms,
                                           reason=RELEASE_REASON))

    def _reject(self, message: Message, reason: str) -> None:
        self._check_open(message)
        headers = [*message.headers.items(), *_kafka_headers(message),
                   (_kafka.HEADER_DLQ_REASON, (reason or "rejected").encode()),
                   (_kafka.HEADER_DLQ_QUEUE, self._key)]
        try:
            self._markers.produce_future(self._config.dlq_topic, message.payload, self._key, headers).result(
                self._config.connect_timeout_ms / 1000 + 20)
        except Exception as err:
            message._unsettle()
            raise DeliveryError(f"cannot dead-letter message {message.message_id} of queue {self._queue!r} "
                                f"to {self._config.dlq_topic!r}: {err}") from err
        self._finish(message, self._marker(MarkerType.END, message.message_id,
                                           end_reason=EndReason.REJECTED, reason=reason))

    def _keep_alive(self, message: Message) -> None:
        self._check_open(message)
        message._next_keep_alive = time.monotonic() + self._config.keep_alive_interval_ms / 1000
        self._send_marker(self._marker(MarkerType.KEEPALIVE, message.message_id,
                                       self._config.redelivery_timeout_ms))

    def _finish(self, message: Message, marker: Marker) -> None:
        with self._lock:
            self._check_open(message)
            self._in_flight.pop(message.message_id, None)
        self._send_marker(marker)
        self._wake_loop()

    def _wake_loop(self) -> None:
        # Event.set takes a condition lock: only pay for it when the loop is actually waiting for room.
        if self._waiting_for_room:
            self._room_freed.set()

    def _check_open(self, message: Message) -> None:
        if self._closed:
            message._unsettle()
            raise ConsumerClosedError(f"cannot settle message {message.message_id}: the consumer of queue "
                                      f"{self._queue!r} is closed (it was released for redelivery)")

    def _marker(self, kind: MarkerType, message_id: MessageId, redeliver_after_ms: int = 0,
                end_reason: EndReason = EndReason.ACKED, reason: str = "") -> Marker:
        return Marker(kind, message_id, redeliver_after_ms, end_reason=end_reason, reason=reason,
                      client_id=self._config.client_id, instance_id=self._instance_id)

    def _send_marker(self, marker: Marker) -> None:
        def done(err: KafkaError | None, _record: KafkaMessage) -> None:
            if err is not None:
                self._log.error("marker_not_delivered", marker=marker.type.name,
                                message_id=str(marker.message_id), error=err.str())

        self._markers.produce(self._config.marker_topic, encode(marker), self._key, on_done=done)

    # --- background: keep-alive ------------------------------------------------------------------------

    def _keep_alive_loop(self) -> None:
        interval_s = self._config.keep_alive_interval_ms / 1000
        tick_s = max(0.01, min(interval_s / 5, 1.0))
        while not self._stop.wait(tick_s):
            now = time.monotonic()
            with self._lock:
                due = [m for m in self._in_flight.values() if m._next_keep_alive <= now]
            for msg in due:
                msg._next_keep_alive = now + interval_s
                self._send_marker(self._marker(MarkerType.KEEPALIVE, msg.message_id,
                                               self._config.redelivery_timeout_ms))

    # --- background: the poll loop (owns the Kafka consumer) --------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set() and self._fatal is None:
            try:
                self._poll_once()
            except KmqError as err:
                self._log.error("consumer_fatal", error=str(err))
                self._fatal = err
            except KafkaException as exc:
                wrapped = _kafka.raise_from(exc, f"consumer of queue {self._queue!r}")
                if exc.args and isinstance(exc.args[0], KafkaError) and exc.args[0].fatal():
                    self._fatal = wrapped
                self._log.warning("consumer_poll_error", error=str(wrapped))
                time.sleep(0.2)

    def _room(self) -> int:
        buffered = self._buffer.qsize()
        return min(self._config.receive_buffer_capacity - buffered, self._config.max_in_flight - self.in_flight)

    def _usable_room(self) -> int:
        room = self._room()
        # A Start batch and a commit cost the same for 1 record or 100: while the workers still have buffered
        # messages to get through, wait for a quarter of the room instead of Starting records one by one.
        limit = min(self._config.receive_buffer_capacity, self._config.max_in_flight)
        if 0 < room < max(1, limit // 4) and not self._buffer.empty():
            return 0
        return room

    def _poll_once(self) -> None:
        room = self._usable_room()
        # Records wait in a local backlog while the workers are busy; fetching pauses only when it is long,
        # because every pause/resume costs a fetch round trip.
        backlog = len(self._backlog)
        self._set_paused(backlog >= BACKLOG_MAX or (self._paused and backlog > BACKLOG_MAX // 2))
        wait_s = 0.0 if backlog else self._config.next_message_timeout_ms / 1000
        if room <= 0:
            # Full: sleep until a message is settled, but still poll (the group must not evict us).
            self._waiting_for_room = True
            if self._usable_room() <= 0:  # re-check: a settle before the flag was set would not wake us
                self._room_freed.wait(0.1)
            self._waiting_for_room = False
            self._room_freed.clear()
            wait_s = 0.0
        fetched = self._fetch(wait_s)  # may run rebalance callbacks, which replace self._backlog
        self._backlog.extend(fetched)
        if room > 0 and self._backlog:
            self._process(self._take(room))
        else:
            self._maybe_commit_idle()

    def _fetch(self, wait_s: float) -> list[KafkaMessage]:
        # poll() returns the first record as soon as it arrives; consume(n, 0) then takes what is already
        # fetched. consume(n, timeout) alone would wait the whole timeout for n records.
        first = self._kafka.poll(wait_s)
        if first is None:
            return []
        records = [first, *self._kafka.consume(MAX_BATCH - 1, 0)]
        self.records_read += len(records)
        good = []
        for record in records:
            if record.error() is not None:
                self._on_record_error(record)
            else:
                good.append(record)
        return good

    def _take(self, room: int) -> list[KafkaMessage]:
        """Records from the backlog's front, up to ``room`` of this queue's (other queues' ride along)."""
        taken: list[KafkaMessage] = []
        own = 0
        while self._backlog and own < room:
            record = self._backlog.popleft()
            own += record.key() == self._key
            taken.append(record)
        return taken

    def _process(self, records: list[KafkaMessage]) -> None:
        own: list[KafkaMessage] = []
        for record in records:
            self._pending[_kafka.topic_partition(record)] = (record.offset() or 0) + 1
            if record.key() == self._key:
                own.append(record)
        self._uncommitted += len(records)
        if own:
            self._deliver(records, own)
        elif self._uncommitted >= self._config.max_messages_per_commit:
            self._commit()
        else:
            self._maybe_commit_idle()

    def _deliver(self, records: list[KafkaMessage], own: list[KafkaMessage]) -> None:
        messages = [self._to_message(r) for r in own]
        futures = [self._markers.produce_future(self._config.marker_topic, encode(self._start(m)), self._key)
                   for m in messages]
        wait_s = self._config.connect_timeout_ms / 1000 + 20
        try:
            for future in futures:
                future.result(wait_s)
        except Exception as err:  # noqa: BLE001 - any failure: nothing handed out, records re-read
            self._log.warning("start_markers_failed", error=str(err), batch=len(own))
            self._rewind(records)
            return
        if not self._commit():
            # Not handed out. Still ours: read again (a second Start only refreshes the tracker's deadline).
            # Not ours: the new owner reads them from the last commit.
            self._rewind(records)
            return
        now = time.monotonic()
        interval_s = self._config.keep_alive_interval_ms / 1000
        with self._lock:
            for msg in messages:
                msg._next_keep_alive = now + interval_s
                self._in_flight[msg.message_id] = msg
        for msg in messages:
            self._buffer.put(msg)

    def _start(self, msg: Message) -> Marker:
        return Marker(MarkerType.START, msg.message_id, self._config.redelivery_timeout_ms, self._key,
                      msg.payload, delivery_count=msg.delivery_count, first_message_id=msg.first_message_id,
                      enqueued_at_ms=msg.enqueued_at_ms, headers=tuple(msg.headers.items()),
                      client_id=self._config.client_id, instance_id=self._instance_id)

    def _to_message(self, record: KafkaMessage) -> Message:
        raw = _kafka.header_dict(record)
        headers = {k: v for k, v in raw.items() if not k.startswith(_kafka.RESERVED_HEADER_PREFIX)}
        msg_id = _kafka.message_id(record)
        first = raw.get(_kafka.HEADER_FIRST_ID)
        enqueued = raw.get(_kafka.HEADER_ENQUEUED_AT)
        return Message(
            payload=record.value() or b"", headers=headers, queue=self._queue, message_id=msg_id,
            delivery_count=int(raw.get(_kafka.HEADER_DELIVERY_COUNT, b"1")),
            first_message_id=MessageId.parse(first.decode()) if first else msg_id,
            enqueued_at_ms=int(enqueued) if enqueued else _kafka.record_timestamp_ms(record),
            _settler=self,
        )

    def _rewind(self, records: list[KafkaMessage]) -> None:
        """Puts a batch that was not handed out back at the front of the backlog, to be Started (again: the
        tracker takes a second Start as a fresh deadline) and committed on the next turn. No seek: the records
        are still here. If their partition is revoked meanwhile, the next owner reads them from the last commit.
        """
        first: dict[TopicPartition, int] = {}
        for record in records:
            tp = _kafka.topic_partition(record)
            first[tp] = min(first.get(tp, 1 << 62), record.offset() or 0)
        self._pending.update(first)
        self._backlog.extendleft(reversed(records))
        time.sleep(0.2)

    def _commit(self) -> bool:
        """Commits the consumed offsets; False if they were not committed (the batch must not be handed out)."""
        offsets = [TopicPartition(tp.topic, tp.partition, off) for tp, off in self._pending.items()]
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            try:
                results = self._kafka.commit(offsets=offsets, asynchronous=False) or []
                errors = [tp.error for tp in results if tp.error is not None]
                if not errors:
                    break
                error: KafkaError = errors[0]
            except KafkaException as exc:
                error = exc.args[0]
            if error.code() in _kafka.OWNERSHIP_LOST:
                self._log.info("commit_fenced", error=error.str())
                self._pending.clear()
                return False
            self._log.warning("commit_failed", error=error.str(), attempt=attempt)
            time.sleep(0.2 * attempt)
        else:
            return False
        self._pending.clear()
        self._uncommitted = 0
        self._last_commit = time.monotonic()
        return True

    def _maybe_commit_idle(self) -> None:
        if self._pending and time.monotonic() - self._last_commit > IDLE_COMMIT_S:
            self._commit()

    def _set_paused(self, paused: bool) -> None:
        if paused == self._paused:
            return
        assignment = self._kafka.assignment()
        if paused:
            self._kafka.pause(assignment)
        else:
            self._kafka.resume(assignment)
        self._paused = paused

    def _on_record_error(self, record: KafkaMessage) -> None:
        err = record.error()
        assert err is not None
        if _kafka.is_fatal(err):
            raise _fatal_error(err, self._config, self._queue)
        self._log.warning("consume_error", error=err.str(), code=err.name())

    def _on_client_error(self, err: KafkaError) -> None:
        if _kafka.is_fatal(err):
            self._fatal = _fatal_error(err, self._config, self._queue)
            self._log.error("consumer_fatal", error=str(self._fatal))
        elif time.monotonic() - self._last_client_warning > CLIENT_WARNING_EVERY_S:
            # Connection errors repeat many times a second while a broker is down: say it now and then.
            self._last_client_warning = time.monotonic()
            self._log.warning("kafka_client_error", error=err.str(), code=err.name())

    # --- rebalances (run inside consume(), on the loop thread) -----------------------------------------

    def _on_assign(self, consumer: KafkaConsumer, partitions: list[TopicPartition]) -> None:
        self.rebalances += 1
        consumer.incremental_assign(partitions)
        self._assigned = self._assigned | {p.partition for p in partitions}
        # Set both ways: librdkafka keeps a partition's paused flag across revoke/lost and re-assignment, so a
        # partition paused before it left would come back paused after the rest were resumed, and never be read.
        if self._paused:
            consumer.pause(partitions)
        else:
            consumer.resume(partitions)
        self._log.info("partitions_assigned", partitions=[p.partition for p in partitions])

    def _on_revoke(self, consumer: KafkaConsumer, partitions: list[TopicPartition]) -> None:
        self.rebalances += 1
        revoked = {(p.topic, p.partition) for p in partitions}
        mine = [TopicPartition(tp.topic, tp.partition, off) for tp, off in self._pending.items()
                if (tp.topic, tp.partition) in revoked]
        if mine:
            try:
                consumer.commit(offsets=mine, asynchronous=False)
            except KafkaException as exc:
                self._log.warning("commit_on_revoke_failed", error=str(exc))
        self._forget(revoked)
        consumer.incremental_unassign(partitions)
        self._assigned = self._assigned - {p.partition for p in partitions}
        self._log.info("partitions_revoked", partitions=[p.partition for p in partitions])

    def _on_lost(self, consumer: KafkaConsumer, partitions: list[TopicPartition]) -> None:
        self._forget({(p.topic, p.partition) for p in partitions})
        consumer.incremental_unassign(partitions)
        self._assigned = self._assigned - {p.partition for p in partitions}
        self._log.warning("partitions_lost", partitions=[p.partition for p in partitions])

    def _forget(self, gone: set[tuple[str, int]]) -> None:
        # Neither committed nor Started: the partition's next owner reads these records again.
        self._pending = {tp: off for tp, off in self._pending.items() if (tp.topic, tp.partition) not in gone}
        kept = [r for r in self._backlog if (r.topic(), r.partition()) not in gone]
        self._backlog.clear()  # in place: a caller may hold the deque (this runs inside poll)
        self._backlog.extend(kept)

    def _check_topics(self) -> None:
        topic = self._config.message_topic
        try:
            meta = self._kafka.list_topics(topic, timeout=self._config.connect_timeout_ms / 1000)
        except KafkaException as exc:
            raise KafkaClientError(f"cannot reach Kafka at {self._config.bootstrap_servers} within "
                                   f"{self._config.connect_timeout_ms} ms: {exc}", retriable=True) from exc
        info = meta.topics.get(topic)
        if info is None or info.error is not None:
            raise TopicError(f"message topic {topic!r} does not exist: create it with `kmq topics create`")


def _kafka_headers(message: Message) -> list[tuple[str, bytes]]:
    return [(_kafka.HEADER_DELIVERY_COUNT, str(message.delivery_count).encode()),
            (_kafka.HEADER_FIRST_ID, str(message.first_message_id).encode()),
            (_kafka.HEADER_ENQUEUED_AT, str(message.enqueued_at_ms).encode())]


def _fatal_error(err: KafkaError, config: Config, queue: str) -> KafkaClientError:
    if err.code() == KafkaError.FENCED_INSTANCE_ID or "fenced" in err.str().lower():
        return KafkaClientError(f"consumer of queue {queue!r} was fenced: client_id (group.instance.id) "
                                f"{config.client_id!r} is used by another consumer", code=err.code())
    return _kafka.client_error(err, f"fatal Kafka error in consumer of queue {queue!r}")
