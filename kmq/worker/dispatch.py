"""Dispatcher: feeds a worker's free threads from its consumers, one message at a time (or a few, to a lone thread).

A thread asks for a message only when it is free, and takes it from the consumers' ready buffers (shared and
thread-safe, filled ahead by each consumer's loop): no thread ever holds a message it is not running while
another thread is idle, as in Dramatiq's model. A worker's only thread may take a few at once (``next_many``:
nobody else could run them, and a look per job was a fifth of a fast job's cost). With several queues a thread
looks at each in turn (starting where the last look stopped, so none is favoured) and, finding nothing, waits on
all of them at once: every consumer tells the dispatcher when messages became ready (``Consumer.on_ready``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from kmq.client.consumer import Consumer
from kmq.client.message import Message

#: The longest a waiting thread sleeps between looks (a safety net: a put always wakes it).
WAIT_S = 0.5


class Dispatcher:
    """``next()`` from any number of worker threads; ``stop()`` makes every ``next()`` return None."""

    def __init__(self, consumers: Sequence[Consumer]) -> None:
        self._consumers = list(consumers)
        self._cond = threading.Condition()
        #: Bumped by every put: a thread that looked and found nothing sleeps only if no put came since.
        self._generation = 0
        self._turn = 0
        self.stopped = False
        #: Called like the listeners of ``Consumer.on_ready`` (a coroutine worker's LoopSignal).
        self._wakers: list[Callable[[int], None]] = []
        for consumer in self._consumers:
            consumer.on_ready(self._ready)

    def next(self) -> Message | None:
        """The next message of any queue, as soon as there is one; None once stopped. Raises the KmqError of a
        consumer that failed."""
        consumers = self._consumers
        single = consumers[0] if len(consumers) == 1 else None
        while not self.stopped:
            generation = self._generation
            message = single.receive(0) if single is not None else self._look(consumers)
            if message is not None:
                return message
            self._wait_for_put(generation)
        return None

    def next_many(self, max_messages: int) -> list[Message]:
        """Up to ``max_messages`` messages of one queue, as soon as there is one; [] once stopped. Raises like
        ``next()``."""
        if max_messages == 1:
            message = self.next()
            return [] if message is None else [message]
        consumers = self._consumers
        while not self.stopped:
            generation = self._generation
            got = self._look_many(consumers, max_messages)
            if got:
                return got
            self._wait_for_put(generation)
        return []

    def take(self) -> Message | None:
        """The next message of any queue if one is ready, else None, without waiting: for a worker whose handlers
        are coroutines (it waits on the event loop instead, woken by ``add_waker``). Raises like ``next()``."""
        consumers = self._consumers
        return consumers[0].receive(0) if len(consumers) == 1 else self._look(consumers)

    def add_waker(self, waker: Callable[[int], None]) -> None:
        """``waker(n)`` runs when ``n`` messages became ready, and with 0 on ``stop()`` or when a consumer failed or
        closes, on the thread where that happened; it must be quick and must not raise."""
        self._wakers.append(waker)

    def stop(self) -> None:
        self.stopped = True
        with self._cond:
            self._cond.notify_all()
        for waker in self._wakers:
            waker(0)

    def _look(self, consumers: list[Consumer]) -> Message | None:
        turn = self._turn
        self._turn = turn + 1  # not atomic: a lost increment only repeats a starting point
        count = len(consumers)
        for i in range(count):
            message = consumers[(turn + i) % count].receive(0)
            if message is not None:
                return message
        return None

    def _look_many(self, consumers: list[Consumer], max_messages: int) -> list[Message]:
        """``_look`` for up to ``max_messages`` of the first queue that has any."""
        turn = self._turn
        self._turn = turn + 1
        count = len(consumers)
        for i in range(count):
            got = consumers[(turn + i) % count].receive_many(max_messages, 0)
            if got:
                return got
        return []

    def _wait_for_put(self, generation: int) -> None:
        """Sleeps until the next put (at most WAIT_S), unless one came since ``generation`` was read or the
        dispatcher stopped: a thread that looked and found nothing."""
        with self._cond:
            if self._generation == generation and not self.stopped:
                self._cond.wait(WAIT_S)

    def _ready(self, count: int) -> None:
        """On a consumer's loop thread: ``count`` messages became ready (0: it failed or closes)."""
        with self._cond:
            self._generation += 1
            if count:
                self._cond.notify(count)
            else:
                self._cond.notify_all()
        for waker in self._wakers:
            waker(count)
