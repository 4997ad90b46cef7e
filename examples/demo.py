"""The handler `make demo` runs: most jobs succeed; every 13th fails once (retried); every 97th always fails
(dead-lettered after max deliveries)."""

from __future__ import annotations

import time

from kmq import Message


def handle(message: Message) -> None:
    number = int(message.payload.rsplit(b"-", 1)[1])
    if number % 97 == 0:
        raise RuntimeError(f"job {number} is poison")
    if number % 13 == 0 and message.delivery_count == 1:
        raise TimeoutError(f"job {number}: upstream timed out (first try)")
    time.sleep(0.001)
