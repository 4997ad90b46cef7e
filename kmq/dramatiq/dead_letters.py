"""The messages this process's consumers dead-lettered, for ``KmqBroker.dead_letters`` and ``join(fail_fast=True)``.

The dead-letter topic holds them all (``kmq dlq list QUEUE``); this is the in-process view a test asserts on, as
Dramatiq's StubBroker offers. It keeps the failing exception's type and arguments, never the exception itself: an
exception holds its traceback, the traceback the frames, and Dramatiq clears them from messages on purpose so they
are freed at once (``MessageProxy.clear_exception``).
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

from dramatiq.broker import MessageProxy

#: Dead letters kept per queue: the most recent ones.
KEPT_PER_QUEUE = 1000


@dataclass(frozen=True, slots=True)
class DeadLetter:
    message: MessageProxy
    exception_type: type[BaseException] | None
    exception_args: tuple[object, ...]

    def exception(self) -> BaseException:
        """The failure, made again from its type and arguments (a plain Exception when that type cannot be)."""
        if self.exception_type is None:
            return Exception("Message failed with unknown error")
        try:
            return self.exception_type(*self.exception_args)
        except (TypeError, ValueError, AttributeError):  # a constructor that does not take its own args back
            return Exception(f"{self.exception_type.__name__}{self.exception_args!r}")


class DeadLetterLog:
    """Per Dramatiq queue, the last ``KEPT_PER_QUEUE`` messages nacked here. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_queue: dict[str, deque[DeadLetter]] = {}

    def add(self, message: MessageProxy) -> None:
        exc = message._exception
        letter = DeadLetter(message, None if exc is None else type(exc), () if exc is None else tuple(exc.args))
        with self._lock:
            self._by_queue.setdefault(message.queue_name, deque(maxlen=KEPT_PER_QUEUE)).append(letter)

    def of(self, queue_name: str) -> list[DeadLetter]:
        with self._lock:
            return list(self._by_queue.get(queue_name, ()))

    def messages(self) -> dict[str, list[MessageProxy]]:
        with self._lock:
            return {queue: [letter.message for letter in letters] for queue, letters in self._by_queue.items()}

    def clear(self) -> None:
        with self._lock:
            self._by_queue.clear()
