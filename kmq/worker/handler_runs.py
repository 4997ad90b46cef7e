"""HandlerRuns: what a worker thread (or the event loop, for ``async def`` handlers) does with each message.

A thread takes messages from the Dispatcher until it stops; for each: its time limit, the wait metric, the handler
run (``handler_runner``, or ``async_runner`` on the loop), the run's time for the prefetch window, and the settle
(``settle``). A stopping worker gives back what no handler started.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import structlog

from kmq import otel
from kmq.client.message import Message
from kmq.config import Config
from kmq.errors import KmqError
from kmq.wire import now_ms
from kmq.worker.async_runner import call_async
from kmq.worker.dispatch import Dispatcher
from kmq.worker.handler_runner import Handler, Outcome, ProcessRunner, ThreadRunner
from kmq.worker.metrics import ThreadSlot
from kmq.worker.prefetch import PrefetchWindow
from kmq.worker.settle import SettlePolicy
from kmq.worker.time_limit import Watch

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)


class HandlerRuns:
    """``serve(slot, runner)`` is a worker thread's body; ``handle_async`` a coroutine handler's task. The first
    consumer failure stops the worker (``stop``) and is kept in ``failure``."""

    def __init__(self, config: Config, handler: Handler, time_limit_s: float | None, settle: SettlePolicy,
                 windows: dict[str, PrefetchWindow], dispatcher: Dispatcher, stop: Callable[[], None],
                 stopping: Callable[[], bool]) -> None:
        self._config = config
        self._handler = handler
        self._time_limit_s = time_limit_s
        self._settle = settle
        self._windows = windows
        self.dispatcher = dispatcher
        self._stop = stop
        self._stopping = stopping
        #: The first consumer failure (a fatal Kafka error: a fenced client_id): the worker raises it at the end.
        self.failure: KmqError | None = None

    def serve(self, slot: ThreadSlot, runner: ThreadRunner | ProcessRunner) -> None:
        next_many = self.dispatcher.next_many
        windows = list(self._windows.values())
        runner.wait_ready()
        while True:
            try:
                # A lone thread takes a few fast jobs at once (PrefetchWindow.thread_batch); others take one.
                batch = next_many(min(window.thread_batch() for window in windows))
            except KmqError as err:
                self.consumer_failed(err)
                return
            if not batch:
                return
            # Per batch, not per job: a tracer configured meanwhile counts from the next batch, and each job's wait
            # is the wall clock read here plus the monotonic time since.
            tracing = otel.tracer()
            slot.clock_ms, slot.clock_at = now_ms(), time.perf_counter()
            for msg in batch:
                # Stopping: give back what no handler started, unless nothing could bring it back (at most once).
                if self._stopping() and msg.queue not in self._config.at_most_once_queues:
                    self._settle.give_back(msg)
                    continue
                self._handle(msg, runner, slot, tracing)

    def stop_dispatch(self) -> None:
        """Every thread's next ask for a message gets None."""
        self.dispatcher.stop()

    def consumer_failed(self, err: KmqError) -> None:
        log.error("worker_consumer_failed", error=str(err))
        if self.failure is None:
            self.failure = err
        self._stop()

    def time_limit_expired(self, watch: Watch) -> None:
        """On the watchdog thread: the handler's thread is interrupted right after this. A grouped message is
        settled once its handler really stopped (its run then ends timed out), not now: its group's next run
        must not overlap a handler still blocked in a C call (message groups, #33)."""
        if watch.message.group is not None:
            return
        self._settle.timed_out(watch.message, watch.limit_s)

    def _handle(self, msg: Message, runner: ThreadRunner | ProcessRunner, slot: ThreadSlot, tracing: Any) -> None:
        limit = self._start_run(msg, slot)
        if tracing is not None:
            with otel.processing(tracing, msg, self._config.topics_for(msg.queue).messages) as span:  # spans nest in it
                self._run(msg, runner, slot, limit, span)
            return
        started = slot.since  # _run's body, inline: this is the path of every job
        try:
            outcome = runner.run(msg, limit)
        finally:
            ran = _end_run(slot, started, msg.queue)
        self._windows[msg.queue].observe(ran)
        self._settle.settle(msg, outcome, limit)

    def _run(self, msg: Message, runner: ThreadRunner | ProcessRunner, slot: ThreadSlot, limit: float | None,
             span: Any) -> None:
        started = slot.since
        try:
            outcome = runner.run(msg, limit)
        finally:
            ran = _end_run(slot, started, msg.queue)
        self._settle_run(msg, outcome, limit, ran, span)

    async def handle_async(self, msg: Message, slot: ThreadSlot) -> None:
        """``_handle`` for a coroutine handler, as a task on the worker's event loop."""
        slot.clock_ms, slot.clock_at = now_ms(), time.perf_counter()
        limit = self._start_run(msg, slot)
        tracing = otel.tracer()
        if tracing is None:
            await self._run_async(msg, slot, limit, None)
            return
        with otel.processing(tracing, msg, self._config.topics_for(msg.queue).messages) as span:
            await self._run_async(msg, slot, limit, span)

    async def _run_async(self, msg: Message, slot: ThreadSlot, limit: float | None, span: Any) -> None:
        started = slot.since
        try:
            outcome = await call_async(self._handler, msg, limit)  # type: ignore[arg-type]
        finally:  # also when the drain cancels it: the consumer's close releases its message
            ran = _end_run(slot, started, msg.queue)
        self._settle_run(msg, outcome, limit, ran, span)

    def _start_run(self, msg: Message, slot: ThreadSlot) -> float | None:
        """Before a handler run: its time limit; the wait metric and the slot's state are set."""
        queue = msg.queue
        limit = self._time_limit_s
        due_ms = msg.enqueued_at_ms
        if msg.record_headers:  # most messages have none: skip the look-ups
            limit = msg.time_limit or limit
            deliver_at_ms = msg.deliver_at_ms
            if deliver_at_ms:
                due_ms = max(due_ms, deliver_at_ms)
        since = time.perf_counter()
        slot.tallies[queue].waits.observe(max(0.0, (slot.clock_ms - due_ms) / 1000 + (since - slot.clock_at)))
        slot.since = since
        slot.queue = queue
        return limit

    def _settle_run(self, msg: Message, outcome: Outcome, limit: float | None, ran: float, span: Any) -> None:
        self._windows[msg.queue].observe(ran)
        if span is not None and outcome.kind in ("failed", "timed_out"):
            otel.failed(span, outcome.detail or "TimeLimitExceeded: the handler ran past its time limit")
        self._settle.settle(msg, outcome, limit)


def _end_run(slot: ThreadSlot, started: float, queue: str) -> float:
    """After a handler run: how long it took (tallied); the slot is free again."""
    slot.queue = None
    ran = time.perf_counter() - started
    slot.tallies[queue].durations.observe(ran)
    return ran
