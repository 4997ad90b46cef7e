"""Worker: runs a handler over one or more queues with ``concurrency`` threads (or child processes).

The run loop: one consumer per queue fills its ready buffer ahead; the Dispatcher gives each thread one message
when it is free (``dispatch``); the thread runs the handler (``handler_runner``, under ``time_limit``) and settles
the message (``settle``); each queue's PrefetchWindow (``prefetch``) bounds what its consumer holds, from how long
the handlers take. SIGTERM/SIGINT drain: no new messages, running handlers finish (up to ``drain_timeout_s``),
buffered messages no handler saw are given back (their delivery count unchanged); then each consumer closes within
``close_timeout_s``.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from types import FrameType
from typing import Any

import structlog

from kmq import otel
from kmq._kafka.group_view import KafkaGroupAdmin
from kmq._kafka.offsets import group_members
from kmq._kafka.topics import check_topics
from kmq.client.consumer import Consumer
from kmq.client.message import Message
from kmq.config import Config
from kmq.errors import ConfigError, KmqError, UndeliveredMarkersError
from kmq.metrics_http import PROBE_TIMEOUT_S, BrokerProbe, TrackerPresence, first_problem, serve
from kmq.wire import HEADER_DELIVER_AT, now_ms, validate_queue_name
from kmq.worker.async_runner import AsyncServe, call_async, is_coroutine_handler
from kmq.worker.dispatch import Dispatcher
from kmq.worker.handler_runner import Handler, Outcome, ProcessRunner, ThreadRunner, load_handler
from kmq.worker.health import WorkerHealth
from kmq.worker.metrics import ThreadSlot, WorkerMetrics
from kmq.worker.prefetch import PrefetchWindow
from kmq.worker.settle import Backoff, SettlePolicy
from kmq.worker.time_limit import TimeLimits, Watch

__all__ = ["Backoff", "Handler", "Worker", "load_handler"]

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

#: How often the run loop looks at its threads (alive? all busy for how long?).
TICK_S = 0.2


@dataclass
class Worker:
    """Runs ``handler`` on every message of ``queues`` with ``concurrency`` threads (or processes).

    ``time_limit_s``: a handler run longer than this is stopped and its message released (a failed delivery, so
    ``max_deliveries`` still ends it); a message sent with ``time_limit`` uses its own. ``run()`` returns the
    counts, or raises UndeliveredMarkersError if settles could not be written durably at exit.

    An ``async def`` handler runs on one event loop (in one thread) with at most ``concurrency`` runs at once, under
    the same rules; its time limit cancels the run (``async_runner``).
    """

    config: Config
    #: The queues to serve, one consumer each.
    queues: Sequence[str]
    #: Called with each Message: return → ack, ``Reject`` → dead letter, an exception → retry with backoff.
    handler: Handler
    #: Handler threads (or child processes with ``processes``).
    concurrency: int = 1
    #: Run the handler in child processes (CPU-bound work); needs ``handler_spec``.
    processes: bool = False
    #: ``MODULE:FUNCTION`` of the handler, for the child processes to import.
    handler_spec: str = ""
    backoff: Backoff = field(default_factory=Backoff)
    #: On SIGTERM/SIGINT or ``stop()``, how long running handlers get to finish.
    drain_timeout_s: float = 30.0
    #: Then how long each consumer gets to write its last markers and leave its group.
    close_timeout_s: float = 10.0
    #: A handler run longer than this is stopped and its message released (None: no limit).
    time_limit_s: float | None = None
    #: What was done so far: acked, released, rejected, dead_lettered, … (``run()`` returns it too).
    counts: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int) or self.concurrency < 1:
            raise ConfigError("concurrency", f"must be at least 1, got {self.concurrency!r}")
        for name in ("drain_timeout_s", "close_timeout_s"):
            if getattr(self, name) < 0:
                raise ConfigError(name, f"must be >= 0 seconds, got {getattr(self, name)}")
        if self.time_limit_s is not None and not self.time_limit_s > 0:
            raise ConfigError("time_limit_s", f"must be a positive number of seconds, got {self.time_limit_s}")
        if self.processes and not self.handler_spec:
            raise ConfigError("handler_spec", "processes=True needs MODULE:FUNCTION to import in the children")
        #: The handler is a coroutine function: its runs share one event loop.
        self.coroutines = is_coroutine_handler(self.handler)
        if self.coroutines and self.processes:
            raise ConfigError("processes", "an async def handler runs on the worker's event loop; child processes "
                                           "are for sync (CPU-bound) handlers")
        self.metrics = WorkerMetrics(self.queues)
        self._settle = SettlePolicy(self.config, self.backoff, self.metrics, self.counts, self.processes,
                                    coroutines=self.coroutines)
        self._stop = threading.Event()
        self._dispatcher: Dispatcher | None = None
        self._windows: dict[str, PrefetchWindow] = {}
        #: The first consumer failure (a fatal Kafka error: a fenced client_id): ``run()`` raises it at the end.
        self._failure: KmqError | None = None
        self._consumers: list[Consumer] = []

    def __call__(self, message: Message) -> object:
        """Runs the handler on ``message`` (a decorated function stays callable, e.g. in a unit test)."""
        return self.handler(message)

    def stop(self) -> None:
        """Starts the drain, as SIGTERM does; ``run()`` returns once it is done. Safe from any thread."""
        self._stop.set()
        for consumer in self._consumers:
            consumer.stop_taking()
        if self._dispatcher is not None:
            self._dispatcher.stop()

    def run(self, install_signals: bool = True) -> Counter[str]:
        """Processes messages until ``stop()`` (or SIGTERM/SIGINT); returns counts of acked, released, …"""
        if install_signals:
            def on_signal(_signum: int, _frame: FrameType | None) -> None:
                log.info("worker_draining", drain_timeout_s=self.drain_timeout_s)
                self.stop()

            signal.signal(signal.SIGTERM, on_signal)
            signal.signal(signal.SIGINT, on_signal)
        # Bound first: a port in use fails in one line before this worker joins any group.
        server = self._serve_metrics() if self.config.metrics_port else None
        try:
            # Here, not in each consumer: a markers topic on CreateTime would let one skewed clock fire
            # redeliveries.
            check_topics(self.config, timeout_s=self.config.connect_timeout_ms / 1000)
            self._consumers = consumers = self._open_consumers()
        except BaseException:
            if server is not None:
                server.shutdown()
                server.server_close()
            raise
        time_limits = None if self.coroutines else TimeLimits(self._time_limit_expired)
        runners = [] if time_limits is None else [
            ProcessRunner(self.handler_spec, self._stop) if self.processes else ThreadRunner(self.handler, time_limits)
            for _ in range(self.concurrency)]
        self.metrics.slots = slots = [ThreadSlot(f"kmq-worker-{i}", self.queues) for i in range(self.concurrency)]
        self._dispatcher = Dispatcher(consumers)
        if self._stop.is_set():
            self._dispatcher.stop()
        # Daemon threads: a handler still running after the drain timeout must not keep the process alive.
        if self.coroutines:
            serve = AsyncServe(self._dispatcher, slots, self._handle_async, self._settle.give_back, self._stop,
                               self.config.at_most_once_queues, self.drain_timeout_s, self._consumer_failed)
            threads = [threading.Thread(target=serve.run, name="kmq-worker-loop", daemon=True)]
        else:
            threads = [threading.Thread(target=self._serve, args=(slots[i], runners[i]), name=slots[i].name,
                                        daemon=True) for i in range(self.concurrency)]
        for thread in threads:
            thread.start()
        log.info("worker_started", queues=list(self.queues), concurrency=self.concurrency,
                 processes=self.processes, time_limit_s=self.time_limit_s)
        try:
            while not self._stop.wait(TICK_S):
                if not any(t.is_alive() for t in threads):
                    break
                self._floor_windows(slots)
            self.stop()
            # The event loop cancels its runs at the drain timeout itself: give it time to do so.
            self._drain(threads, self.drain_timeout_s + (5.0 if self.coroutines else 0.0))
        finally:
            if time_limits is not None:
                time_limits.close()
            for runner in runners:
                runner.close()  # kills a child still running past the drain timeout: its message is released
            undelivered = self._close(consumers)
            if server is not None:
                server.shutdown()
                server.server_close()
        log.info("worker_stopped", **dict(self.counts))
        if self._failure is not None:
            raise self._failure
        if undelivered:
            raise UndeliveredMarkersError(
                f"{undelivered} settle marker record(s) (acks, releases or rejects) were not written to "
                f"{self.config.marker_topic!r}: those messages will be delivered again", undelivered)
        return self.counts

    def _open_consumers(self) -> list[Consumer]:
        consumers: list[Consumer] = []
        try:
            for q in self.queues:
                # From its first Start: hold no more than the threads run until the handlers' run time is known.
                consumer = Consumer(self.config, validate_queue_name(q), max_in_flight=self.concurrency)
                self._windows[consumer.queue] = PrefetchWindow(self.concurrency, self.config.max_in_flight,
                                                               _limit_setter(consumer))
                self.metrics.in_flight.labels(consumer.queue).set_function(_in_flight_of(consumer))
                self.metrics.late_acks[consumer.queue] = _late_acks_of(consumer)
                consumers.append(consumer)
        except BaseException:
            for consumer in consumers:
                consumer.close(self.close_timeout_s)
            raise
        return consumers

    def _floor_windows(self, slots: list[ThreadSlot]) -> None:
        """All threads busy: what they have been running for is a floor on each queue's run time, so a switch to
        slow jobs shrinks the window before the first of them ends."""
        now = time.perf_counter()
        running: dict[str, float] = {}
        for slot in slots:
            queue, since = slot.queue, slot.since
            if queue is None:
                return
            running[queue] = min(running.get(queue, now - since), now - since)
        for queue, seconds in running.items():
            self._windows[queue].at_least(seconds)

    def _drain(self, threads: list[threading.Thread], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in threads if t.is_alive()]
        if stuck:
            log.warning("worker_drain_timeout", drain_timeout_s=self.drain_timeout_s, still_running=stuck,
                        note="their messages are released; the threads end with the process")

    def _close(self, consumers: list[Consumer]) -> int:
        undelivered = 0
        for consumer in consumers:
            try:
                consumer.close(self.close_timeout_s)  # gives back or releases whatever a handler still holds
            except UndeliveredMarkersError as err:
                undelivered += err.undelivered
            except KmqError as err:
                log.error("consumer_close_failed", queue=consumer.queue, error=str(err))
            # The summary tells what the close settled too (what threads held past the drain, what was buffered).
            self.counts.update({k: v for k, v in consumer.settled_at_close.items() if v})
        return undelivered

    def _serve_metrics(self) -> ThreadingHTTPServer:
        probes: list[BrokerProbe] = []
        config = self.config
        tracker = TrackerPresence(lambda: group_members(config, config.tracker_group, PROBE_TIMEOUT_S),
                                  config.tracker_group)
        unassigned = WorkerHealth(config, lambda: self._consumers, KafkaGroupAdmin(config), time.monotonic)

        def health() -> str | None:
            if self._stop.is_set():
                return "stopping"
            if not self._consumers:
                return "starting"
            if not probes:
                consumers = list(self._consumers)
                probes.append(BrokerProbe(consumers[0].metadata_client, self.config.marker_topic,
                                          stalled=lambda: max(c.writes_stalled_s() for c in consumers)))
            failed = next((c.failure for c in self._consumers if c.failure), None)
            # At-most-once queues need no tracker (nothing of theirs is ever redelivered).
            needs_tracker = any(q not in config.at_most_once_queues for q in self.queues)
            return failed or first_problem(probes[0], unassigned.ready,
                                           tracker if needs_tracker else lambda: None)

        return serve(self.metrics.registry, self.config.metrics_host, self.config.metrics_port, health,
                     live=lambda: unassigned.live() if self._consumers else None)

    # --- a worker thread --------------------------------------------------------------------------------------

    def _serve(self, slot: ThreadSlot, runner: ThreadRunner | ProcessRunner) -> None:
        assert self._dispatcher is not None
        next_message = self._dispatcher.next
        runner.wait_ready()
        while True:
            try:
                msg = next_message()
            except KmqError as err:
                self._consumer_failed(err)
                return
            if msg is None:
                return
            # Stopping: give back what no handler started, unless nothing could bring it back (at most once).
            if self._stop.is_set() and msg.queue not in self.config.at_most_once_queues:
                self._settle.give_back(msg)
                continue
            self._handle(msg, runner, slot)

    def _consumer_failed(self, err: KmqError) -> None:
        log.error("worker_consumer_failed", error=str(err))
        if self._failure is None:
            self._failure = err
        self.stop()

    def _handle(self, msg: Message, runner: ThreadRunner | ProcessRunner, slot: ThreadSlot) -> None:
        limit = self._start_run(msg, slot)
        tracing = otel.tracer()
        if tracing is not None:
            with otel.processing(tracing, msg, self.config.message_topic) as span:  # the handler's spans nest in it
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

    async def _handle_async(self, msg: Message, slot: ThreadSlot) -> None:
        """``_handle`` for a coroutine handler, as a task on the worker's event loop."""
        limit = self._start_run(msg, slot)
        tracing = otel.tracer()
        if tracing is None:
            await self._run_async(msg, slot, limit, None)
            return
        with otel.processing(tracing, msg, self.config.message_topic) as span:
            await self._run_async(msg, slot, limit, span)

    async def _run_async(self, msg: Message, slot: ThreadSlot, limit: float | None, span: Any) -> None:
        started = slot.since
        try:
            outcome = await call_async(self.handler, msg, limit)  # type: ignore[arg-type]
        finally:  # also when the drain cancels it: the consumer's close releases its message
            ran = _end_run(slot, started, msg.queue)
        self._settle_run(msg, outcome, limit, ran, span)

    def _start_run(self, msg: Message, slot: ThreadSlot) -> float | None:
        """Before a handler run: its time limit; the wait metric and the slot's state are set."""
        queue = msg.queue
        limit = self.time_limit_s
        due_ms = msg.enqueued_at_ms
        if msg.headers:  # most messages have none: skip the look-ups
            limit = msg.time_limit or limit
            deliver_at = msg.headers.get(HEADER_DELIVER_AT)
            if deliver_at:
                due_ms = max(due_ms, int(deliver_at))
        slot.tallies[queue].waits.observe(max(0.0, (now_ms() - due_ms) / 1000))
        slot.since = time.perf_counter()
        slot.queue = queue
        return limit

    def _settle_run(self, msg: Message, outcome: Outcome, limit: float | None, ran: float, span: Any) -> None:
        self._windows[msg.queue].observe(ran)
        if span is not None and outcome.kind in ("failed", "timed_out"):
            otel.failed(span, outcome.detail or "TimeLimitExceeded: the handler ran past its time limit")
        self._settle.settle(msg, outcome, limit)

    def _time_limit_expired(self, watch: Watch) -> None:
        """On the watchdog thread: the handler's thread is interrupted right after this."""
        self._settle.timed_out(watch.message, watch.limit_s)


def _end_run(slot: ThreadSlot, started: float, queue: str) -> float:
    """After a handler run: how long it took (tallied); the slot is free again."""
    slot.queue = None
    ran = time.perf_counter() - started
    slot.tallies[queue].durations.observe(ran)
    return ran


def _in_flight_of(consumer: Consumer) -> Callable[[], float]:
    return lambda: consumer.in_flight


def _late_acks_of(consumer: Consumer) -> Callable[[], int]:
    return lambda: consumer.late_acks


def _limit_setter(consumer: Consumer) -> Callable[[int], None]:
    def set_limit(size: int) -> None:
        consumer.max_in_flight = size

    return set_limit
