"""Coroutine handlers for `kmq worker`: it sees `async def` and runs them on one event loop."""

import asyncio

from kmq import Message, Reject


async def handle(message: Message) -> None:
    if not message.payload:
        raise Reject("empty job")  # dead letter at once
    await asyncio.sleep(0.05)  # an HTTP call, a database query: the loop runs other jobs meanwhile
    print("done", message.payload.decode(), flush=True)
    # returning acks the message; an exception releases it with backoff
