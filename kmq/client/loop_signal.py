"""LoopSignal: wakes coroutines on one asyncio event loop when another thread says something is ready.

The bridge between a consumer's threads and asyncio (``kmq.aio``, the worker's coroutine handlers): a coroutine
``arm()``s the signal, looks for what it wants without blocking, and if there is nothing ``await``s ``wait()``; a
consumer's thread calls ``notify()`` after it made something ready (``Consumer.on_ready``). ``notify`` crosses to the
loop (``call_soon_threadsafe``, a write to the loop's self-pipe) only while some coroutine is armed, so a busy
consumer whose receivers never wait costs nothing. Arming before looking is what makes it race-free: a ``notify``
after the look finds the signal armed, one before it left something the look finds.
"""

from __future__ import annotations

import asyncio
import contextlib


class LoopSignal:
    """Made on the event loop's thread; ``notify`` from any thread, the rest on the loop."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        #: Some coroutine may be waiting: read by ``notify`` on other threads (a plain bool: atomic under the GIL).
        self._armed = False

    def arm(self) -> None:
        """Before looking: a ``notify`` from now on wakes the next ``wait``."""
        self._armed = True
        self._event.clear()

    async def wait(self, timeout_s: float | None) -> None:
        """Returns once notified (since ``arm``) or after ``timeout_s`` seconds (None: no limit)."""
        if timeout_s is None:
            await self._event.wait()
            return
        try:
            async with asyncio.timeout(timeout_s):
                await self._event.wait()
        except TimeoutError:
            pass

    def wake(self) -> None:
        """``notify`` from the loop's own thread."""
        self._armed = False
        self._event.set()

    def notify(self, _count: int = 0) -> None:
        """From any thread (a consumer's ``on_ready`` listener): quick, never raises."""
        if self._armed:
            self._armed = False
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                self._loop.call_soon_threadsafe(self._event.set)
