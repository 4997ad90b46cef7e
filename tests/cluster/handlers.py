"""The fault tests' handler: notes every run in its own log ($KMQTEST_RECORD), the tests' source of truth."""

from __future__ import annotations

import json
import os
import time

from kmq import Message


def note(message: Message) -> None:
    """Appends one JSON line per run (O_APPEND: whole lines across the worker processes), then acks (returns)."""
    line = json.dumps({"payload": message.payload.decode(), "id": str(message.message_id),
                       "first": str(message.first_message_id), "count": message.delivery_count,
                       "t": time.time(), "pid": os.getpid()})
    with open(os.environ["KMQTEST_RECORD"], "a") as out:
        out.write(line + "\n")
