"""GroupCommits: where a messages-topic partition holding grouped messages may be committed, and with what metadata
(docs/concepts/groups.md, "The owner's state").

A partition is committed no further than its lowest unfinished grouped record (nor, while its takeover is under way,
its first parked record), with the commit's metadata ``kmq-g1 m=<M>``: the markers offset a next owner replays from,
taken from the partition's marker floor (the Start records noted durable), or from its base (a markers offset before
anything this owner writes) when no record at or after the committed offset has a marker. Before its first grouped
Start an assignment whose commit names no ``m=`` commits one (the anchor). Loop thread, but ``start_recorded``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol

import structlog

from kmq import wire
from kmq.client.consumer.groups.ledger import PartitionLedger
from kmq.client.consumer.groups.marker_floor import highest_offsets
from kmq.client.consumer.groups.owned_starts import OwnedStarts
from kmq.client.consumer.groups.takeover import Takeover
from kmq.errors import KmqError
from kmq.wire import MessageId

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)


class Book(Protocol):
    """The consumer's offsets, as the groups act on them (an adapter over its OffsetBook and QueueCommitter)."""

    def commit(self, partition: int, since: int) -> bool:
        """Commits ``partition`` now (at its latest offset, or ``since`` before any); True once committed."""
        ...

    def touch(self, partition: int) -> None:
        """``partition`` should be committed again (what held its commit back moved on)."""
        ...

    def rewind(self, partition: int, offset: int) -> None:
        """``partition``'s records from ``offset`` on are read again: never commit past it until they are."""
        ...


class GroupCommits:
    __slots__ = ("_book", "_last_marker", "_ledgers", "_log", "_notes", "_starts", "_takeover")

    def __init__(self, ledgers: dict[int, PartitionLedger], takeover: Takeover, starts: OwnedStarts, book: Book,
                 last_marker: Callable[[], int], logger: structlog.typing.FilteringBoundLogger = log) -> None:
        self._ledgers = ledgers
        self._takeover = takeover
        self._starts = starts
        self._book = book
        #: The markers offset of this consumer's newest durable marker record.
        self._last_marker = last_marker
        self._log = logger
        #: Start records noted durable, not yet entered in their partitions' marker floors.
        self._notes: deque[tuple[Sequence[MessageId], int]] = deque()

    @property
    def book(self) -> Book:
        return self._book

    def start_recorded(self, ids: Sequence[MessageId], markers_offset: int) -> None:
        """A Start record of ``ids`` is durable at ``markers_offset`` (producer thread)."""
        self._notes.append((ids, markers_offset))

    def commit_point(self, partition: int, offset: int) -> tuple[int, str | None] | None:
        """Where ``partition`` may be committed when its plain records are safe to skip up to ``offset``, and the
        commit's metadata (None: a partition without grouped messages, committed as before groups); None: not
        now (its takeover has not begun)."""
        self._note_starts()
        ledger = self._ledgers.get(partition)
        if ledger is None:
            return offset, None
        if ledger.blind:
            floor = self._takeover.blind_floor(partition)
            if floor is None:
                return None
            offset = min(offset, floor)
        lowest = ledger.lowest_unfinished()
        if lowest is not None:
            offset = min(offset, lowest)
        if not ledger.grouped:
            return offset, None
        markers_offset = ledger.floor.at(offset)
        if markers_offset is None and ledger.base is not None:
            if not self._starts and ledger.anchored:
                # Nothing Started is on its way: every later marker lands after the last one reported.
                ledger.base = max(ledger.base, self._last_marker() + 1)
            markers_offset = ledger.base
        return offset, wire.group_commit_metadata(markers_offset)

    def committed(self, partition: int, offset: int) -> None:
        ledger = self._ledgers.get(partition)
        if ledger is not None:
            ledger.floor.committed(offset)

    def anchor(self, ledger: PartitionLedger) -> bool:
        """Before the first grouped Start of an assignment whose commit names no ``m=``: a commit that does, so a
        next owner finds what this one Starts (even if it never commits again). True once committed."""
        try:
            self._takeover.anchor(ledger)
        except KmqError as err:
            self._log.warning("group_anchor_failed", partition=ledger.partition, error=str(err))
            return False
        ledger.grouped = ledger.anchored = True
        if not self._book.commit(ledger.partition, ledger.since):
            ledger.anchored = False
        return ledger.anchored

    def _note_starts(self) -> None:
        notes = self._notes
        while notes:
            ids, markers_offset = notes.popleft()
            for partition, offset in highest_offsets(ids).items():
                ledger = self._ledgers.get(partition)
                if ledger is not None:
                    ledger.floor.note(offset, markers_offset)
