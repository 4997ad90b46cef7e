"""Worker: runs a handler over one or more queues. Return → ack; ``Reject`` → reject; any other exception, or a
run past its time limit → release with exponential backoff and jitter, or dead letter once the message has had
``max_deliveries``.

Concurrency is threads by default; ``processes=True`` gives each thread a child process that runs the handler
(CPU-bound work; a child past its time limit is killed and replaced). SIGTERM/SIGINT drain: no new messages,
running handlers finish (up to ``drain_timeout_s``), prefetched messages no handler saw are given back (their
delivery count unchanged); then each consumer closes within ``close_timeout_s``.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from types import FrameType

import structlog

from kmq._kafka.topics import check_topics
from kmq.client.consumer import Consumer
from kmq.client.message import Message
from kmq.config import Config
from kmq.errors import ConfigError, KmqError, UndeliveredMarkersError
from kmq.metrics_http import BrokerProbe, serve
from kmq.wire import validate_queue_name
from kmq.worker.handler_runner import Handler, Outcome, ProcessRunner, ThreadRunner, load_handler
from kmq.worker.metrics import WorkerMetrics
from kmq.worker.time_limit import TimeLimits, Watch

__all__ = ["Backoff", "Handler", "Worker", "load_handler"]

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

#: Past the drain timeout, how often a thread still running a handler is reported.
STUCK_REPORT_S = 10.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Backoff:
    """Delay before retrying a failed message: base·2^(n-1), capped at ``max_s``, with equal jitter."""

    base_s: float = 1.0
    max_s: float = 300.0

    def __post_init__(self) -> None:
        if not 0 <= self.base_s <= self.max_s:
            raise ConfigError("backoff", f"needs 0 <= base <= max, got base {self.base_s} s, max {self.max_s} s")

    def delay_s(self, delivery_count: int) -> float:
        ceiling = min(self.max_s, self.base_s * 2.0 ** max(0, delivery_count - 1))
        return ceiling / 2 + random.uniform(0, ceiling / 2)


@dataclass
class Worker:
    """Runs ``handler`` on every message of ``queues`` with ``concurrency`` threads (or processes).

    ``time_limit_s``: a handler run longer than this is stopped and its message released (a failed delivery, so
    ``max_deliveries`` still ends it); a message sent with ``time_limit`` uses its own. ``run()`` returns the
    counts, or raises UndeliveredMarkersError if settles could not be written durably at exit.
    """

    config: Config
    queues: Sequence[str]
    handler: Handler
    concurrency: int = 1
    processes: bool = False
    handler_spec: str = ""
    backoff: Backoff = field(default_factory=Backoff)
    drain_timeout_s: float = 30.0
    close_timeout_s: float = 10.0
    time_limit_s: float | None = None
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
        self.metrics = WorkerMetrics()
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def stop(self) -> None:
        self._stop.set()

    def run(self, install_signals: bool = True) -> Counter[str]:
        """Processes messages until ``stop()`` (or SIGTERM/SIGINT); returns counts of acked, released, …"""
        if install_signals:
            def on_signal(_signum: int, _frame: FrameType | None) -> None:
                log.info("worker_draining", drain_timeout_s=self.drain_timeout_s)
                self.stop()

            signal.signal(signal.SIGTERM, on_signal)
            signal.signal(signal.SIGINT, on_signal)
        # Prefetch a few messages per thread: a Start batch and a commit cost the same for 1 or 32 records.
        prefetch = min(self.config.max_in_flight, max(32, self.concurrency * 8))
        config = self.config.replace(max_in_flight=prefetch,
                                     receive_buffer_capacity=min(self.config.receive_buffer_capacity, prefetch))
        # Here, not in each consumer: a markers topic on CreateTime would let one skewed clock fire redeliveries.
        check_topics(self.config, timeout_s=self.config.connect_timeout_ms / 1000)
        consumers: list[Consumer] = []
        try:
            for q in self.queues:
                consumers.append(Consumer(config, validate_queue_name(q)))
        except BaseException:
            for consumer in consumers:
                consumer.close(self.close_timeout_s)
            raise
        for consumer in consumers:
            self.metrics.in_flight.labels(consumer.queue).set_function(_in_flight_of(consumer))
        server = self._serve_metrics(consumers[0]) if self.config.metrics_port else None
        time_limits = TimeLimits(self._time_limit_expired)
        runners = [ProcessRunner(self.handler_spec, self._stop) if self.processes
                   else ThreadRunner(self.handler, time_limits) for _ in range(self.concurrency)]
        # Daemon threads: a handler still running after the drain timeout must not keep the process alive.
        # Each thread takes a few messages per receive: fewer wake-ups, and the rest stay with the other threads.
        batch = max(1, min(8, prefetch // (2 * self.concurrency)))
        threads = [threading.Thread(target=self._serve, args=(consumers, i, runners[i], batch),
                                    name=f"kmq-worker-{i}", daemon=True) for i in range(self.concurrency)]
        for thread in threads:
            thread.start()
        log.info("worker_started", queues=list(self.queues), concurrency=self.concurrency,
                 processes=self.processes, time_limit_s=self.time_limit_s)
        try:
            while not self._stop.wait(0.2):
                if not any(t.is_alive() for t in threads):
                    break
            self._stop.set()
            self._drain(threads)
        finally:
            time_limits.close()
            for runner in runners:
                runner.close()  # kills a child still running past the drain timeout: its message is released
            undelivered = self._close(consumers)
            if server is not None:
                server.shutdown()
                server.server_close()
        log.info("worker_stopped", **dict(self.counts))
        if undelivered:
            raise UndeliveredMarkersError(
                f"{undelivered} settle marker record(s) (acks, releases or rejects) were not written to "
                f"{self.config.marker_topic!r}: those messages will be delivered again", undelivered)
        return self.counts

    def _drain(self, threads: list[threading.Thread]) -> None:
        deadline = time.monotonic() + self.drain_timeout_s
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
        return undelivered

    def _serve_metrics(self, consumer: Consumer) -> ThreadingHTTPServer:
        probe = BrokerProbe(consumer.metadata_client, self.config.marker_topic, stalled=consumer.writes_stalled_s)

        def health() -> str | None:
            if self._stop.is_set():
                return "stopping"
            return consumer.failure or probe()

        return serve(self.metrics.registry, self.config.metrics_host, self.config.metrics_port, health)

    # --- a worker thread --------------------------------------------------------------------------------------

    def _serve(self, consumers: list[Consumer], index: int, runner: ThreadRunner | ProcessRunner,
               batch: int) -> None:
        turn = index
        while not self._stop.is_set():
            consumer = consumers[turn % len(consumers)]
            turn += 1
            try:
                messages = consumer.receive_many(batch, 0.2 if len(consumers) > 1 else 0.5)
            except KmqError as err:
                log.error("worker_consumer_failed", queue=consumer.queue, error=str(err))
                self._stop.set()
                return
            for i, msg in enumerate(messages):
                # Stopping: give back what no handler started, unless nothing could bring it back (at most once).
                if self._stop.is_set() and consumer.queue not in self.config.at_most_once_queues:
                    self._give_back(messages[i:])
                    break
                self._handle(msg, runner)

    def _give_back(self, messages: list[Message]) -> None:
        for msg in messages:
            self._settle(msg, "returned", msg.give_back)

    def _handle(self, msg: Message, runner: ThreadRunner | ProcessRunner) -> None:
        queue = msg.queue
        limit = msg.time_limit or self.time_limit_s
        self.metrics.in_progress.labels(queue).inc()
        started = time.perf_counter()
        try:
            outcome = runner.run(msg, limit)
        finally:
            self.metrics.in_progress.labels(queue).dec()
            self.metrics.duration.labels(queue).observe(time.perf_counter() - started)
            self.metrics.processed.labels(queue).inc()
        self._settle_outcome(msg, outcome, limit)

    def _settle_outcome(self, msg: Message, outcome: Outcome, limit: float | None) -> None:
        if outcome.kind == "timed_out":
            if not msg.settled:  # a child process past its limit (a thread's message the watchdog settled)
                self._timed_out(msg, limit)
            return
        if outcome.settled is not None:  # the handler settled it in a child process
            self._apply_requested(msg, outcome)
        elif msg.settled:  # the handler settled it itself
            with self._lock:
                self.counts[_SETTLED_AS.get(msg._settled_as, msg._settled_as)] += 1
        elif outcome.kind == "returned":
            self._settle(msg, "acked", msg.ack)
        elif outcome.kind == "rejected":
            self.metrics.rejects.labels(msg.queue).inc()
            log.warning("message_rejected", queue=msg.queue, message_id=str(msg.message_id),
                        reason=outcome.detail)
            if self._settle(msg, "rejected", lambda: msg.reject(outcome.detail)):
                self.metrics.dead_letters.labels(msg.queue).inc()  # a reject lands on the dead-letter topic too
            return
        if outcome.kind == "failed":
            self.metrics.errors.labels(msg.queue).inc()
            if not msg.settled:
                self._failed(msg, outcome.detail, outcome.traceback)
            else:
                log.warning("handler_failed_after_settling", queue=msg.queue, message_id=str(msg.message_id),
                            settled_as=msg._settled_as, error=outcome.detail, traceback=outcome.traceback)

    def _apply_requested(self, msg: Message, outcome: Outcome) -> None:
        assert outcome.settled is not None
        how, arg = outcome.settled
        if how == "ack":
            self._settle(msg, "acked", msg.ack)
        elif how == "release":
            self._settle(msg, "released", lambda: msg.release(arg))
        elif how == "reject":
            self._settle(msg, "rejected", lambda: msg.reject(arg))
        else:
            self._settle(msg, "returned", msg.give_back)

    def _time_limit_expired(self, watch: Watch) -> None:
        """On the watchdog thread: the handler's thread is interrupted right after this."""
        self._timed_out(watch.message, watch.limit_s)

    def _timed_out(self, msg: Message, limit: float | None) -> None:
        self.metrics.errors.labels(msg.queue).inc()
        self.metrics.time_limits.labels(msg.queue).inc()
        with self._lock:
            self.counts["timed_out"] += 1
        how = "the handler's process is killed and replaced" if self.processes else \
            "the handler's thread is interrupted (a handler blocked in a C call keeps its thread until it returns)"
        self._failed(msg, f"TimeLimitExceeded: the handler ran past its time limit of {limit} s; {how}", "")

    def _failed(self, msg: Message, error: str, trace: str) -> None:
        limit = self.config.max_deliveries
        if msg.queue in self.config.at_most_once_queues:
            limit = 1  # no retry: nothing would deliver it again
        if limit and msg.delivery_count >= limit:
            reason = f"failed {msg.delivery_count} time(s), last: {error}"
            log.error("message_dead_lettered", queue=msg.queue, message_id=str(msg.message_id),
                      first_message_id=str(msg.first_message_id), delivery_count=msg.delivery_count,
                      error=error, traceback=trace)
            if self._settle(msg, "dead_lettered", lambda: msg.reject(reason)):
                self.metrics.dead_letters.labels(msg.queue).inc()
            return
        delay = self.backoff.delay_s(msg.delivery_count)
        log.warning("handler_failed", queue=msg.queue, message_id=str(msg.message_id),
                    delivery_count=msg.delivery_count, retry_in_s=round(delay, 2), error=error, traceback=trace)
        if self._settle(msg, "released", lambda: msg.release(delay)):
            self.metrics.retries.labels(msg.queue).inc()

    def _settle(self, msg: Message, outcome: str, action: Callable[[], None]) -> bool:
        try:
            action()
        except KmqError as err:
            log.warning("settle_failed", queue=msg.queue, message_id=str(msg.message_id), outcome=outcome,
                        error=str(err))
            return False
        with self._lock:
            self.counts[outcome] += 1
        return True


def _in_flight_of(consumer: Consumer) -> Callable[[], float]:
    return lambda: consumer.in_flight


#: Message._settled_as (what the handler called) → the count it goes to.
_SETTLED_AS = {"ack": "acked", "release": "released", "reject": "rejected", "give back": "returned"}
