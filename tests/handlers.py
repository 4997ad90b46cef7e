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


def _note(message: Message, **extra: object) -> None:
    """Appends one JSON line about this handler run to $KMQTEST_RECORD (O_APPEND: atomic across processes)."""
    import json
    import os

    line = json.dumps({"payload": message.payload.decode(), "message_id": str(message.message_id),
                       "first_message_id": str(message.first_message_id), "delivery_count": message.delivery_count,
                       "enqueued_at_ms": message.enqueued_at_ms, "pid": os.getpid(), **extra})
    with open(os.environ["KMQTEST_RECORD"], "a") as out:
        out.write(line + "\n")


def note_slowly(message: Message) -> None:
    """Notes the run, then takes 0.3 s."""
    _note(message)
    time.sleep(0.3)


def spin_unless_ok(message: Message) -> None:
    """Returns at once for payload "ok"; otherwise runs (interruptibly) for ever."""
    _note(message)
    while message.payload != b"ok":
        time.sleep(0.05)


def release_first_then_ack(message: Message) -> None:
    """Settles the message itself: releases the first delivery, acks the second."""
    _note(message)
    if message.delivery_count == 1:
        message.release(0)
    else:
        message.ack()


def note_a_long_run(message: Message) -> None:
    """Notes when it starts and when it ends a 6 s run (to tell overlapping runs of one job apart)."""
    _note(message, event="start", at=time.time())
    time.sleep(6)
    _note(message, event="end", at=time.time())


def block_until_released(message: Message) -> None:
    """Notes the run, then blocks until the file $KMQTEST_RELEASE exists (at most 120 s; interruptible)."""
    import os
    from pathlib import Path

    _note(message)
    release = Path(os.environ["KMQTEST_RELEASE"])
    deadline = time.monotonic() + 120
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def note_dedup(message: Message) -> None:
    """Notes the run with its dedup id, then takes 10 ms (the dedup failover tests)."""
    _note(message, dedup_id=message.headers.get("kmq-dedup-id", b"").decode())
    time.sleep(0.01)


def note(message: Message) -> None:
    """Notes the run and returns (acked)."""
    _note(message)


#: Iterations of ``spin_1ms``'s loop: about 1 ms of pure Python (CPython 3.11) on the project's 2-core machine.
SPIN_1MS = 27_000
_spun = [0]


def spin_1ms(message: Message) -> None:
    """About 1 ms of pure-Python CPU work (a fixed amount, so a busy machine slows it instead of shortening it);
    every 100 runs writes this process's run count to ``$KMQ_BENCH_PROGRESS/<pid>`` for the bench to sum."""
    import os

    total = 0
    for i in range(SPIN_1MS):
        total += i * i
    _spun[0] += 1
    progress = os.environ.get("KMQ_BENCH_PROGRESS")
    if progress and _spun[0] % 100 == 0:
        with open(os.path.join(progress, str(os.getpid())), "w") as out:
            out.write(str(_spun[0]))
