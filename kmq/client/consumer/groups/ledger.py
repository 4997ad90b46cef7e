"""PartitionLedger: what the owner of one messages-topic partition knows of its records from the committed offset on.

Every grouped record read is an **Entry** in its group's FIFO (a **GroupQueue**), in the order Kafka appended them,
until it is finished (its End is durable). An entry's life:

    WAITING ──take──▶ STARTING ──Start durable──▶ OUT ──ack / reject / expire / purge──▶ ENDING ──End durable──▶ gone
       ▲                 │ Start failed              │ release(delay), give back
       └─────────────────┴───────────────────────────┘
    HELD (an earlier owner's delivery, learnt from the markers) ──its End──▶ gone
       └──its lease lapsed, its release, a hello of its client_id──▶ WAITING

A group's next entry may be Started when it is WAITING, due, and the group has fewer than ``concurrency`` entries
active (STARTING, OUT or HELD); with ``concurrency`` 1 only the first entry that is not ENDING may, so a message that
comes back is handed out again before any later one of its group. An ENDING entry does not hold the next one's Start
back (the End is written before that Start, by the same producer), but it holds its hand-out back until the End is
durable (``ending_before``): a next owner never finds a later message handed out before an earlier one ended.

A record the replay of the markers showed as finished before it was read (an earlier owner's acked message, or a
plain message some owner Started: the tracker answers for that one) is a FINISHED entry until it is read, and then
skipped.

The partition's committed offset is its lowest unfinished grouped record (``lowest_unfinished``), or where plain
records are safe to skip, whichever is lower. Pure: no Kafka; the records are opaque here.
"""

from __future__ import annotations

import contextlib
import enum
from collections import deque
from dataclasses import dataclass, field

from kmq.client.consumer.groups.marker_floor import MarkerFloor


class State(enum.Enum):
    #: In its group's FIFO, handed out when its turn comes and it is due.
    WAITING = "waiting"
    #: Taken: its Start is being written.
    STARTING = "starting"
    #: Started and handed out (buffered, or with a handler), not settled.
    OUT = "out"
    #: Settled for good (acked, rejected, expired, purged, dead-lettered): its End is on its way.
    ENDING = "ending"
    #: Started by an earlier owner whose lease has not lapsed.
    HELD = "held"
    #: Known finished from the markers before its record was read: skipped when read.
    FINISHED = "finished"


#: States that count toward a group's ``concurrency``.
ACTIVE = frozenset({State.STARTING, State.OUT, State.HELD})


@dataclass(slots=True, eq=False)
class Entry:
    """One record of the partition that is not finished (or, before it is read, known from the markers)."""

    offset: int
    state: State = State.WAITING
    #: Its group, once its record is read ("" before).
    group: str = ""
    #: The fetched record (payload, headers), once read.
    record: object = None
    #: The delivery count of its next (or current) delivery.
    delivery_count: int = 1
    #: WAITING: not before this (ms since the epoch).
    due_ms: int = 0
    #: HELD (and, after it, WAITING): the instance whose delivery it is, and that instance's client_id.
    holder: str = ""
    holder_client: str = ""
    #: HELD: when its lease lapses (broker time, ms).
    lease_ms: int = 0
    #: STARTING, OUT, ENDING: this owner's delivery (the Message handed out).
    delivery: object = None
    #: ENDING: the End to write again should its record fail ((end reason, reason text); None: an ack).
    end: tuple[int, str] | None = None
    #: It was handed out here and came back: its release or give-back is written before its next Start.
    again: bool = False


@dataclass(slots=True, eq=False)
class GroupQueue:
    """One group's unfinished entries of a partition, in offset order."""

    name: str
    entries: deque[Entry] = field(default_factory=deque)
    #: Entries STARTING, OUT or HELD.
    active: int = 0
    #: In the ready ring or its timers (so it is not queued twice).
    queued: bool = False


class PartitionLedger:
    """One partition's entries and group FIFOs. Loop thread."""

    def __init__(self, partition: int, concurrency: int = 1, since: int = 0) -> None:
        self.partition = partition
        self.concurrency = concurrency
        #: The committed offset when the partition was assigned; records from here on are this ledger's concern.
        self.since = since
        #: The next offset of this queue's records to read (records before it were read here).
        self.read_to = since
        #: True while a new owner's replay of the markers is under way (see Takeover): nothing goes out.
        self.blind = False
        #: A markers offset before every marker this owner writes about the partition's records (the commit's
        #: ``m=`` when no Start of a record at or after the committed offset was noted); None: not known yet.
        self.base: int | None = None
        #: A commit naming ``m=`` exists for this assignment: grouped messages may be Started (a next owner then
        #: finds their Starts). Until then nothing goes out.
        self.anchored = False
        #: Entries by offset: unfinished grouped records read, and what the markers told of records not yet read.
        self.entries: dict[int, Entry] = {}
        self.groups: dict[str, GroupQueue] = {}
        #: Grouped offsets in read order; finished ones are dropped from the front lazily.
        self._order: deque[int] = deque()
        #: HELD entries, for their leases.
        self.held: dict[int, Entry] = {}
        self.floor = MarkerFloor()
        #: False once the partition is no longer ours: what still refers to it is ignored.
        self.owned = True
        #: Grouped records read and not finished (waiting or active): the payload buffer's use.
        self.buffered = 0
        #: The partition holds (or its commit said it held) grouped messages: its commits carry metadata.
        self.grouped = False

    # --- reading --------------------------------------------------------------------------------------------------

    def skip_finished(self, offset: int) -> bool:
        """For a plain record read: True (skip it) when the markers showed it Started by an earlier owner."""
        entry = self.entries.get(offset)
        if entry is not None and entry.state is State.FINISHED and entry.record is None:
            del self.entries[offset]
            return True
        return False

    def add(self, offset: int, group: str, record: object, due_ms: int = 0) -> GroupQueue | None:
        """A grouped record read, in offset order: its group's queue, or None when the markers showed it finished."""
        entry = self.entries.get(offset)
        if entry is not None and entry.state is State.FINISHED:
            del self.entries[offset]
            return None
        if entry is None:
            entry = Entry(offset, due_ms=due_ms)
            self.entries[offset] = entry
        else:  # known from the markers: held elsewhere, or given back / released there
            entry.due_ms = max(entry.due_ms, due_ms)
        entry.group = group
        entry.record = record
        queue = self.groups.get(group)
        if queue is None:
            queue = self.groups[group] = GroupQueue(group)
        queue.entries.append(entry)
        if entry.state in ACTIVE:
            queue.active += 1
        self._order.append(offset)
        self.buffered += 1
        self.grouped = True
        return queue

    # --- the lowest unfinished record ----------------------------------------------------------------------------

    def lowest_unfinished(self) -> int | None:
        """The offset of the first grouped record read and not finished, or None."""
        order, entries = self._order, self.entries
        while order:
            entry = entries.get(order[0])
            if entry is not None and entry.record is not None:
                return order[0]
            order.popleft()
        return None

    # --- hand-out ---------------------------------------------------------------------------------------------------

    def next_up(self, queue: GroupQueue) -> Entry | None:
        """The entry of ``queue`` to hand out next, due or not, or None (the group is at its concurrency, or has
        nothing waiting). With concurrency 1 only the head: order holds."""
        if queue.active >= self.concurrency or not queue.entries:
            return None
        if self.blind or not self.anchored:
            return None
        if self.concurrency == 1:
            for entry in queue.entries:
                if entry.state is not State.ENDING:
                    return entry if entry.state is State.WAITING else None
            return None
        return next((e for e in queue.entries if e.state is State.WAITING), None)

    def ending_before(self, entry: Entry) -> bool:
        """True while an earlier entry of ``entry``'s group waits for its End to be durable (concurrency 1: then
        ``entry``, Started, is not handed out yet)."""
        if self.concurrency != 1:
            return False
        for earlier in self.groups[entry.group].entries:
            if earlier is entry:
                return False
            if earlier.state is State.ENDING:
                return True
        return False

    def take(self, entry: Entry) -> None:
        """``entry`` is being Started."""
        entry.state = State.STARTING
        self.groups[entry.group].active += 1

    def started(self, entry: Entry, delivery: object) -> None:
        """Its Start is durable: ``delivery`` goes out."""
        entry.state = State.OUT
        entry.delivery = delivery

    def back(self, entry: Entry, *, due_ms: int, counted: bool) -> GroupQueue | None:
        """``entry`` comes back to wait in place (a Start failed, a release, a give-back, a lease lapsed or its
        holder's release): ``counted`` when a handler may have had it."""
        if entry.state in ACTIVE and entry.record is not None:
            self.groups[entry.group].active -= 1
        self.held.pop(entry.offset, None)
        entry.state = State.WAITING
        entry.again = entry.delivery is not None
        entry.delivery = None
        entry.due_ms = due_ms
        if counted:
            entry.delivery_count += 1
        return self.groups[entry.group] if entry.record is not None else None

    def ending(self, entry: Entry, end: tuple[int, str] | None) -> None:
        """Settled for good: its End is on its way (the group's next entry may be Started meanwhile)."""
        if entry.state in ACTIVE and entry.record is not None:
            self.groups[entry.group].active -= 1
        entry.state = State.ENDING
        entry.end = end

    def finish(self, entry: Entry) -> GroupQueue | None:
        """Its End is durable (or the markers show it finished): it leaves its group, whose queue is returned."""
        self.entries.pop(entry.offset, None)
        self.held.pop(entry.offset, None)
        if entry.record is None:  # not read yet: skipped when it is
            entry.state = State.FINISHED
            self.entries[entry.offset] = entry
            return None
        queue = self.groups[entry.group]
        if entry.state in ACTIVE:
            queue.active -= 1
        entry.state = State.FINISHED
        with contextlib.suppress(ValueError):
            queue.entries.remove(entry)  # the head, with concurrency 1
        self.buffered -= 1
        if not queue.entries:
            del self.groups[queue.name]
        return queue

    def hold(self, entry: Entry, *, holder: str, holder_client: str, lease_ms: int, delivery_count: int) -> None:
        """The markers show ``entry`` Started by another instance: held until its lease lapses."""
        if entry.record is not None and entry.state not in ACTIVE:
            self.groups[entry.group].active += 1
        entry.state = State.HELD
        entry.holder, entry.holder_client = holder, holder_client
        entry.lease_ms = lease_ms
        entry.delivery_count = delivery_count
        self.held[entry.offset] = entry
