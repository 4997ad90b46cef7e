"""ReadyRing: the groups whose next message may go out, taken from in turn (fair dispatch), across a consumer's
partitions.

A group is offered whenever its next message may have become takeable (read into an empty group, its previous one
finished, a message of it came back, a lease lapsed). An offered group whose next message is due joins the ring's
back; one due later waits in a timer heap until then. ``take(n)`` goes round the ring: one message from each group
in turn, and a group with room for more (``group_concurrency`` > 1) rejoins the back. So a group with 100,000
messages waiting gets one turn per round, like a group with one. Plain (ungrouped) messages share the consumer's room
as one more participant (PollLoop). Pure: no Kafka.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque

from kmq.client.consumer.groups.ledger import Entry, GroupQueue, PartitionLedger

Turn = tuple[PartitionLedger, GroupQueue]


class ReadyRing:
    """Loop thread."""

    __slots__ = ("_order", "_ring", "_timers")

    def __init__(self) -> None:
        self._ring: deque[Turn] = deque()
        self._timers: list[tuple[int, int, PartitionLedger, GroupQueue]] = []
        self._order = itertools.count()

    def __len__(self) -> int:
        """Groups ready now (due ones in the timers not counted until ``take`` moves them)."""
        return len(self._ring)

    def offer(self, ledger: PartitionLedger, queue: GroupQueue | None, now_ms: int) -> None:
        """``queue``'s next message may be takeable now or at its due time."""
        if queue is None or queue.queued or not ledger.owned:
            return
        entry = ledger.next_up(queue)
        if entry is None:
            return
        queue.queued = True
        if entry.due_ms <= now_ms:
            self._ring.append((ledger, queue))
        else:
            heapq.heappush(self._timers, (entry.due_ms, next(self._order), ledger, queue))

    def take(self, room: int, now_ms: int) -> list[tuple[PartitionLedger, Entry]]:
        """Up to ``room`` entries, one per group in turn; each is taken (STARTING) in its ledger."""
        self._move_due(now_ms)
        taken: list[tuple[PartitionLedger, Entry]] = []
        ring = self._ring
        while ring and len(taken) < room:
            ledger, queue = ring.popleft()
            queue.queued = False
            if not ledger.owned:
                continue
            entry = ledger.next_up(queue)
            if entry is None:
                continue
            if entry.due_ms > now_ms:  # came back with a delay since it was offered
                self.offer(ledger, queue, now_ms)
                continue
            ledger.take(entry)
            taken.append((ledger, entry))
            self.offer(ledger, queue, now_ms)  # room for another of it (group_concurrency > 1): at the back
        return taken

    def next_due_in_ms(self, now_ms: int) -> int | None:
        """Milliseconds until a timer is due (0: some group is ready now), or None."""
        if self._ring:
            return 0
        if not self._timers:
            return None
        return max(0, self._timers[0][0] - now_ms)

    def _move_due(self, now_ms: int) -> None:
        timers = self._timers
        while timers and timers[0][0] <= now_ms:
            _, _, ledger, queue = heapq.heappop(timers)
            queue.queued = False
            self.offer(ledger, queue, now_ms)
