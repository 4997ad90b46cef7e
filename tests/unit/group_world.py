"""A world for message groups without a broker: one messages partition, one markers log, and owners (GroupDispatch
with its real ledger, ready ring, owned starts, takeover and inheritance) whose Kafka edges are fakes that write to
and read from that log. Handlers are the test's: it acks, releases, gives back or lets run what owners hand out.

The oracle watches every hand-out: per group, in offset order (every earlier message of the group is acked), never
two at once (no other delivery of the group is live: handed out by an instance that did not crash, not settled).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kmq.client.consumer.groups.dispatch import ACK, END, RELEASE, RETURN, GroupDispatch, GroupRules
from kmq.client.consumer.groups.follower import MarkerRecord
from kmq.client.consumer.groups.owned_starts import OwnedStarts
from kmq.client.consumer.groups.takeover import Takeover
from kmq.client.message import Message
from kmq.delivery import Delivery
from kmq.wire import HEADER_GROUP, RELEASE_REASON, RETURN_REASON, MessageId
from kmq.wire.marker_batch import decode_batch, encode_settles, encode_starts
from kmq.wire.markers import EndReason, Marker, MarkerType

QUEUE = b"q"
AFTER_MS = 1_000


@dataclass
class Rec:
    """A messages-topic record as the dispatch reads one."""

    offset_: int
    group: str | None

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self.offset_

    def headers(self) -> list[tuple[str, bytes]] | None:
        return None if self.group is None else [(HEADER_GROUP, self.group.encode())]


class _Settler:
    def _ack(self, message: Message) -> None: ...
    def _release(self, message: Message, delay_ms: int) -> None: ...
    def _reject(self, message: Message, reason: str) -> None: ...
    def _give_back(self, message: Message) -> None: ...
    def _keep_alive(self, message: Message) -> None: ...


class Violation(AssertionError):
    pass


@dataclass
class World:
    records: list[Rec] = field(default_factory=list)
    #: The markers log: (appended ms, value).
    markers: list[tuple[int, bytes]] = field(default_factory=list)
    now: int = 1_000_000
    committed: tuple[int, str | None] = (-1001, None)
    #: Offsets whose End (an ack, or a dead letter's) is durable.
    acked: set[int] = field(default_factory=set)
    #: Per group, its live delivery: (instance, message).
    live: dict[str, tuple[str, Message]] = field(default_factory=dict)
    handouts: list[tuple[str, int, int]] = field(default_factory=list)
    dead_letters: list[tuple[int, int, str]] = field(default_factory=list)

    def send(self, group: str | None) -> None:
        self.records.append(Rec(len(self.records), group))

    def append(self, value: bytes) -> int:
        self.markers.append((self.now, value))
        return len(self.markers) - 1

    def handed_out(self, instance: str, message: Message) -> None:
        group, offset = message.group or "", message.message_id.offset
        if group in self.live:
            raise Violation(f"group {group}: {offset} handed out by {instance} while {self.live[group]} is live")
        earlier = [r.offset_ for r in self.records if r.group == group and r.offset_ < offset]
        if not set(earlier) <= self.acked:
            raise Violation(f"group {group}: {offset} handed out before {sorted(set(earlier) - self.acked)}")
        self.live[group] = (instance, message)
        self.handouts.append((group, offset, message.delivery_count))

    def grouped(self) -> set[int]:
        return {r.offset_ for r in self.records if r.group is not None}


class FakeFollower:
    """The markers log, read as MarkersFollower reads the queue's markers partition."""

    def __init__(self, world: World) -> None:
        self._world = world
        self.position = -1

    @property
    def reading(self) -> bool:
        return self.position >= 0

    def replay_from(self, offset: int) -> int:
        if not self.reading or offset < self.position:
            self.position = offset
        return len(self._world.markers)

    def read(self) -> list[MarkerRecord]:
        if not self.reading:
            return []
        got = [MarkerRecord(i, at, decode_batch(value))
               for i, (at, value) in enumerate(self._world.markers) if i >= self.position]
        self.position = max(self.position, len(self._world.markers))
        return got

    def broker_now_ms(self) -> int:
        return self._world.now

    def end_offset(self) -> int:
        return len(self._world.markers)

    def stop(self) -> None:
        self.position = -1

    def close(self) -> None:
        pass


class FakeSink:
    """The writer's owner-tracked settle sink: settles wait until ``Owner.flush`` writes them."""

    def __init__(self) -> None:
        self.keep_alives: list[MessageId] = []
        self.others: list[Marker] = []
        self.acks: list[MessageId] = []

    def ack(self, mid: MessageId) -> None:
        self.acks.append(mid)

    def end(self, mid: MessageId, reason: EndReason, text: str = "") -> None:
        self.others.append(Marker(MarkerType.END, mid, end_reason=reason, reason=text))

    def release(self, mid: MessageId, delay_ms: int) -> None:
        self.others.append(Marker(MarkerType.KEEPALIVE, mid, delay_ms, reason=RELEASE_REASON))

    def give_back(self, mid: MessageId) -> None:
        self.others.append(Marker(MarkerType.KEEPALIVE, mid, 0, reason=RETURN_REASON))

    def keep_alive(self, mid: MessageId) -> None:
        self.keep_alives.append(mid)


class Owner:
    """A consumer that owns the partition (or did: ``revoked``), or crashed (``dead``)."""

    def __init__(self, world: World, instance: str, *, fail_starts: bool = False,
                 rules: GroupRules | None = None) -> None:
        self.world = world
        self.instance = instance
        self.fail_starts = fail_starts
        self.sink = FakeSink()
        self.settles = self  # writer.settles
        self.starts = self  # writer.starts
        self.backlog: deque[Rec] = deque()
        self.read_pos = -1
        self.book = 0
        self.out: dict[MessageId, Message] = {}
        #: Ends in the log whose delivery report has not reached the owner yet.
        self.unreported: list[MessageId] = []
        self.dead = self.revoked = False
        self.dispatch = GroupDispatch(
            rules=rules or GroupRules(), writer=self,  # type: ignore[arg-type]
            starts=OwnedStarts(self, self._handed_out, add=lambda _m: None,  # type: ignore[arg-type]
                               discard=lambda _mid: None),
            takeover=Takeover(FakeFollower(world), self._committed_of, lambda: world.now),  # type: ignore[arg-type]
            book=self, make_message=self._message, dead_letter=self._dead_letter, put_back=self.backlog.extendleft,
            last_marker=lambda: len(world.markers) - 1, clock_ms=lambda: world.now)
        self.dispatch.assigned([0])
        self.read_pos = self.book = max(0, world.committed[0])

    # --- the writer's seams ----------------------------------------------------------------------------------

    @property
    def owned(self) -> FakeSink:
        return self.sink

    def drain(self) -> None:
        self.flush()

    def wake(self) -> None:
        pass

    def start_owned(self, messages: Sequence[Message]) -> list[Delivery[MessageId]]:
        delivery: Delivery[MessageId] = Delivery()
        if self.fail_starts:
            delivery._set(None, RuntimeError("start failed"))
            return [delivery]
        offset = self.world.append(encode_starts(QUEUE, AFTER_MS, (), refs=messages, client_id="c",
                                                 instance_id=self.instance, owner_tracked=True))
        self.dispatch.commits.start_recorded([m.message_id for m in messages], offset)
        delivery._set(messages[0].message_id, None)
        return [delivery]

    # --- what the owner does ---------------------------------------------------------------------------------

    def round(self, room: int = 50, reads: int = 5) -> None:
        """One loop round: apply what happened, read some records, hand out."""
        if self.dead or self.revoked:
            return
        self.dispatch.advance()
        self._read(reads)
        self.dispatch.hand_out(room)
        self.dispatch.advance()

    def report(self) -> None:
        """The delivery reports of the Ends written come in."""
        ended, self.unreported = self.unreported, []
        if ended and not self.dead:
            self.dispatch.ended(ended, True)

    def flush(self) -> None:
        """Writes the settles waiting (durable at once; their delivery reports come with ``report``)."""
        sink = self.sink
        if not (sink.keep_alives or sink.others or sink.acks):
            return
        self.world.append(encode_settles(QUEUE, AFTER_MS, keep_alives=sink.keep_alives, others=sink.others,
                                         acks=sink.acks, client_id="c", instance_id=self.instance,
                                         owner_tracked=True))
        ended = [*(m.message_id for m in sink.others if m.type is MarkerType.END), *sink.acks]
        self.world.acked.update(mid.offset for mid in ended)
        sink.keep_alives, sink.others, sink.acks = [], [], []
        self.unreported += ended

    def commit_all(self) -> None:
        if self.dead or self.revoked:
            return
        point = self.dispatch.commits.commit_point(0, self.book)
        if point is not None:
            self.world.committed = point
            self.dispatch.commits.committed(0, point[0])

    def keep_alive(self) -> None:
        if not self.dead:
            for mid in self.out:
                self.sink.keep_alive(mid)

    def settle(self, message: Message, how: str, delay_ms: int = 0) -> None:
        """The handler of ``message`` settles it (as InFlightMessages does: the dispatch hears first)."""
        self.out.pop(message.message_id, None)
        if self.world.live.get(message.group or "", ("", None))[1] is message:
            del self.world.live[message.group or ""]
        mid = message.message_id
        if how == ACK:
            self.dispatch.settled(message, ACK)
            self.sink.ack(mid)
        elif how == RELEASE:
            self.dispatch.settled(message, RELEASE, delay_ms)
            self.sink.release(mid, delay_ms)
        else:
            self.dispatch.settled(message, RETURN)
            self.sink.give_back(mid)

    def crash(self) -> None:
        self.dead = True
        for group, (instance, _) in list(self.world.live.items()):
            if instance == self.instance:
                del self.world.live[group]
        self.out.clear()
        self.sink = FakeSink()  # what it had not written is lost

    def revoke(self) -> None:
        """A clean rebalance: gives back what it Started and did not hand out, commits, keeps its handlers'."""
        self.dispatch.revoking([0], 0)
        self.flush()
        self.commit_all()
        self.dispatch.dropped([0])
        self.revoked = True

    # --- internals ------------------------------------------------------------------------------------------

    def _read(self, most: int) -> None:
        """Up to ``most`` records, in one batch as the Start pipeline takes them."""
        batch: list[Rec] = []
        while len(batch) < most:
            if self.backlog:
                batch.append(self.backlog.popleft())
            elif self.read_pos < len(self.world.records):
                batch.append(self.world.records[self.read_pos])
                self.read_pos += 1
            else:
                break
        for record in self.dispatch.divert_many(batch):  # plain records: Started for the tracker, safe to skip
            offset = self.world.append(encode_starts(QUEUE, AFTER_MS, (), refs=[self._message(record)],
                                                     client_id="c", instance_id=self.instance))
            self.dispatch.commits.start_recorded([MessageId(0, record.offset_)], offset)
        self.book = max([self.book, *(record.offset_ + 1 for record in batch)])

    # --- the consumer's offsets (groups.commits.Book) --------------------------------------------------------

    def commit(self, _partition: int, _since: int) -> bool:
        self.commit_all()
        return True

    def touch(self, _partition: int) -> None:
        pass

    def rewind(self, _partition: int, offset: int) -> None:
        self.book = min(self.book, offset)

    def _committed_of(self, partitions: list[int]) -> dict[int, tuple[int, str | None]]:
        return dict.fromkeys(partitions, self.world.committed)

    def _message(self, record: Any) -> Message:
        mid = MessageId(0, record.offset())
        headers = {} if record.group is None else {HEADER_GROUP: record.group.encode()}
        return Message(b"%d" % record.offset(), headers, "q", mid, 1, mid, 0, _Settler())

    def _dead_letter(self, message: Message, reason: str) -> None:
        self.world.dead_letters.append((message.message_id.offset, message.delivery_count, reason))
        self.dispatch.settled(message, END, 0, (EndReason.REJECTED.value, reason))
        self.sink.end(message.message_id, EndReason.REJECTED, reason)

    def _handed_out(self, messages: list[Message]) -> None:
        for message in messages:
            self.world.handed_out(self.instance, message)
            self.out[message.message_id] = message
