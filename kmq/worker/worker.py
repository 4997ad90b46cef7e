"""Worker: runs a handler over one or more queues with ``concurrency`` threads (or child processes).

The run loop: one consumer per queue fills its ready buffer ahead (``queue_consumers``, each with the PrefetchWindow
that bounds what it holds from how long the handlers take); the Dispatcher gives each thread one message when it is
free (``dispatch``); the thread runs the handler and settles the message (``handler_runs``). The metrics endpoint
(``metrics_endpoint``) is bound before anything talks to the broker. SIGTERM/SIGINT drain: no new messages, running
handlers finish (up to ``drain_timeout_s``), buffered messages no handler saw are given back (their delivery count
unchanged); then each consumer closes within ``close_timeout_s``.
"""

from __future__ import annotations

import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType

import structlog

from kmq._kafka.topics import check_topics
from kmq.client.message import Message
from kmq.config import Config
from kmq.errors import ConfigError, UndeliveredMarkersError
from kmq.worker.async_runner import AsyncServe, is_coroutine_handler
from kmq.worker.backoff import Backoff
from kmq.worker.dispatch import Dispatcher
from kmq.worker.handler_runner import Handler, ProcessRunner, ThreadRunner, load_handler
from kmq.worker.handler_runs import HandlerRuns
from kmq.worker.metrics import ThreadSlot, WorkerMetrics
from kmq.worker.metrics_endpoint import MetricsEndpoint
from kmq.worker.queue_consumers import QueueConsumers
from kmq.worker.settle import SettlePolicy
from kmq.worker.time_limit import TimeLimits

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
    #: The queues to serve, one consumer each (one in each set a queue moving between topic sets is read in).
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
        if self.coroutines and self.processes:
            raise ConfigError("processes", "an async def handler runs on the worker's event loop; child processes "
                                           "are for sync (CPU-bound) handlers")
        self.metrics = WorkerMetrics(self.queues)
        self._stop = threading.Event()
        self._consumers = QueueConsumers(self.config, self.queues, self.concurrency, self.metrics)
        self._endpoint = MetricsEndpoint(self.config, self.queues, self.metrics, self._consumers, self._stop)
        self._runs: HandlerRuns | None = None

    @property
    def coroutines(self) -> bool:
        """The handler is a coroutine function: its runs share one event loop."""
        return is_coroutine_handler(self.handler)

    @property
    def wrapped_handler(self) -> Handler:
        """The handler (``load_handler`` of a function decorated with ``@queue.worker`` returns it)."""
        return self.handler

    def __call__(self, message: Message) -> object:
        """Runs the handler on ``message`` (a decorated function stays callable, e.g. in a unit test)."""
        return self.handler(message)

    def stop(self) -> None:
        """Starts the drain, as SIGTERM does; ``run()`` returns once it is done. Safe from any thread."""
        self._stop.set()
        self._consumers.stop_taking()
        if self._runs is not None:
            self._runs.stop_dispatch()

    def bind_metrics(self, port: int | None = None) -> int | None:
        """Serves /metrics and /healthz on ``config.metrics_port`` (if set; or on ``port``, 0 for a free one) now,
        before anything talks to the broker: a port in use raises KmqError. ``run()`` does it first if it was not
        done. Returns the port served on (None: none)."""
        return self._endpoint.bind(port)

    def run(self, install_signals: bool = True, on_started: Callable[[], object] | None = None) -> Counter[str]:
        """Processes messages until ``stop()`` (or SIGTERM/SIGINT); returns counts of acked, released, …
        ``on_started`` is called once the consumers are open and the handler threads run."""
        if install_signals:
            def on_signal(_signum: int, _frame: FrameType | None) -> None:
                log.info("worker_draining", drain_timeout_s=self.drain_timeout_s)
                self.stop()

            signal.signal(signal.SIGTERM, on_signal)
            signal.signal(signal.SIGINT, on_signal)
        # Bound first: a port in use fails in one line before this worker joins any group.
        self.bind_metrics()
        try:
            # Here, not in each consumer: a markers topic on CreateTime would let one skewed clock fire
            # redeliveries.
            for topics in dict.fromkeys(t for q in self.queues for t in self.config.reading_sets(q)):
                check_topics(self.config, topics, timeout_s=self.config.connect_timeout_ms / 1000)
            consumers = self._consumers.open(self.close_timeout_s)
        except BaseException:
            self._endpoint.close()
            raise
        settle = SettlePolicy(self.config, self.backoff, self.metrics, self.counts, self.processes,
                              coroutines=self.coroutines)
        runs = self._runs = HandlerRuns(self.config, self.handler, self.time_limit_s, settle, self._consumers.windows,
                                        Dispatcher(consumers), self.stop, self._stop.is_set)
        if self._stop.is_set():
            runs.stop_dispatch()
        time_limits = None if self.coroutines else TimeLimits(runs.time_limit_expired)
        runners = [] if time_limits is None else [
            ProcessRunner(self.handler_spec, self._stop) if self.processes else ThreadRunner(self.handler, time_limits)
            for _ in range(self.concurrency)]
        self.metrics.slots = slots = [ThreadSlot(f"kmq-worker-{i}", self.queues) for i in range(self.concurrency)]
        # Daemon threads: a handler still running after the drain timeout must not keep the process alive.
        if self.coroutines:
            serve = AsyncServe(runs.dispatcher, slots, runs.handle_async, settle.give_back, self._stop,
                               self.config.at_most_once_queues, self.drain_timeout_s, runs.consumer_failed)
            threads = [threading.Thread(target=serve.run, name="kmq-worker-loop", daemon=True)]
        else:
            threads = [threading.Thread(target=runs.serve, args=(slots[i], runners[i]), name=slots[i].name,
                                        daemon=True) for i in range(self.concurrency)]
        for thread in threads:
            thread.start()
        log.info("worker_started", queues=list(self.queues), concurrency=self.concurrency,
                 processes=self.processes, time_limit_s=self.time_limit_s)
        try:
            if on_started is not None:
                on_started()
            while not self._stop.wait(TICK_S):
                if not any(t.is_alive() for t in threads):
                    break
                self._consumers.floor_windows(slots)
            self.stop()
            # The event loop cancels its runs at the drain timeout itself: give it time to do so.
            self._drain(threads, self.drain_timeout_s + (5.0 if self.coroutines else 0.0))
        finally:
            if time_limits is not None:
                time_limits.close()
            for runner in runners:
                runner.close()  # kills a child still running past the drain timeout: its message is released
            undelivered = self._consumers.close(self.close_timeout_s, self.counts)
            self._endpoint.close()
        log.info("worker_stopped", **dict(self.counts))
        if runs.failure is not None:
            raise runs.failure
        if undelivered:
            raise UndeliveredMarkersError(
                f"{undelivered} settle marker record(s) (acks, releases or rejects) were not written to "
                f"{', '.join(sorted({repr(c.topics.markers) for c in consumers}))}: those messages will be "
                "delivered again", undelivered)
        return self.counts

    def _drain(self, threads: list[threading.Thread], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in threads if t.is_alive()]
        if stuck:
            log.warning("worker_drain_timeout", drain_timeout_s=self.drain_timeout_s, still_running=stuck,
                        note="their messages are released; the threads end with the process")
