"""QueueCommitter: commits a queue's offsets from its offset book, and keeps the book in step with the outcome.

With message groups, a partition is committed no further than its lowest unfinished grouped record, with the markers
offset its next owner replays from in the commit's metadata (kmq.client.consumer.groups.commits).
"""

from __future__ import annotations

from collections.abc import Mapping

from kmq import _kafka
from kmq._kafka.factory import GroupClient
from kmq._kafka.offsets import CommitOutcome
from kmq.client.consumer.groups.commits import GroupCommits
from kmq.client.consumer.offset_book import OffsetBook, TopicPartitionKey


class QueueCommitter:
    """Loop thread (and ``close`` once the loop stopped)."""

    __slots__ = ("_book", "_client", "_what", "groups")

    def __init__(self, client: GroupClient, book: OffsetBook, queue: str) -> None:
        self._client = client
        self._book = book
        self._what = f"queue {queue!r}"
        #: Set when the queue's consumer handles message groups.
        self.groups: GroupCommits | None = None

    def commit(self, offsets: Mapping[TopicPartitionKey, int],
               attempts: int = _kafka.COMMIT_ATTEMPTS) -> CommitOutcome:
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
