"""Outcome: what a simulation leaves besides the records (committed offsets, purge times, the ground truth), and the
Ledger that sums each plan's truth into it."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from kmq.ops.audit.synthetic.life import Life
from kmq.ops.audit.synthetic.plans import Truth, truth
from kmq.wire import MessageId


@dataclass(slots=True)
class Outcome:
    """The simulation's result besides what the sink holds."""

    now_ms: int
    committed: dict[str, dict[int, int]] = field(default_factory=lambda: defaultdict(dict))
    purged_before: dict[str, int] = field(default_factory=dict)
    #: Per queue: states and counters the plans imply (kmq.wire.vocabulary names).
    states: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    counters: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    #: (queue, first id) -> truth, when the simulator keeps them.
    messages: dict[tuple[str, MessageId], Truth] = field(default_factory=dict)
    #: (queue, first id) of each plan, in arrival order, when the simulator keeps them.
    keys: list[tuple[str, MessageId]] = field(default_factory=list)
    #: Per window asked for: queue -> messages per state of those enqueued in it.
    windows: list[dict[str, Counter[str]]] = field(default_factory=list)


class Ledger:
    """The ground truth of the lives that ended: a plan shared by many lives has its truth worked out once, and
    summed when the simulation ends (``close``); per window and, with ``keep``, per message as they end."""

    def __init__(self, outcome: Outcome, windows: list[tuple[int, int]], keep: bool) -> None:
        self._outcome = outcome
        self._windows = windows
        self._keep = keep
        outcome.windows = [defaultdict(Counter) for _ in windows]
        #: id(plan) -> [plan, lives ended, its state once worked out]
        self._ended: dict[int, list[Any]] = {}
        self._lives: list[Life] = []

    def arrived(self, life: Life) -> None:
        if self._keep:
            self._lives.append(life)

    def done(self, life: Life) -> None:
        ended = self._ended.get(id(life.plan))  # the truth of a shared plan is summed once, at the end
        if ended is None:
            ended = self._ended[id(life.plan)] = [life.plan, 0, None]
        ended[1] += 1
        for (start, end), in_window in zip(self._windows, self._outcome.windows, strict=True):
            if start <= life.born_ms < end:
                if ended[2] is None:
                    ended[2] = truth(life.plan).state
                in_window[life.plan.queue.name][ended[2]] += 1
        if self._keep:
            first = life.original if life.original is not None else life.record
            assert first is not None
            self._outcome.messages[(life.plan.queue.name, first)] = truth(life.plan)

    def close(self) -> None:
        for plan, count, _ in self._ended.values():
            found = truth(plan)
            self._outcome.states[plan.queue.name][found.state] += count
            self._outcome.counters[plan.queue.name].update({k: n * count for k, n in found.counters.items()})
        self._outcome.keys = [(life.plan.queue.name, life.original) for life in self._lives
                              if life.original is not None]
