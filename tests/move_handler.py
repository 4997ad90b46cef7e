"""The handler of the topic-set move test (tests/functional/test_topic_sets.py), run by ``kmq worker`` processes.

Each successful run appends ``<n> <message id> <pid>`` to ``$MOVE_TEST_DIR/runs`` (one short line, one write: lines
of concurrent processes never interleave). Some messages fail once (the tracker of their set brings them back), some
are rejected once (dead letters, redriven by the test), so copies and redrives cross the move as well.
"""

from __future__ import annotations

import os
from pathlib import Path

from kmq import Message, Reject
from tests.helpers import first_time

FAIL_ONCE_EVERY, REJECT_ONCE_EVERY = 37, 41


def handle(msg: Message) -> None:
    n = int(msg.payload)
    folder = Path(os.environ["MOVE_TEST_DIR"])
    if n % FAIL_ONCE_EVERY == 0 and first_time(folder / f"failed-{n}"):
        raise RuntimeError(f"{n} fails on its first run")
    if n % REJECT_ONCE_EVERY == 0 and first_time(folder / f"rejected-{n}"):
        raise Reject(f"{n} is rejected once")
    with open(folder / "runs", "a") as runs:
        runs.write(f"{n} {msg.message_id} {os.getpid()}\n")

