"""The worker's settle policy: how a handler run's Outcome becomes an ack, a release with backoff, a reject or a
dead letter, and the counts and metrics of each.

Return → ack; ``Reject`` → reject (dead-letter topic); any other exception, or a run past its time limit → release
with exponential backoff and jitter, or dead letter once the message has had ``max_deliveries`` (at once on an
at-most-once queue: nothing would deliver it again). A handler that settled the message itself is counted as it
settled it.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

import structlog

from kmq.client.message import Message
from kmq.config import Config
from kmq.errors import KmqError
from kmq.worker.backoff import Backoff
from kmq.worker.handler_runner import RETURNED, Outcome
from kmq.worker.metrics import WorkerMetrics

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)


#: Message._settled_as (what the handler called) → the count it goes to.
_SETTLED_AS = {"ack": "acked", "release": "released", "reject": "rejected", "give back": "returned"}


class SettlePolicy:
    """Settles messages after their handler runs; any thread (the watchdog settles timed-out ones)."""

    def __init__(self, config: Config, backoff: Backoff, metrics: WorkerMetrics, counts: Counter[str],
                 processes: bool, *, coroutines: bool = False) -> None:
        self._config = config
        self._backoff = backoff
        self._metrics = metrics
        self._processes = processes
        self._coroutines = coroutines
        self._lock = threading.Lock()
        #: acked, released, rejected, dead_lettered, returned, timed_out: what ``Worker.run`` returns.
        self.counts = counts

    def settle(self, msg: Message, outcome: Outcome, limit: float | None) -> None:
        if outcome is RETURNED and not msg._settled_as:  # the common case first
            try:
                msg.ack()
            except KmqError as err:
                log.warning("settle_failed", queue=msg.queue, message_id=str(msg.message_id), outcome="acked",
                            error=str(err))
                return
            lock = self._lock  # acquire and release, not ``with``: compiled, a with costs a tenth of a job
            lock.acquire()
            try:
                self.counts["acked"] += 1
            finally:
                lock.release()
            return
        if outcome.kind == "timed_out":
            if not msg.settled:  # a child process past its limit (a thread's message the watchdog settled)
                self.timed_out(msg, limit)
            return
        if outcome.settled is not None:  # the handler settled it in a child process
            self._apply_requested(msg, outcome)
        elif msg.settled:  # the handler settled it itself
            self._count(_SETTLED_AS.get(msg._settled_as, msg._settled_as))
        elif outcome.kind == "returned":
            self._settle(msg, "acked", msg.ack)
        elif outcome.kind == "rejected":
            self._metrics.rejects.labels(msg.queue).inc()
            log.warning("message_rejected", queue=msg.queue, message_id=str(msg.message_id), reason=outcome.detail)
            if self._settle(msg, "rejected", lambda: msg.reject(outcome.detail)):
                self._metrics.dead_letters.labels(msg.queue).inc()  # a reject lands on the dead-letter topic too
            return
        if outcome.kind == "failed":
            self._metrics.errors.labels(msg.queue).inc()
            if not msg.settled:
                self._failed(msg, outcome.detail, outcome.traceback)
            else:
                log.warning("handler_failed_after_settling", queue=msg.queue, message_id=str(msg.message_id),
                            settled_as=msg._settled_as, error=outcome.detail, traceback=outcome.traceback)

    def give_back(self, msg: Message) -> None:
        """A message no handler started on: redelivered at once, its delivery count unchanged."""
        self._settle(msg, "returned", msg.give_back)

    def timed_out(self, msg: Message, limit: float | None) -> None:
        """Its handler ran past ``limit`` (on the watchdog thread for a thread, before it is interrupted)."""
        self._metrics.errors.labels(msg.queue).inc()
        self._metrics.time_limits.labels(msg.queue).inc()
        self._count("timed_out")
        how = "the handler's process is killed and replaced" if self._processes else \
            "the handler's task is cancelled" if self._coroutines else \
            "the handler's thread is interrupted (a handler blocked in a C call keeps its thread until it returns)"
        self._failed(msg, f"TimeLimitExceeded: the handler ran past its time limit of {limit} s; {how}", "")

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

    def _failed(self, msg: Message, error: str, trace: str) -> None:
        limit = self._config.max_deliveries
        if msg.queue in self._config.at_most_once_queues:
            limit = 1  # no retry: nothing would deliver it again
        if limit and msg.delivery_count >= limit:
            reason = f"failed {msg.delivery_count} time(s), last: {error}"
            log.error("message_dead_lettered", queue=msg.queue, message_id=str(msg.message_id),
                      first_message_id=str(msg.first_message_id), delivery_count=msg.delivery_count,
                      error=error, traceback=trace)
            if self._settle(msg, "dead_lettered", lambda: msg.reject(reason)):
                self._metrics.dead_letters.labels(msg.queue).inc()
            return
        delay = self._backoff.delay_s(msg.delivery_count)
        log.warning("handler_failed", queue=msg.queue, message_id=str(msg.message_id),
                    delivery_count=msg.delivery_count, retry_in_s=round(delay, 2), error=error, traceback=trace)
        if self._settle(msg, "released", lambda: msg.release(delay)):
            self._metrics.retries.labels(msg.queue).inc()

    def _settle(self, msg: Message, outcome: str, action: Callable[[], None]) -> bool:
        try:
            action()
        except KmqError as err:
            log.warning("settle_failed", queue=msg.queue, message_id=str(msg.message_id), outcome=outcome,
                        error=str(err))
            return False
        self._count(outcome)
        return True

    def _count(self, outcome: str) -> None:
        with self._lock:
            self.counts[outcome] += 1
