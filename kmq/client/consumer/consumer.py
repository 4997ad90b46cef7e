"""Consumer: reads one logical queue and hands out its messages; a facade over four named parts.

Data path: the **Intake** fetches records and holds the backlog (pausing fetching when it is long) → the
**StartPipeline** turns this queue's records into Messages, has the **MarkerWriter** write their Starts (one record
per batch), enters the batch's offsets in the **OffsetBook** once the Starts are durable, commits, and hands the
messages out → the worker settles each with an O(1) append to the MarkerWriter, which writes settles in batches.
A background thread owns the Kafka consumer and never blocks on workers; another writes keep-alives for every
message in flight (Started, buffered or handed out).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import TracebackType

import structlog
from confluent_kafka import KafkaError, KafkaException

from kmq import _kafka, wire
from kmq._kafka.commit_policy import CommitPolicy
from kmq._kafka.factory import ClientFactory, GroupClient, KafkaClients
from kmq._kafka.group import GroupMembership
from kmq._kafka.offsets import CommitOutcome
from kmq.client.consumer.deduplicator import Deduplicator, reader_read_back
from kmq.client.consumer.due_times import DueTimes
from kmq.client.consumer.hand_out import HandOut
from kmq.client.consumer.identity import ClientIdentity
from kmq.client.consumer.in_flight import AtMostOnceMessages, InFlightMessages
from kmq.client.consumer.intake import Intake, Record
from kmq.client.consumer.marker_writer import MarkerWriter
from kmq.client.consumer.offset_book import OffsetBook, TopicPartitionKey
from kmq.client.consumer.reference_policy import ReferencePolicy
from kmq.client.consumer.start_pipeline import StartPipeline, to_message
from kmq.client.message import Message
from kmq.config import Config
from kmq.errors import ConsumerClosedError, KafkaClientError, KmqError, UndeliveredMarkersError
from kmq.metrics_http import MetadataClient
from kmq.topic_sets import TopicSet
from kmq.wire.control import ControlState

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

IDLE_COMMIT_S = 5.0
CLIENT_WARNING_EVERY_S = 30.0


class Consumer:
    """Receives messages of one queue (consumer group ``kafka-mq-<queue>``). Thread-safe.

    ``receive(timeout)`` returns a Message or None, ``receive_many(n, timeout)`` a list; iterate with
    ``for msg in consumer``. ``close()`` releases every unsettled message for prompt redelivery, writes the
    outstanding markers, commits and leaves the group. ``max_in_flight``: the in-flight limit to start with, if
    lower than ``config.max_in_flight`` (see the property of that name). ``topics``: the topic set to read the
    queue in, by default the one it lives in (``Config.topics_for``); a queue moving to another set is read in
    each of ``Config.reading_sets(queue)`` by a consumer of its own (the Worker does so).
    """

    def __init__(self, config: Config, queue: str, *, max_in_flight: int | None = None,
                 clients: ClientFactory | None = None, topics: TopicSet | None = None) -> None:
        clients = clients or KafkaClients()
        self._config = config
        #: The topics and group it reads.
        self._topics = topics = topics or config.topics_for(queue)
        self._queue = queue
        self._key = queue.encode()
        self._log = log.bind(queue=queue)
        self._fatal: KmqError | None = None
        self._closed = False
        #: What ``close()`` settled itself: received but unsettled messages ``released`` (a handler may have started
        #: on them), never received ones ``returned`` (their delivery count unchanged).
        self.settled_at_close: dict[str, int] = {"released": 0, "returned": 0}
        #: False once ``stop_taking()``: no new message is Started (a draining worker).
        self._taking = True
        self._stop = threading.Event()
        self._last_client_warning = 0.0
        self._purged_up_to = 0
        #: The ready buffer and its back-pressure.
        self._out = HandOut(config.receive_buffer_capacity, config.max_in_flight)
        if max_in_flight is not None:  # before the loop starts: its first Starts already keep to it
            self._out.limit = max_in_flight
        #: Messages read before their due time and held until it (loop thread).
        self._due = DueTimes()
        self._keep_alive_s = config.keep_alive_interval_ms / 1000
        self._producer = clients.producer(
            _kafka.markers_producer_settings(config, f"kmq-markers-{queue}"), f"markers-{queue}", topics.markers)
        instance_id = _kafka.instance_id()
        self._writer = MarkerWriter(config, topics.markers, self._key, self._producer, instance_id=instance_id,
                                    client_id=config.client_id)
        self._in_flight = InFlightMessages(config, topics, queue, self._writer, self._producer, self._out.wake_loop)
        #: At-most-once queue: no Starts, so its messages settle through a settler that writes no markers.
        self._at_most_once = queue in config.at_most_once_queues
        self._settler: InFlightMessages | AtMostOnceMessages = (
            AtMostOnceMessages(config, topics, self._producer) if self._at_most_once else self._in_flight)
        self._membership = GroupMembership(
            topics.consumer_group(queue), config.assignment_strategy, eager=config.eager_rebalance,
            join_bound_s=config.connect_timeout_ms / 1000, on_revoking=self._on_revoking,
            on_dropped=self._on_dropped, on_changed=self._on_assignment_changed, logger=self._log)
        self._control = clients.control(config, topics, self._on_control)
        #: A stable client_id is claimed before the group is joined: a live twin refuses this consumer.
        self._identity = (ClientIdentity(config.client_id, instance_id, self._producer, self._control,
                                         config.connect_timeout_ms / 1000 + 20) if config.client_id else None)
        self._client = clients.group_consumer({
            **_kafka.consumer_settings(config, topics.consumer_group(queue), f"kmq-consumer-{queue}"),
            "error_cb": self._on_client_error,
        })
        self._intake = Intake(self._client, self._key, self._on_record_error, config.receive_buffer_capacity,
                              config.max_read_ahead_records)
        self._book = OffsetBook(CommitPolicy(config.max_messages_per_commit, IDLE_COMMIT_S))
        #: Duplicate sends out before their Starts (docs/concepts/dedup.md); None with ``dedup_window_ms`` 0.
        self._dedup = Deduplicator(
            self._key, config.dedup_window_ms, config.dedup_clock_skew_ms,
            reader_read_back(clients, config, queue, self._stop), None if self._at_most_once else self._writer,
            park=config.eager_rebalance, queue=queue) if config.dedup_window_ms else None
        self._pipeline = StartPipeline(
            key=self._key, intake=self._intake, writer=self._writer, book=self._book, in_flight=self._in_flight,
            to_message=self._to_message, commit=self._commit, hand_out=self._hand_out,
            start_timeout_s=config.connect_timeout_ms / 1000 + 20, stopping=self._stop,
            write_starts=not self._at_most_once, dedup=self._dedup)
        try:
            self._check_topics()
            retention = clients.retention(config, topics)  # None: Starts copy their payloads (see ReferencePolicy)
            if retention is not None:
                self._writer.references = ReferencePolicy(keep_ms=retention.messages_ms,
                                                          redelivery_timeout_ms=config.redelivery_timeout_ms)
            self._control.start()
            if self._identity is not None:
                self._identity.claim()
            self._writer.hello()  # a restart with the same client_id: the tracker frees what we held at once
            self._membership.subscribe(self._client, [topics.messages])
        except BaseException:
            self._client.close()
            self._control.close()
            self._in_flight.close()
            self._writer.close(0)
            self._producer.close(0)
            raise
        self._loop_thread = threading.Thread(target=self._loop, name=f"kmq-consumer-{queue}", daemon=True)
        self._loop_thread.start()

    # --- the worker's side --------------------------------------------------------------------------

    @property
    def queue(self) -> str:
        """The queue this consumer receives from."""
        return self._queue

    @property
    def topics(self) -> TopicSet:
        """The topic set it reads (its messages topic, in the set's consumer group) and writes markers to."""
        return self._topics

    @property
    def assignment(self) -> frozenset[int]:
        """Messages-topic partitions this consumer owns now."""
        return self._membership.assigned

    @property
    def late_acks(self) -> int:
        """Acks made after their message's redelivery deadline (this process was frozen or cut off from Kafka while
        the handler ran): the tracker may have delivered those messages again (``kmq_late_acks_total``)."""
        return self._in_flight.late_acks

    def held_nothing_for_s(self) -> float:
        """Seconds this consumer has held no messages-topic partition (0 while it holds some): for health checks."""
        return self._membership.held_nothing_for_s()

    @property
    def rebalances(self) -> int:
        """Rebalance callbacks seen (assign, revoke, lost)."""
        return self._membership.rebalances

    @property
    def fetch_paused(self) -> bool:
        """True while fetching is paused because the local backlog of read records is full."""
        return self._intake.paused

    @property
    def paused(self) -> bool:
        """True while the queue is paused (``kmq pause``) as this consumer's control follower last saw it."""
        return self._paused_now()

    @property
    def records_read(self) -> int:
        """Records read from the messages topic, this queue's and others' (read amplification)."""
        return self._intake.records_read

    @property
    def deduplicated(self) -> int:
        """Duplicate sends this consumer kept from handlers (Ended as deduplicated) since it started."""
        return 0 if self._dedup is None else self._dedup.deduplicated

    @property
    def in_flight(self) -> int:
        """Messages read and not yet settled (Started, buffered or handed out)."""
        return len(self._in_flight)

    def receive(self, timeout: float | None = None) -> Message | None:
        """The next message, or None after ``timeout`` seconds (None waits for ever)."""
        if self._out and not self._closed and self._fatal is None:
            message = self._out.take_one()  # the common case under load, without the waiting machinery
            # Unless purged while buffered, or its deadline passed while it waited (then given back).
            if message is not None and not (self._purged_up_to and message._settled_as) \
                    and self._in_flight.hand_out([message]):
                return message
        got = self.receive_many(1, timeout)
        return got[0] if got else None

    def receive_many(self, max_messages: int, timeout: float | None = None) -> list[Message]:
        """Up to ``max_messages`` messages as soon as at least one is ready; [] after ``timeout`` seconds."""
        if max_messages < 1:
            raise ValueError(f"max_messages must be at least 1, got {max_messages}")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._fatal is not None:
                raise self._fatal
            if self._closed:
                raise ConsumerClosedError(f"consumer of queue {self._queue!r} is closed")
            got = self._out.take(max_messages)
            if got and self._purged_up_to and any(m._settled_as for m in got):  # purged while buffered
                got = [m for m in got if not m._settled_as]
            if got:
                got = self._in_flight.hand_out(got)  # those whose deadline passed while they waited: given back
            if got:
                return got
            remaining = 0.2 if deadline is None else deadline - time.monotonic()
            if remaining <= 0:
                return []
            self._out.wait(min(0.2, remaining))

    def on_ready(self, listener: Callable[[int], None]) -> None:
        """Calls ``listener(n)`` on the consumer's thread each time ``n`` messages become ready to receive, and
        ``listener(0)`` when the consumer fails or closes: lets one thread wait on several consumers at once. The
        listener must be quick and must not raise."""
        self._out.add_listener(listener)

    @property
    def max_in_flight(self) -> int:
        """Most messages this consumer holds unsettled (Started, buffered or handed out): ``config.max_in_flight``
        unless lowered. A worker lowers it while its handlers are slow, so it does not hold more than its threads
        will soon run; set values are kept within 1 and ``config.max_in_flight``."""
        return self._out.limit

    @max_in_flight.setter
    def max_in_flight(self, value: int) -> None:
        self._out.limit = value

    def stop_taking(self) -> None:
        """Takes no new message from now on (a draining worker): what is buffered can still be received, and
        ``close()`` gives back what is not. Nothing is Started only to be given back."""
        self._taking = False

    def __iter__(self) -> Iterator[Message]:
        while not self._closed:
            try:
                msg = self.receive(0.5)
            except ConsumerClosedError:
                return
            if msg is not None:
                yield msg

    def ack_many(self, messages: Iterable[Message]) -> None:
        """Acks a batch of this consumer's messages at once (SQS DeleteMessageBatch style): what ``ack()`` does for
        each, in one step. Those that cannot be acked (settled already, or the consumer closed) stay as they are;
        the rest are acked, then MessageSettledError (or ConsumerClosedError) names the first of them."""
        self._settler._ack_many(messages)

    def flush(self, timeout: float = 30.0) -> int:
        """Waits until every marker written so far (acks included) is durable; returns how many records are not."""
        return self._writer.flush(timeout)

    @property
    def failure(self) -> str | None:
        """Why this consumer stopped working (a fatal Kafka error), or None."""
        return None if self._fatal is None else str(self._fatal)

    def writes_stalled_s(self) -> float:
        """How long marker records (Starts, acks, keep-alives) have waited with none acknowledged (0: none waits)."""
        return self._producer.stalled_s()

    @property
    def metadata_client(self) -> MetadataClient:
        """A client whose ``list_topics`` probes the broker (for health checks)."""
        client: MetadataClient = self._producer.client
        return client

    def close(self, timeout: float = 30.0) -> None:
        """Stops fetching, gives back messages never received and releases received ones still unsettled, writes
        outstanding markers, commits and leaves the group, all within about ``timeout`` seconds even when the
        broker is down.

        Raises UndeliveredMarkersError when markers (acks included) could not be written durably, since the start
        or within ``timeout``: those messages will be delivered again.
        """
        if self._closed:
            return
        deadline = time.monotonic() + timeout

        def left() -> float:
            return max(0.0, deadline - time.monotonic())

        self._stop.set()
        self._loop_thread.join(left())  # a commit to an unreachable broker may block it: close goes on anyway
        if self._fatal is None:
            # Batches whose Starts are on the wire: commit them, so they are given back below, not read again.
            self._pipeline.advance(block=True, timeout_s=min(left(), self._pipeline.start_timeout_s))
        self._closed = True
        # Popped one by one (atomic): a message a racing receive got is not counted as never received.
        never_received = {m.message_id for m in [*self._out.close(), *self._due.take_all()]}
        unsettled = self._in_flight.close()
        returned = 0
        for message_id in unsettled:
            if message_id in never_received:
                self._writer.give_back(message_id)  # no handler saw it: its delivery count stays
                returned += 1
            else:
                self._writer.release(message_id, 0)
        self.settled_at_close = {"released": len(unsettled) - returned, "returned": returned}
        if unsettled:
            self._log.info("consumer_close_released", **self.settled_at_close)
        remaining = self._writer.close(left())
        remaining += self._producer.close(left())
        undelivered = remaining + self._writer.undelivered
        if self._book and self._fatal is None and not remaining:
            self._commit(self._book.pending(), attempts=1)
        if self._at_most_once and never_received and self._fatal is None:
            # Committed but never received (no Start holds them): commit back to the first of each partition, so
            # the next consumer reads them. Received ones are earlier in each partition, so none comes twice.
            first: dict[TopicPartitionKey, int] = {}
            for mid in never_received:
                tp = (self._topics.messages, mid.partition)
                first[tp] = min(first.get(tp, mid.offset), mid.offset)
            _kafka.commit(self._client, first, f"queue {self._queue!r} (unreceived, at most once)", 1)
        self._control.close()
        _close_within(self._client, left() + 1.0, self._log)
        if undelivered:
            self._log.error("markers_undelivered_at_close", undelivered=undelivered)
            raise UndeliveredMarkersError(
                f"consumer of queue {self._queue!r}: {undelivered} marker record(s) were not written to "
                f"{self._topics.markers!r} (acks among them are lost: those messages will be delivered "
                "again)", undelivered)

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # --- the settle side wakes the loop ------------------------------------------------------------------

    def _on_control(self, state: ControlState) -> None:
        """On the control follower's thread: a purge reaches the messages already in flight here; a claim of our
        client_id by another process is answered."""
        if self._identity is not None:
            self._identity.on_control(state)
        before = state.purged_before.get(self._queue)
        if before is not None and before > self._purged_up_to:
            self._purged_up_to = before
            purged = self._in_flight.purge_before(before)
            if purged:
                self._log.info("purged_in_flight", purged=purged, before_ms=before)

    # --- background: the poll loop (owns the Kafka consumer) --------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set() and self._fatal is None:
            try:
                self._poll_once()
            except KmqError as err:
                self._log.error("consumer_fatal", error=str(err))
                self._fatal = err
            except KafkaException as exc:
                wrapped = _kafka.to_kmq_error(exc, f"consumer of queue {self._queue!r}")
                if exc.args and isinstance(exc.args[0], KafkaError) and exc.args[0].fatal():
                    self._fatal = wrapped
                self._log.warning("consumer_poll_error", error=str(wrapped))
                time.sleep(0.2)
        if self._fatal is not None:
            self._out.wake_all()

    def _poll_once(self) -> None:
        if self._due:
            self._hand_out(self._due.take_due())
        room = 0 if self._paused_now() or not self._taking else self._usable_room()
        self._intake.update_pause()
        busy = len(self._intake) or len(self._pipeline)
        wait_s = 0.0 if busy else self._config.next_message_timeout_ms / 1000
        next_due_s = self._due.next_due_in_s()
        if next_due_s is not None:
            wait_s = min(wait_s, next_due_s)
        if room <= 0 and not self._pipeline:
            self._out.wait_for_room(self._usable_room, self._room)
            wait_s = 0.0
        self._intake.fetch(wait_s)  # may run rebalance callbacks
        started = False
        if room > 0 and len(self._intake) and not self._pipeline.full() and not self._paused_now():
            self._pipeline.start(self._intake.take(room))
            started = True
        self._pipeline.advance(block=not started or self._pipeline.full())
        if self._book and not self._pipeline and self._book.policy.due():
            self._commit(self._book.pending())

    def _paused_now(self) -> bool:
        """Paused (kmq pause): take no new messages; those in flight finish. Asked again after each fetch, since a
        pause may arrive while the fetch waits."""
        state = self._control.state
        return bool(state.paused_until) and state.paused(self._queue, wire.now_ms())

    def _room(self) -> int:
        return self._out.room(self._pipeline.waiting, self.in_flight)

    def _usable_room(self) -> int:
        return self._out.usable_room(self._pipeline.waiting, self.in_flight)

    def _to_message(self, record: Record) -> Message:
        return to_message(record, self._queue, self._settler,  # type: ignore[arg-type]
                                 time.monotonic() + self._keep_alive_s)

    def _hand_out(self, messages: list[Message]) -> None:
        purged_before = self._control.state.purged_before.get(self._queue)
        if purged_before is not None:
            purged = [m for m in messages if m.enqueued_at_ms < purged_before]
            if purged:
                for message in purged:
                    self._settler.purge(message)
                messages = [m for m in messages if not m.settled]
        ready, hops, expired = self._due.sort(messages)
        for message, delay_ms in hops:  # read before their due time: the tracker brings them back then
            self._in_flight.discard(message.message_id)
            self._writer.delay(message.message_id, delay_ms)
        for message in expired:
            self._settler.expire(message, dead_letter=self._config.expired_messages == "dead-letter")
        if ready:
            self._out.put(ready)

    def _commit(self, offsets: Mapping[TopicPartitionKey, int],
                attempts: int = _kafka.COMMIT_ATTEMPTS) -> CommitOutcome:
        outcome = _kafka.commit(self._client, offsets, f"queue {self._queue!r}", attempts)
        if outcome is CommitOutcome.COMMITTED:
            self._book.committed(offsets)
        elif outcome is CommitOutcome.FENCED:
            self._book.forget(offsets)
        return outcome

    def _on_record_error(self, record: Record) -> None:
        err: KafkaError = record.error()  # type: ignore[assignment]
        if _kafka.is_fatal(err):
            raise _fatal_error(err, self._config, self._queue)
        cannot_join = self._membership.cannot_join(err)
        if cannot_join is not None:
            raise cannot_join
        self._log.warning("consume_error", error=err.str(), code=err.name())

    def _on_client_error(self, err: KafkaError) -> None:
        _kafka.Credentials.note(self._config.bootstrap_servers, self._config.kafka.get("sasl.username", ""), err)
        cannot_join = self._membership.cannot_join(err)
        if _kafka.is_fatal(err) or cannot_join is not None:
            self._fatal = cannot_join or _fatal_error(err, self._config, self._queue)
            self._log.error("consumer_fatal", error=str(self._fatal))
        elif time.monotonic() - self._last_client_warning > CLIENT_WARNING_EVERY_S:
            # Connection errors repeat many times a second while a broker is down: say it now and then.
            self._last_client_warning = time.monotonic()
            self._log.warning("kafka_client_error", error=err.str(), code=err.name())

    # --- rebalances (GroupMembership calls these inside poll(), on the loop thread) ------------------------

    def _on_revoking(self, partitions: list[int]) -> None:
        """Still ours: what is not handed out is Started again by whoever owns it next; what is, gets committed."""
        self._pipeline.rewind()
        mine = self._book.pending_in([(self._topics.messages, p) for p in partitions])
        if mine:
            self._commit(mine)

    def _on_dropped(self, partitions: list[int], lost: bool) -> None:
        # Neither committed nor Started: the partition's next owner reads these records again.
        if lost:
            self._pipeline.rewind()
        if self._dedup is not None:
            self._dedup.dropped(partitions)  # another consumer may decide their duplicates now
        gone = [(self._topics.messages, p) for p in partitions]
        self._book.forget(gone)
        self._intake.forget(gone)

    def _on_assignment_changed(self) -> None:
        if not self._closed:  # librdkafka revokes everything while closing: its pause state no longer matters
            self._intake.rebalanced()

    def _check_topics(self) -> None:
        _kafka.topic_partitions(self._client, self._config, self._topics.messages, "message")


def _close_within(client: GroupClient, timeout_s: float, logger: structlog.typing.FilteringBoundLogger) -> None:
    """librdkafka's close (leave the group, final fetch-state cleanup) may wait long with the broker down: it gets
    a thread and ``timeout_s``; past that the process goes on, and its exit ends the client."""
    closer = threading.Thread(target=client.close, name="kmq-consumer-close", daemon=True)
    closer.start()
    closer.join(timeout_s)
    if closer.is_alive():
        logger.warning("consumer_close_timeout", timeout_s=round(timeout_s, 1))


def _fatal_error(err: KafkaError, config: Config, queue: str) -> KafkaClientError:
    if err.code() == KafkaError.FENCED_INSTANCE_ID or "fenced" in err.str().lower():
        return KafkaClientError(f"consumer of queue {queue!r} was fenced: client_id (group.instance.id) "
                                f"{config.client_id!r} is used by another consumer", code=err.code())
    return _kafka.client_error(err, f"fatal Kafka error in consumer of queue {queue!r}")

