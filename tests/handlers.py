"""Handlers for the CLI worker tests (imported by `kmq worker tests.handlers:NAME`)."""

from __future__ import annotations

import time
from collections import Counter

from kmq import Message

_failures: Counter[bytes] = Counter()


def record(message: Message) -> None:
    """Succeeds at once."""


def fail_twice(message: Message) -> None:
    _failures[message.payload] += 1
    if _failures[message.payload] <= 2:
        raise RuntimeError(f"attempt {_failures[message.payload]} fails")


def always_fail(message: Message) -> None:
    raise ValueError("this job can never succeed")


def slow(message: Message) -> None:
    time.sleep(60)
