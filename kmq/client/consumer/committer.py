"""QueueCommitter: commits a queue's offsets from its offset book, and keeps the book in step with the outcome.

With message groups, a partition is committed no further than its lowest unfinished grouped record, with the markers
offset its next owner replays from in the commit's metadata (kmq.client.consumer.groups.commits).
"""

from __future__ import annotations

from collections.abc import Mapping, Set

import structlog

from kmq import _kafka
from kmq._kafka.factory import GroupClient
from kmq._kafka.offsets import CommitOutcome
from kmq.client.consumer.groups.commits import GroupCommits
from kmq.client.consumer.offset_book import OffsetBook, TopicPartitionKey

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)


class QueueCommitter:
    """Loop thread (and ``close`` once the loop stopped)."""

    __slots__ = ("_book", "_client", "_left", "_what", "groups")

    def __init__(self, client: GroupClient, book: OffsetBook, queue: str, left: Set[int] = frozenset()) -> None:
        self._client = client
        self._book = book
        self._what = f"queue {queue!r}"
        #: Partitions this member gave up (the intake's): never committed. Kafka takes a member's commit of any
        #: partition, so one of a partition owned by another member now would move that owner's offset back.
        self._left = left
        #: Set when the queue's consumer handles message groups.
        self.groups: GroupCommits | None = None

    def commit(self, offsets: Mapping[TopicPartitionKey, int],
               attempts: int = _kafka.COMMIT_ATTEMPTS) -> CommitOutcome:
        if self._left and any(tp[1] in self._left for tp in offsets):
            gone = [tp for tp in offsets if tp[1] in self._left]
            log.warning("commit_of_given_up_partitions_dropped", of=self._what, partitions=[tp[1] for tp in gone])
            self._book.forget(gone)
            offsets = {tp: offset for tp, offset in offsets.items() if tp[1] not in self._left}
            if not offsets:
                return CommitOutcome.FENCED
        if self.groups is None:
            outcome = _kafka.commit(self._client, offsets, self._what, attempts)
            points = offsets
        else:
            points, metadata = {}, {}
            for tp, offset in offsets.items():
                point = self.groups.commit_point(tp[1], offset)
                if point is not None:  # None: a partition whose takeover has not begun is not committed yet
                    points[tp] = point[0]
                    if point[1] is not None:
                        metadata[tp] = point[1]
            if not points:
                return CommitOutcome.COMMITTED
            outcome = (_kafka.commit(self._client, points, self._what, attempts, metadata=metadata) if metadata
                       else _kafka.commit(self._client, points, self._what, attempts))
        if outcome is CommitOutcome.COMMITTED:
            self._book.committed({tp: offsets[tp] for tp in points})
            if self.groups is not None:
                for tp, offset in points.items():
                    self.groups.committed(tp[1], offset)
        elif outcome is CommitOutcome.FENCED:
            self._book.forget(offsets)
        return outcome

    def commit_pending(self, attempts: int = _kafka.COMMIT_ATTEMPTS) -> CommitOutcome:
        """Commits everything the book holds."""
        return self.commit(self._book.pending(), attempts)
