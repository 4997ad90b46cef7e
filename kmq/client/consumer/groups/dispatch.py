"""GroupDispatch: the consumer loop's side of message groups (docs/concepts/groups.md).

Each round, on the loop thread: records of this queue that name a group are ``divert``ed from the Start pipeline into
their partition's ledger; ``advance`` applies what happened since (settles from the workers' threads, durable Ends
and Starts from the producer's, markers an earlier owner wrote, leases that lapsed); ``hand_out`` takes one message
from each ready group in turn and has it Started (owner-tracked), and it goes out once its Start is durable. Commits
ask its ``commits`` (GroupCommits): never past a partition's lowest unfinished grouped record, with the markers offset
a next owner replays from.

Before a grouped message is Started, ``before_start`` (None by default) may finish it instead: it returns the End to
write (end reason, reason text), and the message is Ended without a Start and its group moves on once that End is
durable (the seam for deduplicated sends, and the path ``max_deliveries`` takes).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from kmq import wire
from kmq.client.consumer.groups.commits import Book, GroupCommits
from kmq.client.consumer.groups.ledger import ACTIVE, PartitionLedger, State
from kmq.client.consumer.groups.owned_starts import OwnedStarts
from kmq.client.consumer.groups.ready_ring import ReadyRing
from kmq.client.consumer.groups.takeover import Takeover
from kmq.client.consumer.marker_writer import MarkerWriter
from kmq.client.message import Message
from kmq.wire import HEADER_DELIVER_AT, MessageId
from kmq.wire.markers import EndReason

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

#: How the workers settled a grouped message (InFlightMessages tells the dispatch).
ACK, END, RELEASE, RETURN = "ack", "end", "release", "return"
#: How long the loop waits at most while grouped messages are out (their settles wake it at once: this bounds how
#: late it sees new records meanwhile).
ACTIVE_WAIT_S = 0.01

#: ``before_start``'s verdict: None (Start it), or the End to write instead (end reason, reason text).
Verdict = tuple[EndReason, str] | None


@dataclass(frozen=True, slots=True)
class GroupRules:
    """A queue's rules for its groups."""

    #: Messages of one group in flight at once (``group_concurrency``; 1: in order, one at a time).
    concurrency: int = 1
    #: Deliveries after which the owner dead-letters a message instead of handing it out again (0: never).
    max_deliveries: int = 0
    #: Grouped messages read and unfinished past which the consumer reads no further (``group_buffer_records``).
    buffer_records: int = 200_000


class GroupDispatch:
    """Loop thread, but for ``settled``, ``ended`` and ``start_recorded`` (any thread: they only append)."""

    def __init__(self, *, rules: GroupRules, writer: MarkerWriter, starts: OwnedStarts, takeover: Takeover,
                 book: Book, make_message: Callable[[Any], Message], dead_letter: Callable[[Message, str], None],
                 put_back: Callable[[list[Any]], None], last_marker: Callable[[], int],
                 logger: structlog.typing.FilteringBoundLogger = log,
                 clock_ms: Callable[[], int] = wire.now_ms) -> None:
        self._rules = rules
        self._writer = writer
        self._starts = starts
        self._takeover = takeover
        self._make_message = make_message
        self._dead_letter = dead_letter
        self._put_back = put_back
        self._log = logger
        #: Wall-clock ms: due times (``deliver_at``, a release's delay).
        self._clock_ms = clock_ms
        self._ledgers: dict[int, PartitionLedger] = {}
        self._ring = ReadyRing()
        #: (kind, …) from other threads, applied by ``advance``.
        self._events: deque[tuple[Any, ...]] = deque()
        #: The commit side: where each partition may be committed, with its ``m=``.
        self.commits = GroupCommits(self._ledgers, takeover, starts, book, last_marker, logger)
        #: The dedup seam (see the module docstring).
        self.before_start: Callable[[Message], Verdict] | None = None
        #: Set when something the loop acts on happened (a settle, a durable End or Start): it waits on this
        #: rather than in librdkafka's poll while grouped messages are out.
        self.wake = threading.Event()

    # --- reading (loop thread, inside the Start pipeline) ----------------------------------------------------------

    def divert_many(self, records: list[Any]) -> list[Any]:
        """``records`` but those ``divert`` takes (the Start pipeline's batch of this queue's records). The plain
        records of a partition with nothing grouped in it are kept here without a call each: this runs for every
        record read."""
        kept = []
        ledgers = self._ledgers
        for record in records:
            ledger = ledgers.get(record.partition())
            if ledger is None:
                kept.append(record)
                continue
            if not ledger.blind and not ledger.entries and not record.headers():
                offset: int = record.offset()
                if offset >= ledger.read_to:  # divert's own steps for such a record, inlined
                    ledger.read_to = offset + 1
                    kept.append(record)
                    continue
            if not self.divert(record):
                kept.append(record)
        return kept

    def divert(self, record: Any) -> bool:
        """True when this queue's ``record`` is the groups' concern (grouped, parked, or already Started by an
        earlier owner): the Start pipeline then skips it (its offset still counts)."""
        partition: int = record.partition()
        ledger = self._ledgers.get(partition)
        if ledger is None:
            return False
        offset: int = record.offset()
        if ledger.blind:
            self._takeover.park(partition, record)
            return True
        headers = record.headers()
        group = wire.group_of(headers)
        if offset < ledger.read_to:  # read again (a rewound Start batch): a grouped record is in the ledger already
            return group is not None
        ledger.read_to = offset + 1
        if group is None:
            return bool(ledger.entries) and ledger.skip_finished(offset)
        queue = ledger.add(offset, group, record, due_ms=_due_ms(headers))
        self._ring.offer(ledger, queue, self._clock_ms())
        return True

    @property
    def full(self) -> bool:
        """True while the grouped records read and not finished fill the buffer (``group_buffer_records``): the
        consumer reads no further until some finish."""
        return sum(ledger.buffered for ledger in self._ledgers.values()) >= self._rules.buffer_records

    # --- events from other threads -------------------------------------------------------------------------------

    def settled(self, message: Message, kind: str, delay_ms: int = 0, end: tuple[int, str] | None = None) -> None:
        """A worker settled a grouped ``message`` (any thread)."""
        self._events.append((kind, message, delay_ms, end))
        self.wake.set()

    def ended(self, ids: Sequence[MessageId], ok: bool) -> None:
        """The owner-tracked Ends of ``ids`` are durable (``ok``) or failed (producer thread)."""
        self._events.append(("ended", ids, ok))
        self.wake.set()

    # --- each round (loop thread) --------------------------------------------------------------------------------

    def advance(self) -> None:
        """Applies settles, durable Ends and Starts, an earlier owner's markers and lapsed leases."""
        now = self._clock_ms()
        events = self._events
        while events:
            event = events.popleft()
            if event[0] == "ended":
                self._apply_ended(event[1], event[2], now)
            else:
                self._apply_settle(event[1], event[0], event[2], event[3], now)
        for ledger, queue in self._starts.advance(now):
            self._ring.offer(ledger, queue, now)
        if self._takeover.replays or any(ledger.held for ledger in self._ledgers.values()):
            offers, unparked = self._takeover.round(self._ledgers, now)
            for ledger, queue in offers:
                self._ring.offer(ledger, queue, now)
            if unparked:
                self._unpark(unparked)

    def hand_out(self, room: int) -> int:
        """Takes up to ``room`` messages, one per ready group in turn, and Starts them; how many were taken."""
        if room <= 0:
            return 0
        now = self._clock_ms()
        for ledger in self._ledgers.values():
            if not ledger.anchored and ledger.groups and not ledger.blind and self.commits.anchor(ledger):
                for queue in ledger.groups.values():
                    self._ring.offer(ledger, queue, now)
        taken = self._ring.take(room, now)
        if not taken:
            return 0
        starting, messages = [], []
        for ledger, entry in taken:
            message = self._make_message(entry.record)
            message.delivery_count = entry.delivery_count
            entry.delivery = message
            verdict = self.before_start(message) if self.before_start is not None else None
            if verdict is None and self._rules.max_deliveries and entry.delivery_count > self._rules.max_deliveries:
                self._dead_letter(message, wire.max_deliveries_reason(self._rules.max_deliveries))
                continue  # its End comes back as a settle: the group moves on once it is durable
            if verdict is not None:
                ledger.ending(entry, (verdict[0].value, verdict[1]))
                self._writer.owned.end(message.message_id, verdict[0], verdict[1])
                continue
            starting.append((ledger, entry))
            messages.append(message)
        if messages:
            self._starts.start(starting, messages)
        return len(taken)

    @property
    def moving(self) -> bool:
        """Grouped messages are out, being Started, or their settles are being applied: the loop waits on
        ``wake`` (and polls Kafka without waiting) rather than in librdkafka's poll."""
        return bool(self._starts or self._events or any(ledger.buffered for ledger in self._ledgers.values()))

    def wait_s(self, idle_s: float) -> float:
        """How long the loop's next fetch may wait: briefly while grouped messages are out or due soon."""
        due_ms = self._ring.next_due_in_ms(self._clock_ms())
        wait_s = idle_s if due_ms is None else min(idle_s, due_ms / 1000)
        if self._starts or self._events or self._takeover.replays or any(
                ledger.held or ledger.buffered for ledger in self._ledgers.values()):
            wait_s = min(wait_s, ACTIVE_WAIT_S)
        return wait_s

    @property
    def waiting(self) -> int:
        """Grouped messages whose Start is on its way (not handed out yet)."""
        return self._starts.waiting

    @property
    def ready(self) -> int:
        """Groups ready to hand out now."""
        return len(self._ring)

    # --- rebalances ------------------------------------------------------------------------------------------------

    def assigned(self, partitions: list[int]) -> None:
        """New partitions: blind until their commit is known (asked now, in the rebalance callback, so that
        records of a partition with nothing to replay are never parked) and, if it names one, the markers
        replayed."""
        for partition in partitions:
            ledger = PartitionLedger(partition, self._rules.concurrency)
            self._ledgers[partition] = ledger
            self._takeover.begin(ledger)
        self._takeover.ask_commits(self._ledgers)

    def revoking(self, partitions: list[int], timeout_s: float) -> None:
        """Still ours: Starts on their way are waited for, and what was Started and not handed out is given back
        (free at once for the next owner, count unchanged); what handlers hold they keep alive and settle."""
        now = self._clock_ms()
        self._starts.advance(now, block_s=timeout_s)
        self._starts.give_back_behind(partitions)
        for partition in partitions:
            ledger = self._ledgers.get(partition)
            if ledger is not None:
                for entry in ledger.entries.values():
                    if entry.state is State.STARTING and isinstance(entry.delivery, Message):
                        self._writer.owned.give_back(entry.delivery.message_id)

    def dropped(self, partitions: list[int]) -> None:
        """No longer ours: forgotten (records read and not handed out are read again by the next owner)."""
        for partition in partitions:
            ledger = self._ledgers.pop(partition, None)
            if ledger is not None:
                ledger.owned = False

    def close(self) -> None:
        self._takeover.close()

    # --- internals -------------------------------------------------------------------------------------------------

    def _apply_settle(self, message: Message, kind: str, delay_ms: int, end: tuple[int, str] | None,
                      now: int) -> None:
        mid = message.message_id
        ledger = self._ledgers.get(mid.partition)
        entry = None if ledger is None else ledger.entries.get(mid.offset)
        if ledger is None or entry is None or entry.delivery is not message:
            return  # its partition is gone, or a superseded delivery's settle
        if kind in (ACK, END):
            if entry.state in ACTIVE:
                ledger.ending(entry, end)
                # Its group's next message may be Started now (after this End: the same producer writes both),
                # and goes out once this End is durable.
                self._ring.offer(ledger, ledger.groups.get(entry.group), now)
        else:
            counted = kind == RELEASE
            queue = ledger.back(entry, due_ms=now + (delay_ms if counted else 0), counted=counted)
            self._ring.offer(ledger, queue, now)

    def _apply_ended(self, ids: Sequence[MessageId], ok: bool, now: int) -> None:
        for mid in ids:
            ledger = self._ledgers.get(mid.partition)
            entry = None if ledger is None else ledger.entries.get(mid.offset)
            if ledger is None or entry is None or entry.state is not State.ENDING:
                continue
            if not ok:  # written again: the group must not move on before its End is durable
                if entry.end is None:
                    self._writer.owned.ack(mid)
                else:
                    self._writer.owned.end(mid, EndReason(entry.end[0]), entry.end[1])
                continue
            lowest = ledger.lowest_unfinished()
            queue = ledger.finish(entry)
            self._ring.offer(ledger, queue, now)
            if lowest == mid.offset:
                self.commits.book.touch(mid.partition)

    def _unpark(self, records: list[Any]) -> None:
        """Records parked while their partition was blind are read again; its commit goes back to the first of
        them until they are (their Starts durable, or in the ledger)."""
        first: dict[int, int] = {}
        for record in records:
            first.setdefault(record.partition(), record.offset())
        for partition, offset in first.items():
            self.commits.book.rewind(partition, offset)
        self._put_back(records)



def _due_ms(headers: Any) -> int:
    for name, value in headers or ():
        if name == HEADER_DELIVER_AT and value:
            return int(value)
    return 0
