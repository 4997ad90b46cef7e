"""Small helpers shared by several kmq modules."""

from __future__ import annotations

from collections import deque
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
