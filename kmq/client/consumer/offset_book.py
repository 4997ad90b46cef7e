"""The consumer's offset book: per messages-topic partition, the next offset it may commit.

An offset enters the book only once every record before it is safe to skip on a restart: its Start is durable
(this queue's records) or it needs none (other queues' records). Pure: partitions are (topic, partition) pairs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kmq._kafka.commit_policy import CommitPolicy

TopicPartitionKey = tuple[str, int]


class OffsetBook:
    """Offsets ready to commit, and the policy for committing those that no hand-out waits for."""

    __slots__ = ("_at", "_pending", "policy")

    def __init__(self, policy: CommitPolicy) -> None:
        self._pending: dict[TopicPartitionKey, int] = {}
        #: Per partition, the latest offset entered, committed or not.
        self._at: dict[TopicPartitionKey, int] = {}
        self.policy = policy

    def advance(self, offsets: Mapping[TopicPartitionKey, int], records: int) -> None:
        """Records up to ``offsets`` (exclusive) are safe to skip; ``records`` of them were read."""
        self._pending.update(offsets)
        self._at.update(offsets)
        self.policy.note(records)

    def rewind(self, first_offsets: Mapping[TopicPartitionKey, int]) -> None:
        """Records from ``first_offsets`` on go back to be read again: never commit past them. A partition forgotten
        meanwhile (given up) stays forgotten: a commit of it would move its new owner's offset back."""
        for tp, offset in first_offsets.items():
            if tp in self._at:
                self._pending[tp] = self._at[tp] = min(self._pending.get(tp, offset), offset)

    def touch(self, tp: TopicPartitionKey) -> None:
        """Commit ``tp`` again at its latest offset (what holds its commit back, message groups, moved on)."""
        if tp in self._at and tp not in self._pending:
            self._pending[tp] = self._at[tp]
            self.policy.note(1)

    def position(self, tp: TopicPartitionKey) -> int | None:
        """The latest offset entered for ``tp``, committed or not."""
        return self._at.get(tp)

    def forget(self, partitions: Iterable[TopicPartitionKey]) -> None:
        """Partitions this member no longer owns: their next owner commits."""
        for tp in partitions:
            self._pending.pop(tp, None)
            self._at.pop(tp, None)

    def pending(self) -> dict[TopicPartitionKey, int]:
        return dict(self._pending)

    def pending_in(self, partitions: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        gone = set(partitions)
        return {tp: off for tp, off in self._pending.items() if tp in gone}

    def committed(self, offsets: Mapping[TopicPartitionKey, int]) -> None:
        """``offsets`` are committed: drop the ones not advanced since."""
        for tp, offset in offsets.items():
            if self._pending.get(tp) == offset:
                del self._pending[tp]
        self.policy.committed()

    def __bool__(self) -> bool:
        return bool(self._pending)
