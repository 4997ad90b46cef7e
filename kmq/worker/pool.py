"""WorkerPool: ``kmq worker --processes N``, N worker processes that each consume for themselves, supervised.

Each child is a whole Worker (its own consumers, so a group member per queue and process, its own threads and
GIL), as Dramatiq's worker processes each hold their own broker connection: CPU-bound handlers scale with cores, and
nothing is handed between processes. The parent holds no Kafka client. It restarts a child that dies (after a
backoff that grows while children keep dying young), forwards SIGTERM/SIGINT so that every child drains, kills the
ones still running past their drain and close timeouts, and ends with an honest status: any child that failed
(died, exited with an error, was killed at the end) makes ``run()`` report it. Children are spawned, not forked:
librdkafka's threads do not survive a fork.

A ``client_id`` of the pool's config becomes ``<client_id>-<index>`` in child ``index`` (stable across restarts, so
a restarted child takes its predecessor's messages over at once); a ``{process}`` template is left to each child.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, wait
from types import FrameType
from typing import Any

import structlog

from kmq.client.process_id import PROCESS_FIELD
from kmq.config import Config
from kmq.errors import ConfigError, KmqError
from kmq.worker.backoff import Backoff
from kmq.worker.pool_metrics import PoolEndpoint

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

#: A child restarted after dying young waits this long first, doubling per young death up to RESTART_MAX_S.
RESTART_MIN_S = 0.5
RESTART_MAX_S = 30.0
#: A child that ran this long died "old": its successor starts after RESTART_MIN_S again.
YOUNG_S = 60.0
#: After the children's drain and close timeouts, how long the parent waits before killing one.
EXIT_GRACE_S = 15.0
TICK_S = 0.5
#: How often a child sends its counts to the parent.
REPORT_S = 1.0


@dataclass(frozen=True)
class WorkerRecipe:
    """What a child needs to build its Worker: plain values, pickled to a spawned interpreter."""

    config: Config
    queues: tuple[str, ...]
    #: ``MODULE:FUNCTION``, imported in each child.
    handler_spec: str
    concurrency: int = 1
    #: Each worker thread's handler in a child process of its own (``Worker.processes``).
    handler_processes: bool = False
    backoff: Backoff = field(default_factory=Backoff)
    drain_timeout_s: float = 30.0
    close_timeout_s: float = 10.0
    time_limit_s: float | None = None
    log_level: str = "info"
    log_json: bool = False
    #: Serve the child's /metrics and /healthz on a free loopback port (the pool's endpoint reads them).
    child_metrics: bool = False

    def for_child(self, index: int) -> WorkerRecipe:
        client_id = self.config.client_id
        if client_id and PROCESS_FIELD not in client_id:
            client_id = f"{client_id}-{index}"
        # The parent serves the pool's metrics port; a child serves its own on a free loopback port.
        return replace(self, config=self.config.replace(client_id=client_id, metrics_port=0,
                                                        metrics_host="127.0.0.1"),
                       child_metrics=bool(self.config.metrics_port))


@dataclass
class _Child:
    index: int
    process: Any = None
    conn: Connection | None = None
    started_at: float = 0.0
    #: Its metrics port once it reported ready (consumers open), else None.
    metrics_port: int | None = None
    ready: bool = False
    counts: Counter[str] = field(default_factory=Counter)
    #: When to start it again after it died (None: running or not to be restarted).
    restart_at: float | None = None
    young_deaths: int = 0
    #: Sent SIGTERM (once: the drain has begun).
    terminated: bool = False


class WorkerPool:
    """``run()`` serves with ``processes`` children until SIGTERM/SIGINT or ``stop()``; returns the summed counts.
    ``failures`` then lists what went wrong (empty: every child ran and drained cleanly)."""

    def __init__(self, recipe: WorkerRecipe, processes: int) -> None:
        if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
            raise ConfigError("processes", f"must be at least 1, got {processes!r}")
        self.recipe = recipe
        self.counts: Counter[str] = Counter()
        self.failures: list[str] = []
        self.restarts = 0
        self._context = multiprocessing.get_context("spawn")
        self._children = [_Child(i) for i in range(processes)]
        self._stopping = False
        self._endpoint = PoolEndpoint(recipe.config, self._children_view, lambda: self._stopping,
                                      lambda: self.restarts)

    @property
    def serving(self) -> int:
        """How many children have their consumers open and serve."""
        return sum(1 for c in self._children if c.ready)

    def bind_metrics(self) -> None:
        """Serves the pool's /metrics (every child's, labelled ``process``) and /healthz on ``metrics_port``."""
        self._endpoint.bind()

    def stop(self) -> None:
        """Starts the drain of every child, as SIGTERM does. Safe from any thread."""
        self._stopping = True
        self._terminate_all()

    def _terminate_all(self) -> None:
        for child in self._children:
            process = child.process
            if process is not None and not child.terminated and process.is_alive():
                child.terminated = True
                process.terminate()  # SIGTERM: the child's Worker drains

    def run(self, install_signals: bool = True) -> Counter[str]:
        if install_signals:
            def on_signal(_signum: int, _frame: FrameType | None) -> None:
                log.info("worker_pool_draining", processes=len(self._children))
                self.stop()

            signal.signal(signal.SIGTERM, on_signal)
            signal.signal(signal.SIGINT, on_signal)
        self.bind_metrics()
        try:
            for child in self._children:
                self._start(child)
            log.info("worker_pool_started", processes=len(self._children), queues=list(self.recipe.queues),
                     concurrency=self.recipe.concurrency)
            while not self._stopping and any(c.process is not None or c.restart_at is not None
                                             for c in self._children):
                self._supervise()
            self._drain()
        finally:
            for child in self._children:
                self._kill(child)
            self._endpoint.close()
        if self.restarts:
            self.counts["processes_restarted"] = self.restarts
        log.info("worker_pool_stopped", failures=len(self.failures), **dict(self.counts))
        return self.counts

    def _children_view(self) -> Sequence[_Child]:
        return self._children

    def _start(self, child: _Child) -> None:
        parent, theirs = self._context.Pipe(duplex=False)
        child.process = self._context.Process(target=child_main, args=(self.recipe.for_child(child.index), theirs),
                                              name=f"kmq-worker-{child.index}")
        child.process.start()
        theirs.close()
        child.conn, child.started_at, child.restart_at = parent, time.monotonic(), None
        child.ready, child.metrics_port, child.terminated = False, None, False

    def _supervise(self) -> None:
        now = time.monotonic()
        for child in self._children:
            if child.restart_at is not None and now >= child.restart_at and not self._stopping:
                self.restarts += 1
                log.warning("worker_process_restarting", process=child.index, restarts=self.restarts)
                self._start(child)
        waits = [c.conn for c in self._children if c.conn is not None]
        waits += [c.process.sentinel for c in self._children if c.process is not None]
        for ready in wait(waits, TICK_S):
            child = next(c for c in self._children if ready in (c.conn, getattr(c.process, "sentinel", None)))
            if ready is child.conn:
                self._read(child)
            else:
                self._reap(child)

    def _read(self, child: _Child) -> None:
        assert child.conn is not None
        try:
            kind, value = child.conn.recv()
        except (EOFError, OSError):
            child.conn.close()
            child.conn = None
            return
        if kind == "ready":
            child.ready, child.metrics_port = True, value
        elif kind == "counts":
            # A snapshot of everything so far, not a delta: a child killed later keeps what it last reported.
            child.counts = Counter(value)

    def _reap(self, child: _Child) -> None:
        """``child`` exited: takes its counts, says why, and starts it again unless the pool stops."""
        while child.conn is not None and child.conn.poll():
            self._read(child)
        if child.conn is not None:
            child.conn.close()
            child.conn = None
        child.process.join()
        code, ready = child.process.exitcode, child.ready
        child.process, child.ready, child.metrics_port = None, False, None
        self.counts.update(child.counts)
        child.counts = Counter()
        if self._stopping:
            # SIGTERM before its Worker took over the signal: it had not read anything yet.
            if code != 0 and not (code == -signal.SIGTERM and not ready):
                self.failures.append(f"worker process {child.index} exited with code {code} while draining")
            return
        self.failures.append(f"worker process {child.index} {_exit_text(code)} while serving")
        log.error("worker_process_died", process=child.index, exit_code=code, ready=ready)
        if not ready and not any(c.ready for c in self._children):
            # Nothing of the pool ever served: a start-up failure (its line is in the child's log), not a crash.
            log.error("worker_pool_start_failed", process=child.index, exit_code=code)
            self.stop()
            return
        young = time.monotonic() - child.started_at < YOUNG_S
        child.young_deaths = child.young_deaths + 1 if young else 0
        child.restart_at = time.monotonic() + min(RESTART_MAX_S, RESTART_MIN_S * 2 ** max(0, child.young_deaths - 1))

    def _drain(self) -> None:
        self.stop()  # again: a child started while a stop() from another thread ran may have missed it
        deadline = (time.monotonic() + self.recipe.drain_timeout_s + self.recipe.close_timeout_s + EXIT_GRACE_S)
        while any(c.process is not None for c in self._children) and time.monotonic() < deadline:
            self._supervise()
        for child in self._children:
            if child.process is not None:
                self.failures.append(f"worker process {child.index} killed: still running "
                                     f"{self.recipe.drain_timeout_s + self.recipe.close_timeout_s + EXIT_GRACE_S:.0f}"
                                     " s after SIGTERM")
                self._kill(child)

    def _kill(self, child: _Child) -> None:
        if child.process is not None:
            child.process.kill()
            child.process.join(5)
            child.process = None
        if child.conn is not None:
            child.conn.close()
            child.conn = None


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            pass
    return f"exited with code {code}"


def child_main(recipe: WorkerRecipe, conn: Connection) -> None:
    """A child's life: builds the Worker, reports ready (and its metrics port), serves until SIGTERM, sends its
    counts, exits 0 or, after a failure, 1 with its one line on stderr."""
    import sys

    from kmq import logs
    from kmq.heap import tune_gc
    from kmq.worker.worker import Worker, load_handler

    logs.configure(recipe.log_level, recipe.log_json)
    code = 0
    worker: Worker | None = None
    sending = threading.Lock()
    reporting = threading.Event()

    def report() -> None:
        # Every REPORT_S, so the pool's summary keeps what a child acked before a SIGKILL (bar the last tick).
        while not reporting.wait(REPORT_S):
            if worker is not None:
                _send_counts(conn, sending, worker.counts)

    reporter = threading.Thread(target=report, name="kmq-pool-report", daemon=True)
    reporter.start()
    try:
        worker = Worker(recipe.config, list(recipe.queues), load_handler(recipe.handler_spec), recipe.concurrency,
                        processes=recipe.handler_processes, handler_spec=recipe.handler_spec, backoff=recipe.backoff,
                        drain_timeout_s=recipe.drain_timeout_s, close_timeout_s=recipe.close_timeout_s,
                        time_limit_s=recipe.time_limit_s)
        port = worker.bind_metrics(0) if recipe.child_metrics else None

        def started() -> None:
            tune_gc()  # set up: from here on the process handles messages
            conn.send(("ready", port))

        worker.run(on_started=started)
    except KmqError as err:
        log.error("worker_process_failed", error=str(err))
        code = 1
    finally:
        reporting.set()
        reporter.join()
        if worker is not None:
            _send_counts(conn, sending, worker.counts)
        conn.close()
    sys.exit(code)


def _send_counts(conn: Connection, sending: threading.Lock, counts: Counter[str]) -> None:
    for _ in range(3):
        try:
            snapshot = dict(counts)
            break
        except RuntimeError:  # a handler thread added a key while we copied: copy again
            continue
    else:
        return
    # OSError: the parent is gone, nobody to report to.
    with sending, contextlib.suppress(OSError):
        conn.send(("counts", snapshot))
