"""Schedule: a simulation's time, in ticks, and the lives due to act at each."""

from __future__ import annotations

from collections import defaultdict

from kmq.ops.audit.synthetic.life import Life


class Schedule:
    """``tick`` is now; ``at`` makes a life act some ticks later, in a phase (the Simulator's method of that name)."""

    def __init__(self, start_ms: int, tick_ms: int) -> None:
        self._start_ms = start_ms
        self._tick_ms = tick_ms
        self.tick = 0
        self._due: dict[int, list[Life]] = defaultdict(list)

    def ts(self, tick: int | None = None) -> int:
        """The time of ``tick`` (now by default), ms since the epoch."""
        return self._start_ms + (self.tick if tick is None else tick) * self._tick_ms

    def ticks(self, ms: int) -> int:
        """How many ticks ``ms`` lasts, rounded up."""
        return -(-ms // self._tick_ms)

    def at(self, ticks: int, life: Life, phase: str) -> None:
        life.phase = phase
        self._due[self.tick + max(1, ticks)].append(life)

    def due_now(self) -> list[Life]:
        return self._due.pop(self.tick, [])

    @property
    def pending(self) -> bool:
        return bool(self._due)

    @property
    def horizon_ms(self) -> int:
        """Beyond the simulation's end: a deadline set to it is still ahead at its ``now_ms``."""
        return self.ts() + 10 ** 9
