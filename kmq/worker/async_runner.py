"""Coroutine handlers: a worker whose handler is ``async def`` runs it on one event loop, at most N runs at once.

The same worker around it: its consumers, its Dispatcher (taken from without waiting, the loop woken through a
LoopSignal instead of a thread's condition), its settle policy (a run ends in the same Outcomes: return → ack,
``Reject`` → dead letter, an exception → release with backoff), its prefetch windows and metrics (one ThreadSlot per
run that can be in flight), and the consumers' keep-alives for every message a run holds. What differs: the time
limit cancels the run's task (a handler that blocks the loop in sync code cannot be cancelled until it yields), and
the drain cancels the runs still going at its deadline, whose messages the consumers' close then releases.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import traceback
from collections.abc import Awaitable, Callable, Container, Coroutine
from typing import Any

import structlog

from kmq.client.loop_signal import LoopSignal
from kmq.client.message import Message
from kmq.errors import KmqError, Reject
from kmq.worker.dispatch import Dispatcher
from kmq.worker.handler_runner import RETURNED, TIMED_OUT, Outcome
from kmq.worker.metrics import ThreadSlot

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

AsyncHandler = Callable[[Message], Coroutine[Any, Any, object]]

#: The longest the loop sleeps between looks at the consumers (a safety net: every put wakes it).
WAIT_S = 0.5


def is_coroutine_handler(handler: object) -> bool:
    """True for an ``async def`` function (or a partial of one, or an object whose ``__call__`` is one)."""
    if inspect.iscoroutinefunction(handler):
        return True
    return callable(handler) and inspect.iscoroutinefunction(type(handler).__call__)


async def call_async(handler: AsyncHandler, message: Message, limit_s: float | None) -> Outcome:
    """One run of a coroutine handler, ending in an Outcome as a thread's run does; past ``limit_s`` its task is
    cancelled (TIMED_OUT). A TimeoutError of the handler's own is a failure like any other exception."""
    scope = asyncio.timeout(limit_s)
    try:
        async with scope:
            await handler(message)
    except Reject as rejected:
        return Outcome("rejected", str(rejected))
    except Exception as err:  # noqa: BLE001 - a handler's failure is the message's, not the worker's
        if scope.expired():
            return TIMED_OUT
        return Outcome("failed", f"{type(err).__name__}: {err}", traceback.format_exc())
    return RETURNED


class AsyncServe:
    """The event loop of a coroutine worker, run by one thread (``run``). Takes a message from the Dispatcher
    whenever fewer than ``len(slots)`` runs are in flight and runs ``handle(message, slot)`` as a task."""

    def __init__(self, dispatcher: Dispatcher, slots: list[ThreadSlot],
                 handle: Callable[[Message, ThreadSlot], Awaitable[None]], give_back: Callable[[Message], None],
                 stopping: threading.Event, at_most_once: Container[str], drain_timeout_s: float,
                 on_failure: Callable[[KmqError], None]) -> None:
        self._dispatcher = dispatcher
        self._slots = slots
        self._handle = handle
        self._give_back = give_back
        self._stopping = stopping
        self._at_most_once = at_most_once
        self._drain_timeout_s = drain_timeout_s
        self._on_failure = on_failure
        #: Runs cancelled at the drain's deadline (their messages are released when the consumers close).
        self.cancelled = 0

    def run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        signal = LoopSignal()
        self._dispatcher.add_waker(signal.notify)
        free = list(self._slots)
        running: set[asyncio.Task[None]] = set()

        def finished(task: asyncio.Task[None], slot: ThreadSlot) -> None:
            running.discard(task)
            free.append(slot)
            signal.wake()

        dispatcher = self._dispatcher
        while not dispatcher.stopped:
            signal.arm()
            if not free:
                await signal.wait(WAIT_S)
                continue
            try:
                message = dispatcher.take()
            except KmqError as err:
                self._on_failure(err)
                break
            if message is None:
                await signal.wait(WAIT_S)
                continue
            # Stopping: give back what no handler started, unless nothing could bring it back (at most once).
            if self._stopping.is_set() and message.queue not in self._at_most_once:
                self._give_back(message)
                continue
            slot = free.pop()
            task = asyncio.get_running_loop().create_task(self._run(message, slot), name=slot.name)
            running.add(task)
            task.add_done_callback(lambda done, s=slot: finished(done, s))  # type: ignore[misc]
        await self._drain(running)

    async def _run(self, message: Message, slot: ThreadSlot) -> None:
        try:
            await self._handle(message, slot)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # noqa: BLE001 - a bug in settling must not end the loop
            log.error("worker_run_failed", queue=message.queue, message_id=str(message.message_id), error=str(err))

    async def _drain(self, running: set[asyncio.Task[None]]) -> None:
        """Running handlers get ``drain_timeout_s`` to finish; the rest are cancelled."""
        if not running:
            return
        _, pending = await asyncio.wait(set(running), timeout=self._drain_timeout_s)
        if pending:
            self.cancelled = len(pending)
            log.warning("worker_drain_timeout", drain_timeout_s=self._drain_timeout_s, cancelled=len(pending),
                        note="their handlers are cancelled; the consumers' close releases their messages")
            for task in pending:
                task.cancel()
            await asyncio.wait(pending)
