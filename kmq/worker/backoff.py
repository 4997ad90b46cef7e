"""Backoff: how long a worker waits before retrying a failed message (``--backoff-base``, ``--backoff-max``).

A value of the worker's configuration, pickled to ``kmq worker --processes`` children: kept out of the compiled
settle policy (``settle``), whose frozen dataclasses would not unpickle.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from kmq.errors import ConfigError


@dataclass(frozen=True, slots=True, kw_only=True)
class Backoff:
    """Delay before retrying a failed message: base·2^(n-1), capped at ``max_s``, with equal jitter."""

    #: Seconds before the first retry (``--backoff-base``).
    base_s: float = 1.0
    #: The longest retry delay in seconds (``--backoff-max``).
    max_s: float = 300.0

    def __post_init__(self) -> None:
        if not 0 <= self.base_s <= self.max_s:
            raise ConfigError("backoff", f"needs 0 <= base <= max, got base {self.base_s} s, max {self.max_s} s")

    def delay_s(self, delivery_count: int) -> float:
        """The delay before retrying a message that failed on its ``delivery_count``-th delivery."""
        ceiling = min(self.max_s, self.base_s * 2.0 ** max(0, delivery_count - 1))
        return ceiling / 2 + random.uniform(0, ceiling / 2)
