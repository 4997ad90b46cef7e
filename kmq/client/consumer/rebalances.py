"""Rebalances: what a consumer does when its partitions change (GroupMembership calls these inside poll, on the
loop thread): revoked partitions are committed while still held; dropped or lost ones are forgotten, and what was
read of them and not handed out is read again by their next owner."""

from __future__ import annotations

from collections.abc import Callable

from kmq.client.consumer.committer import QueueCommitter
from kmq.client.consumer.deduplicator import Deduplicator
from kmq.client.consumer.groups.dispatch import GroupDispatch
from kmq.client.consumer.intake import Intake
from kmq.client.consumer.keep_alive import KeepAliveLoop
from kmq.client.consumer.offset_book import OffsetBook
from kmq.client.consumer.start_pipeline import StartPipeline


class Rebalances:
    """What a consumer does when its partitions change (GroupMembership calls these inside poll, on the loop
    thread)."""

    __slots__ = ("_book", "_closed", "_committer", "_dedup", "_groups", "_intake", "_keep_alives", "_pipeline",
                 "_start_timeout_s", "_topic")

    def __init__(self, *, topic: str, intake: Intake, pipeline: StartPipeline, book: OffsetBook,
                 committer: QueueCommitter, groups: GroupDispatch | None, dedup: Deduplicator | None,
                 keep_alives: KeepAliveLoop, closed: Callable[[], bool]) -> None:
        self._topic = topic
        self._intake = intake
        self._pipeline = pipeline
        self._book = book
        self._committer = committer
        self._groups = groups
        self._dedup = dedup
        self._keep_alives = keep_alives
        self._start_timeout_s = pipeline.start_timeout_s
        self._closed = closed

    def on_assigned(self, partitions: list[int]) -> None:
        self._intake.assigned(partitions)
        self._keep_alives.lost.difference_update(partitions)
        if self._groups is not None:
            self._groups.assigned(partitions)

    def on_revoking(self, partitions: list[int]) -> None:
        """Still ours: what is not handed out is Started again by whoever owns it next (grouped messages Started
        and not handed out are given back); what is, gets committed."""
        self._pipeline.rewind()
        if self._groups is not None:
            self._groups.revoking(partitions, self._start_timeout_s)
        mine = self._book.pending_in([(self._topic, p) for p in partitions])
        if mine:
            self._committer.commit(mine)

    def on_dropped(self, partitions: list[int], lost: bool) -> None:
        # Neither committed nor Started: the partition's next owner reads these records again.
        if lost:
            self._pipeline.rewind()
        gone = [(self._topic, p) for p in partitions]
        self._book.forget(gone)
        self._intake.forget(gone)
        if self._groups is not None:
            self._groups.dropped(partitions)
        if self._dedup is not None:
            self._dedup.dropped(partitions)  # another consumer may decide their duplicates now
        if lost:  # another member may own them already: their grouped messages are no longer kept alive here
            self._keep_alives.lost.update(partitions)

    def on_changed(self) -> None:
        if not self._closed():  # librdkafka revokes everything while closing: its pause state no longer matters
            self._intake.rebalanced()
