"""AsyncMessage: a delivered message whose settles are awaited (``await message.ack()``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Generator
from datetime import datetime
from typing import Any

from kmq.client.message import Message
from kmq.wire import MessageId


class _Done:
    """What ``await message.ack()`` awaits: nothing. The settle is done when ``ack()`` is called (an append to the
    consumer's marker buffer, no I/O), so awaiting it costs no coroutine, and a forgotten ``await`` loses no ack."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return iter(())  # type: ignore[return-value]


_DONE = _Done()


class AsyncMessage:
    """One delivery, as ``kmq.aio.AsyncConsumer`` hands it out: the same fields as ``kmq.Message`` (the sync one is
    ``.message``), and awaitable settles. ``ack``, ``release``, ``give_back`` and ``keep_alive`` only append to the
    consumer's marker buffer (a microsecond, no I/O): they are done when called and their await returns at once;
    ``reject`` writes the dead letter and waits until it is durable, in a thread, so the event loop never blocks."""

    __slots__ = ("message",)

    def __init__(self, message: Message) -> None:
        #: The sync Message (for code that settles from a thread, or reads what this class does not repeat).
        self.message = message

    @property
    def payload(self) -> bytes:
        return self.message.payload

    @property
    def headers(self) -> dict[str, bytes]:
        return self.message.headers

    @property
    def queue(self) -> str:
        return self.message.queue

    @property
    def message_id(self) -> MessageId:
        return self.message.message_id

    @property
    def delivery_count(self) -> int:
        return self.message.delivery_count

    @property
    def first_message_id(self) -> MessageId:
        return self.message.first_message_id

    @property
    def enqueued_at_ms(self) -> int:
        return self.message.enqueued_at_ms

    @property
    def enqueued_at(self) -> datetime:
        return self.message.enqueued_at

    @property
    def time_limit(self) -> float | None:
        return self.message.time_limit

    @property
    def deliver_at(self) -> datetime | None:
        return self.message.deliver_at

    @property
    def expires_at(self) -> datetime | None:
        return self.message.expires_at

    @property
    def redelivered(self) -> bool:
        return self.message.redelivered

    @property
    def settled(self) -> bool:
        return self.message.settled

    def ack(self) -> Awaitable[None]:
        """Marks the message done; it is never delivered again."""
        self.message.ack()
        return _DONE

    def release(self, delay: float = 0.0) -> Awaitable[None]:
        """Gives the message back for redelivery, now or after ``delay`` seconds (it counts as a delivery)."""
        self.message.release(delay)
        return _DONE

    async def reject(self, reason: str = "") -> None:
        """Dead-letters the message for good; returns once the dead letter is durable."""
        await asyncio.get_running_loop().run_in_executor(None, self.message.reject, reason)

    def give_back(self) -> Awaitable[None]:
        """Returns a message no handler started on: redelivered at once, its delivery count unchanged."""
        self.message.give_back()
        return _DONE

    def keep_alive(self) -> Awaitable[None]:
        """Extends the deadline now (automatic keep-alives already run while the message is unsettled)."""
        self.message.keep_alive()
        return _DONE

    def __repr__(self) -> str:
        return f"AsyncMessage({self.message!r})"
