"""Consumer: reads one logical queue and hands out its messages; a facade over named parts.

Data path: the **Intake** fetches records and holds the backlog (pausing fetching when it is long) → the
**StartPipeline** turns this queue's records into Messages, has the **MarkerWriter** write their Starts (one record
per batch), enters the batch's offsets in the **OffsetBook** once the Starts are durable, commits (the
**QueueCommitter**), and passes the messages through the **ReadyGate** (purged, expired, not due yet) into the ready
buffer (**HandOut**) → the worker settles each with an O(1) append to the MarkerWriter, which writes settles in
batches. The **PollLoop** thread owns the Kafka consumer and never blocks on workers (**Rebalances** run inside its
fetch, **ClientErrors** decide what stops it); the **InFlightMessages** thread writes keep-alives for every message
in flight (Started, buffered or handed out).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType

import structlog

from kmq import _kafka
from kmq._kafka.closing import close_within
from kmq._kafka.factory import ClientFactory, KafkaClients
from kmq.client.consumer.offset_book import TopicPartitionKey
from kmq.client.consumer.parts import build_parts
from kmq.client.consumer.poll_loop import PollLoop
from kmq.client.consumer.reference_policy import ReferencePolicy
from kmq.client.message import Message
from kmq.config import Config
from kmq.errors import ConsumerClosedError, UndeliveredMarkersError
from kmq.metrics_http import MetadataClient
from kmq.topic_sets import TopicSet
from kmq.wire import MessageId
from kmq.wire.control import ControlState

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

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
        self._config = config
        #: The topics and group it reads.
        self._topics = topics = topics or config.topics_for(queue)
        self._queue = queue
        self._log = log.bind(queue=queue)
        self._closed = False
        #: What ``close()`` settled itself: received but unsettled messages ``released`` (a handler may have started
        #: on them), never received ones ``returned`` (their delivery count unchanged).
        self.settled_at_close: dict[str, int] = {"released": 0, "returned": 0}
        self._purged_up_to = 0
        clients = clients or KafkaClients()
        #: The topics and group it reads.
        self._topics = topics = topics or config.topics_for(queue)
        self._p = p = build_parts(config, queue, clients, topics, max_in_flight=max_in_flight,
                                  on_control=self._on_control, closed=lambda: self._closed, logger=self._log)
        self._loop = PollLoop(config, queue, p, self._log)
        try:
            _kafka.topic_partitions(p.client, config, topics.messages, "message")
            retention = clients.retention(config, topics)  # None: Starts copy (see ReferencePolicy)
            if retention is not None:
                p.writer.references = ReferencePolicy(keep_ms=retention.messages_ms,
                                                      redelivery_timeout_ms=config.redelivery_timeout_ms)
            p.control.start()
            if p.identity is not None:
                p.identity.claim()
            p.writer.hello()  # a restart with the same client_id: the tracker frees what we held at once
            p.membership.subscribe(p.client, [topics.messages])
        except BaseException:
            p.client.close()
            p.control.close()
            p.in_flight.close()
            p.writer.close(0)
            p.producer.close(0)
            raise
        self._loop.start()

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
        return self._p.membership.assigned

    @property
    def late_acks(self) -> int:
        """Acks made after their message's redelivery deadline (this process was frozen or cut off from Kafka while
        the handler ran): the tracker may have delivered those messages again (``kmq_late_acks_total``)."""
        return self._p.in_flight.late_acks.count

    @property
    def rejoins(self) -> int:
        """Group consumers made again because the group coordinator kept this consumer out of its group (after a
        broker freeze librdkafka's own rejoin can stay out; see kmq._kafka.rejoin)."""
        return self._p.rejoin.rejoins

    def held_nothing_for_s(self) -> float:
        """Seconds this consumer has held no messages-topic partition (0 while it holds some): for health checks."""
        return self._p.membership.held_nothing_for_s()

    @property
    def rebalances(self) -> int:
        """Rebalance callbacks seen (assign, revoke, lost)."""
        return self._p.membership.rebalances

    @property
    def fetch_paused(self) -> bool:
        """True while fetching is paused because the local backlog of read records is full."""
        return self._p.intake.paused

    @property
    def paused(self) -> bool:
        """True while the queue is paused (``kmq pause``) as this consumer's control follower last saw it."""
        return self._loop.paused()

    @property
    def records_read(self) -> int:
        """Records read from the messages topic, this queue's and others' (read amplification)."""
        return self._p.intake.records_read

    @property
    def deduplicated(self) -> int:
        """Duplicate sends this consumer kept from handlers (Ended as deduplicated) since it started."""
        return self._p.pipeline.deduplicated

    @property
    def in_flight(self) -> int:
        """Messages read and not yet settled (Started, buffered or handed out)."""
        return len(self._p.in_flight)

    def receive(self, timeout: float | None = None) -> Message | None:
        """The next message, or None after ``timeout`` seconds (None waits for ever)."""
        p = self._p
        if not self._closed and p.errors.fatal is None:
            message = p.out.take_one()  # the common case under load, without the waiting machinery
            # Unless purged while buffered, or its deadline passed while it waited (then given back).
            if message is not None and not (self._purged_up_to and message._settled_as) \
                    and p.in_flight.hand_out_one(message):
                return message
        got = self.receive_many(1, timeout)
        return got[0] if got else None

    def receive_many(self, max_messages: int, timeout: float | None = None) -> list[Message]:
        """Up to ``max_messages`` messages as soon as at least one is ready; [] after ``timeout`` seconds."""
        if max_messages < 1:
            raise ValueError(f"max_messages must be at least 1, got {max_messages}")
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._p.errors.fatal is not None:
                raise self._p.errors.fatal
            if self._closed:
                raise ConsumerClosedError(f"consumer of queue {self._queue!r} is closed")
            got = self._p.out.take(max_messages)
            if got and self._purged_up_to and any(m._settled_as for m in got):  # purged while buffered
                got = [m for m in got if not m._settled_as]
            if got:
                got = self._p.in_flight.hand_out(got)  # those whose deadline passed while they waited: given back
            if got:
                return got
            remaining = 0.2 if deadline is None else deadline - time.monotonic()
            if remaining <= 0:
                return []
            self._p.out.wait(min(0.2, remaining))

    def on_ready(self, listener: Callable[[int], None]) -> None:
        """Calls ``listener(n)`` on the consumer's thread each time ``n`` messages become ready to receive, and
        ``listener(0)`` when the consumer fails or closes: lets one thread wait on several consumers at once. The
        listener must be quick and must not raise."""
        self._p.out.add_listener(listener)

    @property
    def max_in_flight(self) -> int:
        """Most messages this consumer holds unsettled (Started, buffered or handed out): ``config.max_in_flight``
        unless lowered. A worker lowers it while its handlers are slow, so it does not hold more than its threads
        will soon run; set values are kept within 1 and ``config.max_in_flight``."""
        return self._p.out.limit

    @max_in_flight.setter
    def max_in_flight(self, value: int) -> None:
        self._p.out.limit = value

    def stop_taking(self) -> None:
        """Takes no new message from now on (a draining worker): what is buffered can still be received, and
        ``close()`` gives back what is not. Nothing is Started only to be given back."""
        self._loop.taking = False

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
        self._p.settler._ack_many(messages)

    def flush(self, timeout: float = 30.0) -> int:
        """Waits until every marker written so far (acks included) is durable; returns how many records are not."""
        return self._p.writer.flush(timeout)

    @property
    def failure(self) -> str | None:
        """Why this consumer stopped working (a fatal Kafka error), or None."""
        return None if self._p.errors.fatal is None else str(self._p.errors.fatal)

    def writes_stalled_s(self) -> float:
        """How long marker records (Starts, acks, keep-alives) have waited with none acknowledged (0: none waits)."""
        return self._p.producer.stalled_s()

    @property
    def metadata_client(self) -> MetadataClient:
        """A client whose ``list_topics`` probes the broker (for health checks)."""
        client: MetadataClient = self._p.producer.client
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

        p = self._p
        self._loop.join(left())  # a commit to an unreachable broker may block it: close goes on anyway
        fatal = p.errors.fatal
        if fatal is None:
            # Batches whose Starts are on the wire: commit them, so they are given back below, not read again.
            p.pipeline.advance(block=True, timeout_s=min(left(), p.pipeline.start_timeout_s))
        self._closed = True
        # Popped one by one (atomic): a message a racing receive got is not counted as never received.
        never_received = {m.message_id for m in [*p.out.close(), *p.gate.take_all()]}
        self._settle_unsettled(never_received)
        remaining = p.writer.close(left())
        remaining += p.producer.close(left())
        undelivered = remaining + p.writer.undelivered
        if p.book and fatal is None and not remaining:
            p.committer.commit_pending(attempts=1)
        if p.settler is not p.in_flight and never_received and fatal is None:
            self._uncommit(never_received)
        p.control.close()
        close_within(p.client, left() + 1.0, self._log)
        if undelivered:
            self._log.error("markers_undelivered_at_close", undelivered=undelivered)
            raise UndeliveredMarkersError(
                f"consumer of queue {self._queue!r}: {undelivered} marker record(s) were not written to "
                f"{self._topics.markers!r} (acks among them are lost: those messages will be delivered "
                "again)", undelivered)

    def _settle_unsettled(self, never_received: set[MessageId]) -> None:
        """At close: gives back what no handler saw (its delivery count stays), releases what one may have. A
        grouped message's settle is owner-tracked: the next owner of its partition hands it out again."""
        unsettled = self._p.in_flight.close()
        if self._p.groups is not None:
            self._p.groups.close()
        returned = 0
        writer = self._p.writer
        for message in unsettled:
            sink = writer.owned if message.group is not None else writer.settles.plain
            if message.message_id in never_received:
                sink.give_back(message.message_id)
                returned += 1
            else:
                sink.release(message.message_id, 0)
        self.settled_at_close = {"released": len(unsettled) - returned, "returned": returned}
        if unsettled:
            self._log.info("consumer_close_released", **self.settled_at_close)

    def _uncommit(self, never_received: set[MessageId]) -> None:
        """At-most-once: committed but never received (no Start holds them): commit back to the first of each
        partition, so the next consumer reads them. Received ones are earlier in each partition, so none comes
        twice."""
        first: dict[TopicPartitionKey, int] = {}
        left = self._p.intake.left  # a partition given up is its new owner's to commit: never moved back from here
        for mid in never_received:
            tp = (self._topics.messages, mid.partition)
            if mid.partition not in left:
                first[tp] = min(first.get(tp, mid.offset), mid.offset)
        if first:
            _kafka.commit(self._p.client, first, f"queue {self._queue!r} (unreceived, at most once)", 1)

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # --- the settle side wakes the loop ------------------------------------------------------------------

    def _on_control(self, state: ControlState) -> None:
        """On the control follower's thread: a purge reaches the messages already in flight here; a claim of our
        client_id by another process is answered."""
        if self._p.identity is not None:
            self._p.identity.on_control(state)
        before = state.purged_before.get(self._queue)
        if before is not None and before > self._purged_up_to:
            self._purged_up_to = before
            purged = self._p.in_flight.purge_before(before)
            if purged:
                self._log.info("purged_in_flight", purged=purged, before_ms=before)

