"""Rebalances: what a consumer does when its partitions change (GroupMembership calls these inside poll, on the
loop thread): revoked partitions are committed while still held; dropped or lost ones are forgotten, and what was
read of them and not handed out is read again by their next owner."""

from __future__ import annotations

from collections.abc import Callable

from kmq.client.consumer.committer import QueueCommitter
from kmq.client.consumer.intake import Intake
from kmq.client.consumer.offset_book import OffsetBook
from kmq.client.consumer.start_pipeline import StartPipeline


class Rebalances:
    """What a consumer does when its partitions change (GroupMembership calls these inside poll, on the loop
    thread)."""

    __slots__ = ("_book", "_closed", "_committer", "_intake", "_pipeline", "_topic")

    def __init__(self, *, topic: str, intake: Intake, pipeline: StartPipeline, book: OffsetBook,
                 committer: QueueCommitter, closed: Callable[[], bool]) -> None:
        self._topic = topic
        self._intake = intake
        self._pipeline = pipeline
        self._book = book
        self._committer = committer
        self._closed = closed

    def on_revoking(self, partitions: list[int]) -> None:
        """Still ours: what is not handed out is Started again by whoever owns it next; what is, gets committed."""
        self._pipeline.rewind()
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

    def on_changed(self) -> None:
        if not self._closed():  # librdkafka revokes everything while closing: its pause state no longer matters
            self._intake.rebalanced()
