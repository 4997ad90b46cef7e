"""Coroutine handlers for the asyncio worker tests (``kmq worker tests.handlers_async:NAME``)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from kmq import Message, Reject
from tests.handlers import _note


async def record(message: Message) -> None:
    """Notes the run and succeeds."""
    _note(message)


async def ack_reject_or_fail_once(message: Message) -> None:
    """"ok" succeeds; "reject" raises Reject; "flaky" fails on its first delivery and succeeds on the next."""
    _note(message)
    await asyncio.sleep(0)
    if message.payload == b"reject":
        raise Reject("not for us")
    if message.payload == b"flaky" and message.delivery_count == 1:
        raise RuntimeError("first attempt fails")


async def spin_unless_ok(message: Message) -> None:
    """Returns at once for payload "ok"; otherwise awaits for ever (until its task is cancelled)."""
    _note(message)
    while message.payload != b"ok":
        await asyncio.sleep(0.05)


async def block_until_released(message: Message) -> None:
    """Notes the run, then awaits until the file $KMQTEST_RELEASE exists (at most 120 s)."""
    _note(message)
    release = Path(os.environ["KMQTEST_RELEASE"])
    deadline = time.monotonic() + 120
    while not release.exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


async def io_50ms(message: Message) -> None:
    """An I/O-bound job: 50 ms of waiting (the bench's async side)."""
    await asyncio.sleep(0.05)


def io_50ms_sync(message: Message) -> None:
    """The same job for a thread: 50 ms of blocking wait (the bench's thread side)."""
    time.sleep(0.05)
