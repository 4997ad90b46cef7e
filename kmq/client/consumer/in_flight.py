"""InFlightMessages: a consumer's messages from their Start until they are settled, and how they are settled.

The table maps message id → Message. Popping an entry is what settles a message: a dict pop is atomic, so of two
threads settling one message exactly one wins, with no lock per message. A settle appends to the MarkerWriter and
returns; a keep-alive thread refreshes every message in the table (Started, buffered or handed out) every
``redelivery_timeout_ms / 2``.

Deadlines: each message knows the tracker's deadline for it as far as its durable Start and keep-alives prove it
(a keep-alive appended after the deadline it was meant to move proves nothing: the tracker may have copied the
message by then). ``hand_out`` gives back a message whose deadline passed, or is about to, while it waited (a
failover can hold a commit, and the keep-alives covering it, for seconds) instead of handing it to a handler while
the tracker's copy is on its way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from operator import attrgetter
from typing import NoReturn

import structlog

from kmq import wire
from kmq._kafka.producer import MarkerProducer
from kmq.client.consumer.at_most_once import write_dead_letter
from kmq.client.consumer.keep_alive import KeepAliveLoop
from kmq.client.consumer.late_acks import LateAcks
from kmq.client.consumer.marker_writer import MarkerWriter
from kmq.client.consumer.settle_sink import SettleSink
from kmq.client.message import Message
from kmq.config import Config
from kmq.errors import ConsumerClosedError, DeliveryError, KmqError
from kmq.topic_sets import TopicSet
from kmq.wire import HEADER_GROUP, MessageId
from kmq.wire.markers import EndReason

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

#: The most time a message's deadline must be ahead to be handed out (less for short redelivery timeouts).
HAND_OUT_GUARD_MS = 2000
#: How long ``hand_out_one`` reuses one reading of the broker clock (its bar is raised by as much).
CLEAR_REUSE_S = 0.01
#: How often the count of messages given back for their deadline is logged at most.
LATE_LOG_EVERY_S = 5.0

_message_id = attrgetter("message_id")
_deadline_ms = attrgetter("_deadline_ms")

#: (message, kind, delay ms, (end reason, reason text) or None): a grouped message was settled.
GroupSettle = Callable[[Message, str, int, "tuple[int, str] | None"], None]


class InFlightMessages:
    """The Settler of a consumer's Messages (``message.ack()`` lands here), any thread.

    A grouped message's settles go to the writer's owner-tracked sink, and ``on_group_settle`` (the consumer's
    GroupDispatch) learns of them before they are written, so it sees the settle before the End's delivery report.
    """

    def __init__(self, config: Config, topics: TopicSet, queue: str, writer: MarkerWriter,
                 dlq_producer: MarkerProducer, on_settled: Callable[[], None]) -> None:
        self._config = config
        self._topics = topics
        self._queue = queue
        self._writer = writer
        self._dlq_producer = dlq_producer
        self._on_settled = on_settled
        #: ``on_settled`` for a batch of ``n`` at once (the consumer's HandOut.wake_loop takes the count).
        self.on_settled_many: Callable[[int], None] = self._settled_one_by_one
        self._table: dict[MessageId, Message] = {}
        self.closed = False
        self._after_ms = config.redelivery_timeout_ms
        self._keep_alive_ms = config.keep_alive_interval_ms
        #: A keep-alive sent now must land before the deadline: a keep-alive tick and a write's worth of margin.
        self._guard_ms = min(HAND_OUT_GUARD_MS, config.keep_alive_interval_ms // 2)
        self.given_back_late = 0
        #: ``hand_out_one``'s bar: a deadline above ``_clear_above_ms`` may be handed out until ``_clear_until``
        #: (monotonic s). The bar is written first: a thread that reads an older pair is within its window.
        self._clear_above_ms = 1 << 62
        self._clear_until = 0.0
        self._late_logged = (0.0, 0)
        self.late_acks = LateAcks(queue, lambda: writer.broker_time.now_ms())
        #: Told of every settle of a grouped message: (message, kind, delay ms, (end reason, text) or None).
        self.on_group_settle: GroupSettle = _no_groups
        writer.on_durable = self.durable
        #: The plain sink's ack (``writer.ack`` without its call: once per message).
        self._plain_ack = writer.settles.plain.ack
        self.keep_alives = KeepAliveLoop(self._table, writer, interval_s=config.keep_alive_interval_ms / 1000,
                                         session_timeout_s=config.session_timeout_ms / 1000, on_tick=self._tick,
                                         name=f"kmq-keepalive-{queue}")

    def __len__(self) -> int:
        return len(self._table)

    def _settled_one_by_one(self, count: int) -> None:
        for _ in range(count):
            self._on_settled()

    def __iter__(self) -> Iterator[MessageId]:
        return iter(list(self._table))  # list() of a dict is atomic under the GIL

    def add(self, message: Message) -> None:
        self._table[message.message_id] = message

    def add_many(self, messages: list[Message]) -> None:
        """``add`` of each (the map and zip run in C: this is once per message on the loop thread)."""
        self._table.update(zip(map(_message_id, messages), messages, strict=True))

    def discard(self, message_id: MessageId) -> None:
        """Forgets a message that was not handed out (its batch is rewound); it will be Started again."""
        self._table.pop(message_id, None)

    def durable(self, ids: Sequence[MessageId], appended_ms: int) -> None:
        """A Start or keep-alive record of ``ids``, appended at broker time ``appended_ms``, is durable (on the
        producer's delivery thread)."""
        get, deadline_ms = self._table.get, appended_ms + self._after_ms
        for mid in ids:  # once per message: kept lean
            msg = get(mid)
            if msg is not None:
                known = msg._deadline_ms
                if known == 0 or (appended_ms < known < deadline_ms):
                    msg._deadline_ms = deadline_ms

    def hand_out_one(self, message: Message) -> bool:
        """``hand_out`` of one message, without the lists: True if it may go to a handler, False if it was given
        back instead."""
        deadline_ms = message._deadline_ms
        if deadline_ms == 0:
            return True
        now = time.monotonic()
        if now >= self._clear_until:
            # The broker clock read at most every CLEAR_REUSE_S, and the bar raised by as much: a deadline above it
            # is clear of "now + a keep-alive interval" until then.
            now_ms = self._writer.broker_time.now_ms()
            if now_ms is None:
                return True
            self._clear_above_ms = now_ms + self._keep_alive_ms + int(CLEAR_REUSE_S * 1000)
            self._clear_until = now + CLEAR_REUSE_S
        if deadline_ms > self._clear_above_ms:
            return True
        return bool(self.hand_out([message]))

    def hand_out(self, messages: list[Message]) -> list[Message]:
        """Of ``messages`` about to reach a handler, those whose deadline is safely ahead; the others are given back
        (redelivered at once, delivery count unchanged). One close to its deadline gets a keep-alive at the next
        tick rather than at its usual time."""
        now_ms = self._writer.broker_time.now_ms()
        if now_ms is None:
            return messages
        soon = now_ms + self._keep_alive_ms
        # The earliest deadline known (0: none known yet, which is no reason to hold one back), found in C.
        if min(filter(None, map(_deadline_ms, messages)), default=soon + 1) > soon:
            return messages  # the common case: nothing waited long
        ready, late = [], []
        for m in messages:
            if m._deadline_ms == 0 or m._deadline_ms > now_ms + self._guard_ms:
                if m._deadline_ms and m._deadline_ms <= soon:
                    m._next_keep_alive = 0.0
                ready.append(m)
            else:
                late.append(m)
        for m in late:
            try:
                self._give_back(m)
            except KmqError:
                continue  # settled meanwhile (a purge): nothing to give back
        self._log_late(late, now_ms)
        return ready

    def _log_late(self, late: list[Message], now_ms: int) -> None:
        if not late:
            return
        self.given_back_late += len(late)
        if time.monotonic() - self._late_logged[0] >= LATE_LOG_EVERY_S:
            self._report_late(min(m._deadline_ms - now_ms for m in late))

    def _report_late(self, deadline_in_ms: int | None = None) -> None:
        """One line for the messages given back since the last line (a failover gives back a burst)."""
        count = self.given_back_late - self._late_logged[1]
        self._late_logged = (time.monotonic(), self.given_back_late)
        if count:
            log.warning("late_messages_given_back", queue=self._queue, count=count, total=self.given_back_late,
                        deadline_in_ms=deadline_in_ms,
                        note="their redelivery deadline passed, or was about to, while they waited (a Kafka "
                             "failover?): redelivered instead of handed out twice")

    def _tick(self, now: float) -> None:
        if self.given_back_late > self._late_logged[1] and now - self._late_logged[0] >= LATE_LOG_EVERY_S:
            self._report_late()  # the rest of a burst, once it is over

    def close(self) -> list[Message]:
        """Stops keep-alives; every message still in flight is forgotten and returned (to give back)."""
        self.closed = True
        self.keep_alives.stop()
        self._report_late()
        unsettled = list(self._table.values())
        self._table.clear()
        return unsettled

    # --- Message's settle calls ---------------------------------------------------------------------

    def _ack(self, message: Message) -> None:
        # _claim inlined: this runs once per message.
        owner = self._table.pop(message.message_id, None)
        if owner is not message:
            self._refuse(message, owner, "ack")
        message._settled_as = "ack"
        if HEADER_GROUP in message.record_headers:
            self.on_group_settle(message, "ack", 0, None)
            self._writer.owned.ack(message.message_id)
            self._writer.settles.wake()  # its group moves on once the End is durable: no linger
        else:
            self._plain_ack(message.message_id)
        if message._deadline_ms:
            self.late_acks.check_one(message._deadline_ms)
        self._on_settled()

    def _ack_many(self, messages: Iterable[Message]) -> None:
        """Acks the batch in one step (one append of ids for the writer); those that cannot be acked (settled
        already, or the consumer closed) are left as they are, and the first is named in the error raised once
        the rest are acked."""
        table, acked, refused, deadlines = self._table, [], [], []
        for message in messages:
            owner = table.pop(message.message_id, None)
            if owner is message:
                message._settled_as = "ack"
                if message._deadline_ms:
                    deadlines.append(message._deadline_ms)
                if HEADER_GROUP in message.record_headers:
                    self.on_group_settle(message, "ack", 0, None)
                    self._writer.owned.ack(message.message_id)
                    self._writer.settles.wake()
                else:
                    acked.append(message.message_id)
            else:
                refused.append((message, owner))
        self._writer.ack_many(acked)
        self.late_acks.check(deadlines)
        if acked:
            self.on_settled_many(len(acked))
        for message, owner in refused[1:]:
            if owner is not None:
                table[message.message_id] = owner
        if refused:
            message, owner = refused[0]
            self._refuse(message, owner, "ack" if len(refused) == 1 else f"ack (nor {len(refused) - 1} more)")

    def _release(self, message: Message, delay_ms: int) -> None:
        self._claim(message, "release")
        self._sink(message, "release", delay_ms).release(message.message_id, delay_ms)
        self._on_settled()

    def _give_back(self, message: Message) -> None:
        self._claim(message, "give back")
        self._sink(message, "return").give_back(message.message_id)
        self._on_settled()

    def _reject(self, message: Message, reason: str) -> None:
        self._claim(message, "reject")
        try:
            write_dead_letter(self._dlq_producer, self._config, self._topics, message, reason)
        except DeliveryError:
            if not self.closed:  # unsettled again, so the caller may retry
                message._settled_as = ""
                self._table[message.message_id] = message
            raise
        self._end(message, reason)

    def dead_letter(self, message: Message, reason: str) -> None:
        """Dead-letters and Ends a message no handler will have (a grouped message past ``max_deliveries``); if
        the dead letter cannot be written it stays in flight (released at close, tried again by the next owner)."""
        self.add(message)
        try:
            self._reject(message, reason)
        except DeliveryError as err:
            log.error("message_not_dead_lettered", queue=self._queue, message_id=str(message.message_id),
                      error=str(err))

    def expire(self, message: Message, dead_letter: bool) -> None:
        """A message read after its expiry time: never handed out; dead-lettered or dropped, and Ended."""
        self._claim(message, "expire")
        if dead_letter:
            try:
                write_dead_letter(self._dlq_producer, self._config, self._topics, message, wire.EXPIRED_REASON)
            except DeliveryError as err:  # stays in flight: released at close, and read (and expired) again
                message._settled_as = ""
                self._table[message.message_id] = message
                log.error("expired_message_not_dead_lettered", queue=self._queue, message_id=str(message.message_id),
                          error=str(err))
                return
        self._end(message, wire.EXPIRED_REASON)

    def purge(self, message: Message) -> bool:
        """Settles ``message`` without a handler (``kmq purge``); False if it was settled already."""
        try:
            self._claim(message, "purge")
        except KmqError:
            return False
        self._end(message, wire.PURGED_REASON)
        return True

    def purge_before(self, before_ms: int) -> int:
        """Purges every message in flight enqueued before ``before_ms`` (handed out ones too: their handler's
        settle then fails); returns how many."""
        return sum(self.purge(m) for m in list(self._table.values()) if m.enqueued_at_ms < before_ms)

    def _end(self, message: Message, reason: str) -> None:
        """An End (REJECTED, with ``reason``) of a claimed message."""
        sink = self._sink(message, "end", 0, (EndReason.REJECTED.value, reason))
        sink.end(message.message_id, EndReason.REJECTED, reason)
        if sink is not self._writer.settles.plain:
            self._writer.settles.wake()
        self._on_settled()

    def _sink(self, message: Message, kind: str, delay_ms: int = 0,
              end: tuple[int, str] | None = None) -> SettleSink:
        """Where a settle of ``message`` is written: a grouped message's goes to the owner-tracked sink, and the
        group dispatch hears of it first."""
        if HEADER_GROUP in message.record_headers:
            self.on_group_settle(message, kind, delay_ms, end)
            return self._writer.owned
        return self._writer.settles.plain

    def _keep_alive(self, message: Message) -> None:
        if self._table.get(message.message_id) is not message:
            raise self._unsettleable(message, "keep alive")
        message._next_keep_alive = time.monotonic() + self._config.keep_alive_interval_ms / 1000
        grouped = HEADER_GROUP in message.record_headers
        (self._writer.owned if grouped else self._writer.settles.plain).keep_alive(message.message_id)

    def _claim(self, message: Message, how: str) -> None:
        owner = self._table.pop(message.message_id, None)
        if owner is message:
            message._settled_as = how
            return
        if owner is not None:  # a later delivery of the same record: not this handle's to settle
            self._table[message.message_id] = owner
        raise self._unsettleable(message, how)

    def _refuse(self, message: Message, owner: Message | None, how: str) -> NoReturn:
        """After a claim by pop found ``owner`` instead of ``message``: puts it back (a later delivery of the same
        record, not this handle's to settle) and raises why ``message`` cannot be settled."""
        if owner is not None:
            self._table[message.message_id] = owner
        raise self._unsettleable(message, how)

    def _unsettleable(self, message: Message, how: str) -> KmqError:
        if self.closed and not message.settled:
            return ConsumerClosedError(f"cannot {how} message {message.message_id}: the consumer of queue "
                                       f"{self._queue!r} is closed (it was released for redelivery)")
        return message._already_settled(how)


def _no_groups(_message: Message, _kind: str, _delay_ms: int, _end: tuple[int, str] | None) -> None:
    pass
