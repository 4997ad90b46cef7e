"""QueueIndex: a live classification's per-queue views, kept as each message's life is replaced: the
``QueueSummary`` figures (a tally adding and taking away each message's share), the messages of each state in the
order they came to it, and the oldest waiting and in-flight messages (lazy heaps). Pure: no Kafka."""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from kmq.ops.lifecycle import Key, MessageLife, QueueSummary
from kmq.wire import vocabulary as v


@dataclass(slots=True)
class _Tally:
    """One queue's ``QueueSummary`` figures, kept by adding and taking away each message's share."""

    states: Counter[str] = field(default_factory=Counter)
    counters: Counter[str] = field(default_factory=Counter)

    def add(self, m: MessageLife, sign: int) -> None:
        self.states[m.state] += sign
        for name, count in m.counters.items():
            self.counters[name] += sign * count
        self.counters[v.DUPLICATE_ACKS] += sign * max(0, m.acks - 1)
        self.counters[v.ACKED_MORE_THAN_ONCE] += sign * (m.acks > 1)
        self.counters[v.DELIVERED_MORE_THAN_ONCE] += sign * (m.counters[v.DELIVERED] > 1)


def _since(life: MessageLife, state: str) -> int | None:
    return life.waiting_since_ms if state == v.WAITING else life.in_flight_since_ms


class QueueIndex:
    """Each queue's figures, its messages by state, and its oldest waiting and in-flight messages."""

    def __init__(self) -> None:
        self._tallies: dict[str, _Tally] = {}
        #: queue -> state -> its messages, in the order they came to it (acked ones stay here when forgotten).
        self._by_state: dict[str, dict[str, dict[Key, None]]] = {}
        #: (queue, state) -> (since, key), lazy: an entry no longer true is dropped when it reaches the top.
        self._oldest: dict[tuple[str, str], list[tuple[int, Key]]] = {}

    def replace(self, key: Key, old: MessageLife | None, new: MessageLife | None) -> None:
        """A message's life changed from ``old`` to ``new`` (None: none before, or gone)."""
        tally = self._tallies.setdefault(key[0], _Tally())
        states = self._by_state.setdefault(key[0], {})
        if old is not None:
            tally.add(old, -1)
            states[old.state].pop(key, None)
        if new is None:
            return
        tally.add(new, +1)
        states.setdefault(new.state, {})[key] = None
        for state in (v.WAITING, v.IN_FLIGHT):
            since = _since(new, state)
            was = None if old is None or old.state != state else _since(old, state)
            if new.state == state and since is not None and since != was:
                heapq.heappush(self._oldest.setdefault((key[0], state), []), (since, key))

    def queues(self) -> list[str]:
        return sorted(self._tallies)

    def in_state(self, queue: str, state: str) -> Mapping[Key, None]:
        """The queue's messages in ``state``, oldest arrival first."""
        return self._by_state.get(queue, {}).get(state, {})

    def count(self, queue: str, state: str) -> int:
        return len(self.in_state(queue, state))

    def keys(self, queue: str, state: str, newest_first: bool = True) -> Iterator[Key]:
        """The queue's messages in ``state``, by when they came to it."""
        found = self._by_state.get(queue, {}).get(state, {})
        return iter(reversed(found) if newest_first else found)

    def summary(self, queue: str, lives: Mapping[Key, MessageLife]) -> QueueSummary:
        """``lifecycle.summarise``'s figures for one queue (no window); ``lives`` tells which heap entries hold."""
        tally = self._tallies.get(queue) or _Tally()
        return QueueSummary(states=+tally.states, counters=+tally.counters,
                            oldest_waiting_ms=self._oldest_since(queue, v.WAITING, lives),
                            oldest_in_flight_ms=self._oldest_since(queue, v.IN_FLIGHT, lives))

    def _oldest_since(self, queue: str, state: str, lives: Mapping[Key, MessageLife]) -> int:
        heap = self._oldest.get((queue, state))
        while heap:
            since, key = heap[0]
            life = lives.get(key)
            if life is not None and life.state == state and since == _since(life, state):
                return since
            heapq.heappop(heap)
        return 0
