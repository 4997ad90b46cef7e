"""Worker: runs a handler over one or more queues. Return → ack; ``Reject`` → reject; any other exception →
release with exponential backoff and jitter, or dead letter once the message has had ``max_deliveries``.

Concurrency is threads by default; ``processes=True`` runs the handler in a process pool for CPU-bound work.
SIGTERM/SIGINT drain: no new messages, in-flight handlers finish (up to ``drain_timeout_s``), the rest is
released for redelivery.
"""

from __future__ import annotations

import concurrent.futures
import importlib
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType

import structlog

from kmq.config import Config
from kmq.consumer import Consumer
from kmq.errors import KmqError, Reject
from kmq.message import Message

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

Handler = Callable[[Message], object]


@dataclass(frozen=True, slots=True, kw_only=True)
class Backoff:
    """Delay before retrying a failed message: base·2^(n-1), capped at ``max_s``, with equal jitter."""

    base_s: float = 1.0
    max_s: float = 300.0

    def __post_init__(self) -> None:
        if self.base_s < 0 or self.max_s < self.base_s:
            raise ValueError(f"backoff needs 0 <= base_s <= max_s, got base_s={self.base_s}, max_s={self.max_s}")

    def delay_s(self, delivery_count: int) -> float:
        ceiling = min(self.max_s, self.base_s * 2.0 ** max(0, delivery_count - 1))
        return ceiling / 2 + random.uniform(0, ceiling / 2)


def load_handler(spec: str) -> Handler:
    """Imports ``module:function``; raises KmqError naming what is missing."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise KmqError(f"handler must be MODULE:FUNCTION, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except Exception as err:
        raise KmqError(f"cannot import handler module {module_name!r}: {type(err).__name__}: {err}") from err
    handler = getattr(module, attr, None)
    if not callable(handler):
        raise KmqError(f"{module_name!r} has no callable {attr!r}")
    return handler  # type: ignore[no-any-return]


def _call_in_process(spec: str, payload: bytes, headers: dict[str, bytes], queue: str,
                     delivery_count: int) -> None:
    """Runs in a pool process: the handler gets a detached Message copy (settling is the parent's job)."""
    from kmq.markers import MessageId

    message = Message(payload, headers, queue, MessageId(-1, -1), delivery_count, MessageId(-1, -1), 0,
                      _settler=None)  # type: ignore[arg-type]
    load_handler(spec)(message)


@dataclass
class Worker:
    """Runs ``handler`` on every message of ``queues`` with ``concurrency`` threads (or processes)."""

    config: Config
    queues: Sequence[str]
    handler: Handler
    concurrency: int = 1
    processes: bool = False
    handler_spec: str = ""
    backoff: Backoff = field(default_factory=Backoff)
    drain_timeout_s: float = 30.0
    counts: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        if self.processes and not self.handler_spec:
            raise ValueError("processes=True needs handler_spec (MODULE:FUNCTION) to import in the pool")
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def stop(self) -> None:
        self._stop.set()

    def run(self, install_signals: bool = True) -> Counter[str]:
        """Processes messages until ``stop()`` (or SIGTERM/SIGINT); returns counts of acked, released, …"""
        if install_signals:
            def on_signal(_signum: int, _frame: FrameType | None) -> None:
                log.info("worker_draining")
                self.stop()

            signal.signal(signal.SIGTERM, on_signal)
            signal.signal(signal.SIGINT, on_signal)
        # Prefetch a few messages per thread: a Start batch and a commit cost the same for 1 or 32 records.
        prefetch = min(self.config.max_in_flight, max(32, self.concurrency * 8))
        config = self.config.replace(max_in_flight=prefetch,
                                     receive_buffer_capacity=min(self.config.receive_buffer_capacity, prefetch))
        from kmq.service import Queue

        consumers = [Queue(config, q).consumer() for q in self.queues]
        pool = concurrent.futures.ProcessPoolExecutor(self.concurrency) if self.processes else None
        # Daemon threads: a handler still running after the drain timeout must not keep the process alive.
        # Each thread takes a few messages per receive: fewer wake-ups, and the rest stay with the other threads.
        batch = max(1, min(8, prefetch // (2 * self.concurrency)))
        threads = [threading.Thread(target=self._serve, args=(consumers, i, pool, batch), name=f"kmq-worker-{i}",
                                    daemon=True) for i in range(self.concurrency)]
        for thread in threads:
            thread.start()
        log.info("worker_started", queues=list(self.queues), concurrency=self.concurrency,
                 processes=self.processes)
        while not self._stop.wait(0.2):
            if not any(t.is_alive() for t in threads):
                break
        deadline = time.monotonic() + self.drain_timeout_s
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        for consumer in consumers:
            consumer.close()  # releases whatever a handler still holds
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        log.info("worker_stopped", **dict(self.counts))
        return self.counts

    def _serve(self, consumers: list[Consumer], index: int, pool: concurrent.futures.Executor | None,
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
            for msg in messages:
                self._handle(msg, pool)

    def _handle(self, msg: Message, pool: concurrent.futures.Executor | None) -> None:
        try:
            if pool is not None:
                pool.submit(_call_in_process, self.handler_spec, msg.payload, msg.headers, msg.queue,
                            msg.delivery_count).result()
            else:
                self.handler(msg)
        except Reject as rejected:
            reason = str(rejected)
            self._settle(msg, "rejected", lambda: msg.reject(reason))
        except Exception as err:  # noqa: BLE001 - a handler's failure is the message's, not the worker's
            self._failed(msg, err)
        else:
            if not msg.settled:  # a handler may settle the message itself
                self._settle(msg, "acked", msg.ack)

    def _failed(self, msg: Message, err: Exception) -> None:
        limit = self.config.max_deliveries
        if limit and msg.delivery_count >= limit:
            reason = f"failed {msg.delivery_count} times, last: {type(err).__name__}: {err}"
            self._settle(msg, "dead_lettered", lambda: msg.reject(reason))
            return
        delay = self.backoff.delay_s(msg.delivery_count)
        log.info("handler_failed", queue=msg.queue, message_id=str(msg.message_id),
                 delivery_count=msg.delivery_count, retry_in_s=round(delay, 2), error=f"{type(err).__name__}: {err}")
        self._settle(msg, "released", lambda: msg.release(delay))

    def _settle(self, msg: Message, outcome: str, action: Callable[[], None]) -> None:
        try:
            action()
        except KmqError as err:
            log.warning("settle_failed", queue=msg.queue, message_id=str(msg.message_id), outcome=outcome,
                        error=str(err))
            return
        with self._lock:
            self.counts[outcome] += 1
