"""The thread-mode time-limit watchdog: expiry settles first, then interrupts the handler's thread."""

from __future__ import annotations

import contextlib
import threading
import time

from kmq.client.message import Message
from kmq.errors import TimeLimitExceeded
from kmq.wire import MessageId
from kmq.worker.handler_runner import ThreadRunner
from kmq.worker.time_limit import TimeLimits, Watch


class _NoSettler:
    def _ack(self, message: Message) -> None: ...
    def _release(self, message: Message, delay_ms: int) -> None: ...
    def _reject(self, message: Message, reason: str) -> None: ...
    def _give_back(self, message: Message) -> None: ...
    def _keep_alive(self, message: Message) -> None: ...


def _message() -> Message:
    return Message(b"p", {}, "q", MessageId(0, 1), 1, MessageId(0, 1), 0, _NoSettler())


def test_a_handler_past_its_limit_is_reported_then_interrupted_and_the_runner_says_timed_out() -> None:
    expired: list[Watch] = []
    limits = TimeLimits(expired.append)
    interrupted = threading.Event()

    def spin(_message: Message) -> None:
        try:
            while True:
                time.sleep(0.01)
        except TimeLimitExceeded:
            interrupted.set()
            raise

    try:
        started = time.monotonic()
        outcome = ThreadRunner(spin, limits).run(_message(), 0.3)
        assert outcome.kind == "timed_out" and interrupted.is_set()
        assert 0.3 <= time.monotonic() - started < 2.0
        assert [w.limit_s for w in expired] == [0.3]
    finally:
        limits.close()


def test_a_handler_within_its_limit_is_neither_reported_nor_interrupted() -> None:
    expired: list[Watch] = []
    limits = TimeLimits(expired.append)
    try:
        outcome = ThreadRunner(lambda _m: time.sleep(0.05), limits).run(_message(), 5.0)
        assert outcome.kind == "returned" and expired == []
    finally:
        limits.close()


def test_a_handler_that_swallows_exceptions_still_cannot_catch_the_interrupt_as_an_exception() -> None:
    limits = TimeLimits(lambda _w: None)

    def stubborn(_message: Message) -> None:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):  # what careless handlers do
                time.sleep(0.01)

    try:
        started = time.monotonic()
        assert ThreadRunner(stubborn, limits).run(_message(), 0.2).kind == "timed_out"
        assert time.monotonic() - started < 2.0
    finally:
        limits.close()
