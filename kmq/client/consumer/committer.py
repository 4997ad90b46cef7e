"""QueueCommitter: commits a queue's offsets from its offset book, and keeps the book in step with the outcome."""

from __future__ import annotations

from collections.abc import Mapping

from kmq import _kafka
from kmq._kafka.factory import GroupClient
from kmq._kafka.offsets import CommitOutcome
from kmq.client.consumer.offset_book import OffsetBook, TopicPartitionKey


class QueueCommitter:
    """Loop thread (and ``close`` once the loop stopped)."""

    __slots__ = ("_book", "_client", "_what")

    def __init__(self, client: GroupClient, book: OffsetBook, queue: str) -> None:
        self._client = client
        self._book = book
        self._what = f"queue {queue!r}"

    def commit(self, offsets: Mapping[TopicPartitionKey, int],
               attempts: int = _kafka.COMMIT_ATTEMPTS) -> CommitOutcome:
        outcome = _kafka.commit(self._client, offsets, self._what, attempts)
        if outcome is CommitOutcome.COMMITTED:
            self._book.committed(offsets)
        elif outcome is CommitOutcome.FENCED:
            self._book.forget(offsets)
        return outcome

    def commit_pending(self, attempts: int = _kafka.COMMIT_ATTEMPTS) -> CommitOutcome:
        """Commits everything the book holds."""
        return self.commit(self._book.pending(), attempts)
