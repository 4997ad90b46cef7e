"""Delivery: the handle for one record's delivery report (what ``Producer.send_async`` returns)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

_DELIVERY_LOCK = threading.Lock()
T = TypeVar("T")


class Delivery(Generic[T]):
    """A Future-like handle for one record's delivery report: ``result(timeout)``, ``exception()``, ``done()``,
    ``add_done_callback(fn)``. Unlike concurrent.futures.Future it allocates no lock or condition per record
    (those halved send_async throughput); an Event is made only when someone waits before the report."""

    __slots__ = ("_callbacks", "_done", "_error", "_event", "_value")

    def __init__(self) -> None:
        self._done = False
        self._value: T | None = None
        self._error: BaseException | None = None
        self._event: threading.Event | None = None
        self._callbacks: list[Callable[[Delivery[T]], object]] | None = None

    def _set(self, value: T | None, error: BaseException | None) -> None:
        with _DELIVERY_LOCK:
            self._value, self._error, self._done = value, error, True
            event, callbacks, self._callbacks = self._event, self._callbacks, None
        if event is not None:
            event.set()
        for callback in callbacks or ():
            callback(self)

    def done(self) -> bool:
        """True once the delivery report came (success or failure)."""
        return self._done

    def __repr__(self) -> str:
        if not self._done:
            return "<Delivery pending>"
        if self._error is not None:
            return f"<Delivery failed: {self._error}>"
        return f"<Delivery done: {self._value}>"

    def _wait(self, timeout: float | None) -> None:
        with _DELIVERY_LOCK:
            if self._done:
                return
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        if not event.wait(timeout):
            raise TimeoutError(f"no delivery report within {timeout}s")

    def result(self, timeout: float | None = None) -> T:
        """The value (a MessageId for a send) once durable; raises the delivery's error, or TimeoutError after
        ``timeout`` seconds."""
        self._wait(timeout)
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The delivery's error, or None once it succeeded; waits up to ``timeout`` seconds like ``result``."""
        self._wait(timeout)
        return self._error

    def add_done_callback(self, fn: Callable[[Delivery[T]], object]) -> None:
        """Calls ``fn(delivery)`` when the report comes (at once if it came already), on the producer's thread."""
        with _DELIVERY_LOCK:
            if not self._done:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(fn)
                return
        fn(self)
