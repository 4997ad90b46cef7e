"""HandOut: a consumer's ready buffer (messages Started, committed and waiting for ``receive``) and its back-pressure.

The loop thread ``put``s batches in; any number of threads ``take`` from it. Taking is an atomic deque pop with no
lock (the common case under load); a thread that found nothing waits on ``wait``. Listeners (a worker feeding its
threads from several consumers) are told after every put how many messages came, so one thread can wait on many
consumers at once instead of polling each in turn.

Back-pressure: the loop Starts no more than ``room()`` allows, a bound on messages read ahead of receive (``depth``
batches of ``capacity``: Starting, committing or buffered) and on messages in flight (``limit``, which a worker may
lower below ``max_in_flight`` while its handlers are slow). When there is no room the loop sleeps in
``wait_for_room`` until receives and settles have freed a quarter of a batch: a Start batch and a commit cost the
same for 1 record or 100.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from kmq._util import take_all
from kmq.client.message import Message

#: How long the loop sleeps at most while it waits for room (it must still poll: the group must not evict it).
ROOM_WAIT_S = 0.1


class HandOut:
    """The buffer between a consumer's loop thread and the threads that receive. Pure logic, no Kafka."""

    def __init__(self, capacity: int, max_in_flight: int, depth: int = 1) -> None:
        #: The most messages one Start batch holds.
        self.capacity = capacity
        #: Start batches read ahead of receive (see Config.start_pipeline_depth).
        self.depth = depth
        self.max_in_flight = max_in_flight
        self._limit = max_in_flight
        self._quarter = self._quarter_of(max_in_flight)
        self._ready: deque[Message] = deque()
        self._cond = threading.Condition()
        self._listeners: list[Callable[[int], None]] = []
        self._room_freed = threading.Event()
        self._waiting_for_room = False
        self._wake_countdown = 0
        self.closed = False

    def __len__(self) -> int:
        return len(self._ready)

    def __bool__(self) -> bool:
        return bool(self._ready)

    # --- the receiving side (any thread) -----------------------------------------------------------------------

    def take_one(self) -> Message | None:
        """The next ready message, or None; never blocks."""
        try:
            message = self._ready.popleft()
        except IndexError:
            return None
        if self._waiting_for_room:  # wake_loop's test, without its call (this runs once per message)
            self.wake_loop()
        return message

    def take(self, max_messages: int) -> list[Message]:
        """Up to ``max_messages`` ready messages (maybe none); never blocks."""
        ready = self._ready
        got: list[Message] = []
        append, popleft = got.append, ready.popleft
        try:
            for _ in range(min(max_messages, len(ready))):
                append(popleft())
        except IndexError:  # another receiver took the rest meanwhile
            pass
        if got and self._waiting_for_room:
            self.wake_loop(len(got))
        return got

    def wait(self, timeout_s: float) -> None:
        """Returns once messages may be ready, after ``timeout_s``, or when woken (``wake_all``)."""
        with self._cond:
            if not self._ready and not self.closed:
                self._cond.wait(timeout_s)

    def add_listener(self, listener: Callable[[int], None]) -> None:
        """``listener(n)`` runs on the loop thread after each put of ``n`` messages, and with 0 on ``wake_all``;
        it must be quick and must not raise."""
        self._listeners.append(listener)

    def wake_loop(self, count: int = 1) -> None:
        """After a take or a settle (of ``count`` messages): wakes the loop once enough room is free (a quarter of
        the buffer), not once per message, and without computing the room here (this runs once or twice per
        message)."""
        if self._waiting_for_room:
            self._wake_countdown -= count  # not atomic: a lost decrement only makes the loop wait for its timeout
            if self._wake_countdown <= 0:
                self._waiting_for_room = False  # one set() is enough; the next callers skip it
                self._room_freed.set()

    # --- the loop's side ---------------------------------------------------------------------------------------

    def put(self, messages: list[Message]) -> None:
        with self._cond:
            self._ready.extend(messages)
            self._cond.notify_all()
        for listener in self._listeners:
            listener(len(messages))

    def wake_all(self) -> None:
        """Wakes every waiting receiver and listener (the consumer failed or closes)."""
        with self._cond:
            self._cond.notify_all()
        for listener in self._listeners:
            listener(0)

    def close(self) -> list[Message]:
        """No more receives: returns the messages never taken (popped one by one, so one a racing take got is not
        among them) and wakes every waiting receiver."""
        with self._cond:
            self.closed = True
            never_taken = take_all(self._ready)
            self._cond.notify_all()
        for listener in self._listeners:
            listener(0)
        return never_taken

    @property
    def limit(self) -> int:
        """Most messages in flight (Started, buffered or handed out) the loop Starts up to: ``max_in_flight``
        unless lowered."""
        return self._limit

    @limit.setter
    def limit(self, value: int) -> None:
        value = max(1, min(self.max_in_flight, value))
        if value != self._limit:
            self._limit = value
            self._quarter = self._quarter_of(value)
            if self._waiting_for_room:
                self._room_freed.set()  # a higher limit may be room already

    def room(self, starting: int, in_flight: int) -> int:
        """How many more messages the loop may Start, given ``starting`` ones Started and not yet buffered and
        ``in_flight`` ones not settled."""
        buffered = len(self._ready) + starting
        # Buffered ones count against the limit on their own too: an at-most-once queue keeps no in-flight table.
        return min(min(self.capacity * self.depth, self._limit) - buffered, self._limit - in_flight)

    def usable_room(self, starting: int, in_flight: int) -> int:
        room = self.room(starting, in_flight)
        # While the receivers still have buffered messages to get through, wait for a quarter of the room instead of
        # Starting records one by one.
        if 0 < room < self._quarter and self._ready:
            return 0
        return room

    def wait_for_room(self, usable_room: Callable[[], int], room: Callable[[], int],
                      timeout_s: float = ROOM_WAIT_S) -> None:
        """Full: sleeps until receives and settles have freed a quarter of the room, or ``timeout_s``."""
        self._wake_countdown = self._quarter - max(0, room())
        self._waiting_for_room = True
        if usable_room() <= 0:  # re-check: a settle before the flag was set would not wake us
            self._room_freed.wait(timeout_s)
        self._waiting_for_room = False
        self._room_freed.clear()

    def _quarter_of(self, limit: int) -> int:
        return max(1, min(self.capacity, limit) // 4)
