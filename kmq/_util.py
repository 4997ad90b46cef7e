"""Small helpers shared by several kmq modules."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def take_all(buffer: deque[T]) -> list[T]:
    """Empties ``buffer`` with atomic pops, so items appended or popped by other threads meanwhile are never lost
    or taken twice (``list(buffer); buffer.clear()`` could drop an append made in between)."""
    taken = []
    try:
        while True:
            taken.append(buffer.popleft())
    except IndexError:
        return taken


class Throttle:
    """``due()`` at most once every ``every_s`` (on the ``monotonic`` clock)."""

    def __init__(self, every_s: float, monotonic: Callable[[], float]) -> None:
        self._every_s = every_s
        self._monotonic = monotonic
        self._last = -every_s

    def due(self) -> bool:
        now = self._monotonic()
        if now - self._last < self._every_s:
            return False
        self._last = now
        return True
