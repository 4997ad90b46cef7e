"""The fault runs' handler: notes each run in its own log ($KMQTEST_RECORD, as tests.cluster.handlers does), then
works for $FAULT_WORK_S (default 0.2 s) before it returns (an ack): a fault always finds messages mid-run. One
message in RETRY_EVERY fails its first run (a release with the worker's backoff), so the tracker always has
redeliveries to make while a fault lasts."""

from __future__ import annotations

import os
import time

from kmq import Message
from tests.cluster.handlers import note

WORK_S = float(os.environ.get("FAULT_WORK_S", "0.2"))
RETRY_EVERY = 40


def fails_first(payload: str, delivery_count: int) -> bool:
    """Whether this run is one the handler fails on purpose (the first of every RETRY_EVERY-th message)."""
    return delivery_count == 1 and payload.rpartition("-")[2].isdigit() and int(payload.rpartition("-")[2]) \
        % RETRY_EVERY == 7


def work(message: Message) -> None:
    note(message)
    time.sleep(WORK_S)
    if fails_first(message.payload.decode(), message.delivery_count):
        raise RuntimeError("failing the first run on purpose: the tracker redelivers it after the backoff")
