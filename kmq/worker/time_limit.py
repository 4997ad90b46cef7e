"""Time limits for handlers running in threads (the model: dramatiq's TimeLimit middleware).

A watchdog thread watches every running handler. Past its limit, the worker's ``on_expired`` settles the message
(release with backoff, or dead letter after ``max_deliveries``): that also ends its keep-alives. Then the handler's
thread is interrupted with TimeLimitExceeded, raised asynchronously. That stops Python code; a handler blocked
inside a C call (a socket read without timeout, a lock) only sees it when the call returns, and keeps its thread
until then: the worker logs it.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kmq.client.message import Message
from kmq.errors import TimeLimitExceeded

#: The watchdog's tick: how late past its limit a handler may be interrupted.
TICK_S = 0.1


@dataclass(slots=True, eq=False)
class Watch:
    message: Message
    limit_s: float
    deadline: float
    thread_id: int = field(default_factory=threading.get_ident)
    expired: bool = False
    done: bool = False


class TimeLimits:
    """The watchdog. ``watch``/``unwatch`` from handler threads; ``on_expired`` runs on the watchdog thread."""

    def __init__(self, on_expired: Callable[[Watch], None], monotonic: Callable[[], float] = time.monotonic) -> None:
        self._on_expired = on_expired
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._watches: set[Watch] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kmq-time-limits", daemon=True)
        self._thread.start()

    def watch(self, message: Message, limit_s: float) -> Watch:
        watch = Watch(message, limit_s, self._monotonic() + limit_s)
        with self._lock:
            self._watches.add(watch)
        return watch

    def unwatch(self, watch: Watch) -> bool:
        """The handler returned (or raised): True if its time limit had already expired."""
        with self._lock:
            watch.done = True
            self._watches.discard(watch)
        if watch.expired:
            _clear_async_exception(watch.thread_id)  # an interrupt still pending must not hit the worker's code
        return watch.expired

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(TICK_S):
            now = self._monotonic()
            with self._lock:
                expired = [w for w in self._watches if w.deadline <= now]
                for watch in expired:
                    watch.expired = True
                    self._watches.discard(watch)
            for watch in expired:
                self._on_expired(watch)
                with self._lock:
                    if not watch.done:
                        _raise_in_thread(watch.thread_id)


def _raise_in_thread(thread_id: int) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(TimeLimitExceeded))


def _clear_async_exception(thread_id: int) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), None)
