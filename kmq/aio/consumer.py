"""AsyncConsumer: a queue's Consumer for asyncio code, a thin facade over the same consumer.

The sync Consumer's threads fetch, write Starts, commit and keep messages alive as always; receiving takes from its
ready buffer without blocking (``receive_many(n, 0)``) and, finding nothing, awaits a LoopSignal that the consumer's
``on_ready`` listener wakes. No thread is started per receive, and nothing blocking runs on the loop: starting and
closing the consumer, ``flush`` and a reject's dead-letter write run in the loop's executor.

Cancellation: a receive cancelled while it waits has taken nothing. A message belongs to the task that received it;
if that task ends cancelled before settling it, the message is released at once (redelivered by the tracker, and
counted as a delivery: your code had it, as ``Consumer.close`` counts it), instead of being kept alive until the
consumer closes.
"""

from __future__ import annotations

import asyncio
import functools
import time
from asyncio import current_task
from collections.abc import Callable
from types import TracebackType
from typing import TypeVar

import structlog

from kmq.aio.message import AsyncMessage
from kmq.client.consumer import Consumer
from kmq.client.loop_signal import LoopSignal
from kmq.client.message import Message
from kmq.client.process_id import with_process_id
from kmq.config import Config
from kmq.errors import ConsumerClosedError, KmqError

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

T = TypeVar("T")

#: The longest a receive sleeps between looks (a safety net: every put wakes it).
WAIT_S = 1.0


class _Held:
    """The messages one task received and may not have settled. Settled ones are dropped in bulk now and then, so
    keeping the list costs an append per message and nothing per settle."""

    __slots__ = ("compact_at", "messages")

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.compact_at = 64

    def compact(self) -> None:
        held = self.messages
        held[:] = [m for m in held if not m._settled_as]
        self.compact_at = max(64, 2 * len(held))

    def unsettled(self) -> list[Message]:
        return [m for m in self.messages if not m._settled_as]


class AsyncConsumer:
    """Receives messages of one queue in asyncio code (consumer group ``kafka-mq-<queue>``).

    ``async with queue.async_consumer() as consumer:`` starts it (the Kafka consumer is made in the executor) and
    closes it; ``async for message in consumer``, ``await consumer.receive(timeout)``,
    ``await consumer.receive_many(n, timeout)`` hand out AsyncMessages to settle with ``await message.ack()`` etc.
    Use it from one event loop.
    """

    def __init__(self, config: Config, queue: str, *, max_in_flight: int | None = None) -> None:
        self._config = config
        self._queue = queue
        self._max_in_flight = max_in_flight
        self._consumer: Consumer | None = None
        self._signal: LoopSignal | None = None
        self._starting: asyncio.Future[Consumer] | None = None
        self._closed = False
        self._held: dict[asyncio.Task[object], _Held] = {}
        self._last_task: asyncio.Task[object] | None = None
        self._last_held: _Held | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def queue(self) -> str:
        return self._queue

    @property
    def consumer(self) -> Consumer:
        """The sync Consumer underneath (started)."""
        if self._consumer is None:
            raise KmqError(f"async consumer of queue {self._queue!r} is not started: use `async with` or start()")
        return self._consumer

    async def start(self) -> AsyncConsumer:
        """Makes the Kafka consumer and joins the group (in the executor); receiving starts it too."""
        await self._started()
        return self

    async def _started(self) -> Consumer:
        if self._consumer is not None:
            return self._consumer
        if self._closed:
            raise ConsumerClosedError(f"consumer of queue {self._queue!r} is closed")
        loop = asyncio.get_running_loop()
        if self._starting is None:
            self._starting = loop.run_in_executor(None, functools.partial(
                with_process_id, self._config, functools.partial(Consumer, queue=self._queue,
                                                                 max_in_flight=self._max_in_flight)))
        # shield: a receive cancelled while the consumer starts must not leave a half-made consumer behind
        consumer = await asyncio.shield(self._starting)
        if self._consumer is None:
            self._loop = loop
            self._signal = LoopSignal()
            consumer.on_ready(self._signal.notify)
            self._consumer = consumer
        return consumer

    # --- receiving ------------------------------------------------------------------------------------------------

    async def receive(self, timeout: float | None = None) -> AsyncMessage | None:
        """The next message, or None after ``timeout`` seconds (None waits for ever)."""
        consumer = self._consumer or await self._started()
        message = consumer.receive(0)
        if message is None:
            got = await self._wait(consumer, 1, timeout)
            if not got:
                return None
            message = got[0]
        self._hold(message)
        return AsyncMessage(message)

    async def receive_many(self, max_messages: int, timeout: float | None = None) -> list[AsyncMessage]:
        """Up to ``max_messages`` messages as soon as at least one is ready; [] after ``timeout`` seconds."""
        consumer = self._consumer or await self._started()
        got = consumer.receive_many(max_messages, 0)
        if not got:
            got = await self._wait(consumer, max_messages, timeout)
        held = self._holding()
        if held is not None:
            held.messages += got
            if len(held.messages) >= held.compact_at:
                held.compact()
        return [AsyncMessage(m) for m in got]

    async def _wait(self, consumer: Consumer, max_messages: int, timeout: float | None) -> list[Message]:
        """Nothing was ready: waits for the consumer's signal. Takes messages only between awaits, so a cancel (which
        lands on an await) never finds one taken and not returned."""
        signal = self._signal
        assert signal is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            signal.arm()
            got = consumer.receive_many(max_messages, 0)  # raises when the consumer failed or closed
            if got:
                return got
            remaining = WAIT_S if deadline is None else min(WAIT_S, deadline - time.monotonic())
            if remaining <= 0:
                return []
            await signal.wait(remaining)

    def __aiter__(self) -> AsyncConsumer:
        return self

    async def __anext__(self) -> AsyncMessage:
        """The next message; the iteration ends when the consumer is closed. (``receive(None)`` inlined: this is
        the per-message path of ``async for``.)"""
        try:
            consumer = self._consumer or await self._started()
            message = consumer.receive(0)
            if message is None:
                message = (await self._wait(consumer, 1, None))[0]
        except ConsumerClosedError:
            raise StopAsyncIteration from None
        held = self._last_held  # _hold, inline: the same task iterates, message after message
        if held is not None and current_task(self._loop) is self._last_task:
            held.messages.append(message)
            if len(held.messages) >= held.compact_at:
                held.compact()
        else:
            self._hold(message)
        return AsyncMessage(message)

    # --- what a task holds ------------------------------------------------------------------------------------------

    def _hold(self, message: Message) -> None:
        held = self._holding()
        if held is not None:
            messages = held.messages
            messages.append(message)
            if len(messages) >= held.compact_at:
                held.compact()

    def _holding(self) -> _Held | None:
        """What the current task holds (None outside a task)."""
        task = current_task(self._loop)
        held = self._last_held
        if task is not self._last_task or held is None:
            if task is None:
                return None
            held = self._held.get(task)
            if held is None:
                held = self._held[task] = _Held()
                task.add_done_callback(self._task_done)
            self._last_task, self._last_held = task, held
        return held

    def _task_done(self, task: asyncio.Task[object]) -> None:
        held = self._held.pop(task, None)
        if task is self._last_task:
            self._last_task = self._last_held = None
        if held is None:
            return
        if not task.cancelled():
            return  # it ended: what it did not settle it handed on (an exception is the application's to handle)
        unsettled = held.unsettled()
        released = sum(_release(m) for m in unsettled)
        if released:
            log.info("released_messages_of_ended_task", queue=self._queue, released=released,
                     task=task.get_name())

    # --- the rest -------------------------------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Messages read and not yet settled (Started, buffered or handed out)."""
        return 0 if self._consumer is None else self._consumer.in_flight

    @property
    def assignment(self) -> frozenset[int]:
        return frozenset() if self._consumer is None else self._consumer.assignment

    @property
    def failure(self) -> str | None:
        return None if self._consumer is None else self._consumer.failure

    async def flush(self, timeout: float = 30.0) -> int:
        """Waits until every marker written so far (acks included) is durable; returns how many records are not."""
        if self._consumer is None:
            return 0
        return await _in_executor(functools.partial(self._consumer.flush, timeout))

    async def close(self, timeout: float = 30.0) -> None:
        """As ``Consumer.close`` (in the executor): gives back what was never received, releases what was received
        and not settled, writes the last markers, commits and leaves the group. Raises UndeliveredMarkersError like
        it."""
        if self._closed:
            return
        self._closed = True
        if self._consumer is None and self._starting is not None:
            try:
                await asyncio.shield(self._starting)
            except Exception:  # noqa: BLE001 - it never started: nothing to close
                return
            self._consumer = self._starting.result()
        if self._consumer is not None:
            await _in_executor(functools.partial(self._consumer.close, timeout))

    async def __aenter__(self) -> AsyncConsumer:
        return await self.start()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()


def _release(message: Message) -> bool:
    try:
        message.release(0)
    except KmqError:  # settled meanwhile, or the consumer closed (which released it)
        return False
    return True


async def _in_executor(call: Callable[[], T]) -> T:
    # shield: a cancelled caller must not leave a close or flush half done; it still runs to its end
    return await asyncio.shield(asyncio.get_running_loop().run_in_executor(None, call))
