"""AsyncMessage: a delivered message whose settles are awaited (``await message.ack()``)."""

from __future__ import annotations

import asyncio
from datetime import datetime

from kmq.client.message import Message
from kmq.wire import MessageId


class AsyncMessage:
    """One delivery, as ``kmq.aio.AsyncConsumer`` hands it out: the same fields as ``kmq.Message`` (the sync one is
    ``.message``), and coroutine settles. ``ack``, ``release``, ``give_back`` and ``keep_alive`` only append to the
    consumer's marker buffer (a microsecond, no I/O); ``reject`` writes the dead letter and waits until it is durable,
    in a thread, so the event loop never blocks."""

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
    def redelivered(self) -> bool:
        return self.message.redelivered

    @property
    def settled(self) -> bool:
        return self.message.settled

    async def ack(self) -> None:
        """Marks the message done; it is never delivered again."""
        self.message.ack()

    async def release(self, delay: float = 0.0) -> None:
        """Gives the message back for redelivery, now or after ``delay`` seconds (it counts as a delivery)."""
        self.message.release(delay)

    async def reject(self, reason: str = "") -> None:
        """Dead-letters the message for good; returns once the dead letter is durable."""
        await asyncio.get_running_loop().run_in_executor(None, self.message.reject, reason)

    async def give_back(self) -> None:
        """Returns a message no handler started on: redelivered at once, its delivery count unchanged."""
        self.message.give_back()

    async def keep_alive(self) -> None:
        """Extends the deadline now (automatic keep-alives already run while the message is unsettled)."""
        self.message.keep_alive()

    def __repr__(self) -> str:
        return f"AsyncMessage({self.message!r})"
