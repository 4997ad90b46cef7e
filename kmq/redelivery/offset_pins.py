"""OffsetPins: the markers-partition offsets that hold in-flight Starts, and how many each holds.

A kmq batch record holds many Starts, a kafka-mq-go record one; a record stays pinned until every Start in it has
ended. The smallest pinned offset is where a tracker that takes the partition over must start reading to rebuild
what is in flight, so it is what the tracker commits. Pure: no Kafka.
"""

from __future__ import annotations

import heapq


class OffsetPins:
    """Live Starts per marker offset, with a heap of the offsets (entries whose count reached 0 are skipped)."""

    __slots__ = ("_counts", "_heap")

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}
        self._heap: list[int] = []

    def add(self, offset: int, starts: int) -> None:
        """``starts`` more in-flight Starts in the record at ``offset``."""
        counts = self._counts
        known = counts.get(offset)
        if known is None:
            heapq.heappush(self._heap, offset)
            counts[offset] = starts
        else:
            counts[offset] = known + starts

    def remove(self, offset: int) -> None:
        """One Start of the record at ``offset`` ended."""
        left = self._counts[offset] - 1
        if left:
            self._counts[offset] = left
        else:
            del self._counts[offset]

    def oldest(self) -> int | None:
        """The smallest offset still holding an in-flight Start, or None."""
        heap = self._heap
        while heap and heap[0] not in self._counts:
            heapq.heappop(heap)
        return heap[0] if heap else None
