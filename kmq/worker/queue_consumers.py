"""QueueConsumers: a worker's consumers, one per queue (one in each topic set a moving queue is read in), each
with the PrefetchWindow that bounds what it holds."""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Callable, Sequence

import structlog

from kmq.client.consumer import Consumer
from kmq.client.process_id import with_process_id
from kmq.config import Config
from kmq.errors import KmqError, UndeliveredMarkersError
from kmq.wire import validate_queue_name
from kmq.worker.metrics import ThreadSlot, WorkerMetrics
from kmq.worker.prefetch import PrefetchWindow

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)


class QueueConsumers:
    """``open()`` joins each queue's group; ``close()`` gives back or releases what they still hold. Until opened,
    ``consumers`` is empty (a health check says "starting")."""

    def __init__(self, config: Config, queues: Sequence[str], concurrency: int, metrics: WorkerMetrics) -> None:
        self._config = config
        self._queues = queues
        self._concurrency = concurrency
        self._metrics = metrics
        self.consumers: list[Consumer] = []
        #: Per queue: how many messages its consumer may hold, from how long its handlers take.
        self.windows: dict[str, PrefetchWindow] = {}
        self._taking = True

    def open(self, close_timeout_s: float) -> list[Consumer]:
        opened: list[Consumer] = []
        try:
            for q in self._queues:
                queue = validate_queue_name(q)
                mine = []
                for topics in self._config.reading_sets(queue):  # more than one while the queue moves between sets
                    # From its first Start: hold no more than the threads run until the handlers' run time is known.
                    mine.append(with_process_id(self._config, functools.partial(
                        Consumer, queue=queue, max_in_flight=self._concurrency, topics=topics)))
                    opened.append(mine[-1])
                self.windows[queue] = PrefetchWindow(self._concurrency, self._config.max_in_flight,
                                                     _limit_setter(mine))
                self._metrics.in_flight.labels(queue).set_function(_in_flight_of(mine))
                self._metrics.late_acks[queue] = _total(mine, lambda c: c.late_acks)
                self._metrics.rejoins[queue] = _total(mine, lambda c: c.rejoins)
        except BaseException:
            for consumer in opened:
                consumer.close(close_timeout_s)
            raise
        self.consumers = opened
        if not self._taking:
            self.stop_taking()
        return opened

    def stop_taking(self) -> None:
        """A draining worker: no consumer Starts another message."""
        self._taking = False
        for consumer in self.consumers:
            consumer.stop_taking()

    def floor_windows(self, slots: list[ThreadSlot]) -> None:
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
            self.windows[queue].at_least(seconds)

    def close(self, timeout_s: float, counts: Counter[str]) -> int:
        """Closes each consumer within ``timeout_s``; what the closes settled goes into ``counts``. Returns how many
        settle marker records could not be written."""
        undelivered = 0
        for consumer in self.consumers:
            try:
                consumer.close(timeout_s)  # gives back or releases whatever a handler still holds
            except UndeliveredMarkersError as err:
                undelivered += err.undelivered
            except KmqError as err:
                log.error("consumer_close_failed", queue=consumer.queue, error=str(err))
            # The summary tells what the close settled too (what threads held past the drain, what was buffered).
            counts.update({k: v for k, v in consumer.settled_at_close.items() if v})
        return undelivered


def _in_flight_of(consumers: list[Consumer]) -> Callable[[], float]:
    return lambda: sum(c.in_flight for c in consumers)


def _total(consumers: list[Consumer], count: Callable[[Consumer], int]) -> Callable[[], int]:
    return lambda: sum(count(c) for c in consumers)


def _limit_setter(consumers: list[Consumer]) -> Callable[[int], None]:
    def set_limit(size: int) -> None:
        for consumer in consumers:  # each set's consumer may hold the window (a moving queue's old set drains)
            consumer.max_in_flight = size

    return set_limit
