"""A worker's Prometheus metrics, named after Dramatiq's Prometheus middleware where one applies, per queue.

What happens once per message (a run, its duration and wait, the gauge of runs in progress) is tallied by each
worker thread in its own ``ThreadSlot``, without a lock, and summed when ``/metrics`` is scraped: a labelled
prometheus_client child costs a lock and a label lookup per update, which at tens of thousands of jobs a second
was a sixth of the worker's time. Rare events (errors, retries, rejects, dead letters, time limits) use
prometheus_client's counters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
WAIT_BUCKETS = DURATION_BUCKETS


class Histogram:
    """Bucket counts and a sum, written by one thread."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.total = 0.0

    def observe(self, value: float) -> None:
        # bisect_left's bucket, counted up from the smallest: a job's run and wait are mostly in the first buckets,
        # and compiled, this loop costs less than the call to bisect.
        bounds = self.bounds
        i = 0
        n = len(bounds)
        while i < n and bounds[i] < value:  # "le": a value on a bound belongs to that bucket
            i += 1
        self.counts[i] += 1
        self.total += value


class RunTally:
    """One thread's handler runs of one queue: how long each ran, and how long it waited before."""

    __slots__ = ("durations", "waits")

    def __init__(self) -> None:
        self.durations = Histogram(DURATION_BUCKETS)
        self.waits = Histogram(WAIT_BUCKETS)


class ThreadSlot:
    """A worker thread's state: what it runs now (read by the gauge, the watchdog of stuck runs and the prefetch
    window), and its tallies per queue. Written by its thread only."""

    __slots__ = ("clock_at", "clock_ms", "name", "queue", "since", "tallies")

    def __init__(self, name: str, queues: Sequence[str]) -> None:
        self.name = name
        #: The queue of the message it runs, or None while it waits for one.
        self.queue: str | None = None
        #: When the run started (time.perf_counter()).
        self.since = 0.0
        #: The wall clock (ms since the epoch) read at ``clock_at`` (time.perf_counter()), when the thread took its
        #: batch: a job's wait is measured from it and the time since, not from a wall clock read per job.
        self.clock_ms = 0
        self.clock_at = 0.0
        self.tallies = {queue: RunTally() for queue in queues}


class WorkerMetrics:
    """All worker metrics, in a registry of their own (several workers may run in one process)."""

    def __init__(self, queues: Sequence[str] = ()) -> None:
        self.registry = CollectorRegistry()
        self.queues = list(queues)
        self.slots: list[ThreadSlot] = []
        r = self.registry
        self.errors = Counter("kmq_worker_message_errors", "Handler runs that raised or ran out of time",
                              ["queue"], registry=r)
        self.retries = Counter("kmq_worker_message_retries", "Messages released for a retry after an error",
                               ["queue"], registry=r)
        self.rejects = Counter("kmq_worker_message_rejects", "Messages the handler rejected (kmq.Reject)",
                               ["queue"], registry=r)
        self.dead_letters = Counter("kmq_dead_letters", "Messages sent to the dead-letter topic", ["queue"],
                                    registry=r)
        self.time_limits = Counter("kmq_worker_time_limit_exceeded", "Handler runs stopped by their time limit",
                                   ["queue"], registry=r)
        self.in_flight = Gauge("kmq_worker_in_flight", "Messages read and not settled (buffered or running)",
                               ["queue"], registry=r)
        #: Queue → its consumer's count of late acks (read at scrape time).
        self.late_acks: dict[str, Callable[[], int]] = {}
        #: Queue → its consumers' count of rejoins with a new group consumer (read at scrape time).
        self.rejoins: dict[str, Callable[[], int]] = {}
        r.register(_RunCollector(self))


class _RunCollector(Collector):
    """Sums the threads' tallies at scrape time."""

    def __init__(self, metrics: WorkerMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
        queues, slots = self._metrics.queues, list(self._metrics.slots)
        runs = CounterMetricFamily("kmq_worker_messages", "Handler runs that finished (any outcome)",
                                   labels=["queue"])
        running = GaugeMetricFamily("kmq_worker_messages_inprogress", "Messages a handler is running on now",
                                    labels=["queue"])
        durations = HistogramMetricFamily("kmq_worker_message_duration_seconds", "Handler run time",
                                          labels=["queue"])
        waits = HistogramMetricFamily(
            "kmq_worker_message_wait_seconds", "From a message's send (or due time, if delayed) to its handler's "
            "start: time in the queue and in this worker's buffer (on the sender's and the worker's clocks)",
            labels=["queue"])
        for queue in queues:
            tallies = [slot.tallies[queue] for slot in slots if queue in slot.tallies]
            duration_counts, duration_sum = _summed([t.durations for t in tallies], len(DURATION_BUCKETS) + 1)
            wait_counts, wait_sum = _summed([t.waits for t in tallies], len(WAIT_BUCKETS) + 1)
            runs.add_metric([queue], duration_counts[-1])
            running.add_metric([queue], sum(1 for slot in slots if slot.queue == queue))
            durations.add_metric([queue], _buckets(DURATION_BUCKETS, duration_counts), duration_sum)
            waits.add_metric([queue], _buckets(WAIT_BUCKETS, wait_counts), wait_sum)
        late = CounterMetricFamily(
            "kmq_late_acks", "Acks made after the message's redelivery deadline (the worker was frozen or cut off "
            "from Kafka while the handler ran): the tracker may have delivered it again", labels=["queue"])
        for queue, count in list(self._metrics.late_acks.items()):
            late.add_metric([queue], count())
        rejoins = CounterMetricFamily(
            "kmq_consumer_rejoins", "Group consumers made again because the group coordinator kept this worker's "
            "consumer out of its group (librdkafka's own rejoin stayed out, as after a broker freeze)",
            labels=["queue"])
        for queue, count in list(self._metrics.rejoins.items()):
            rejoins.add_metric([queue], count())
        yield from (runs, running, durations, waits, late, rejoins)


def _summed(histograms: list[Histogram], size: int) -> tuple[list[int], float]:
    """Cumulative bucket counts (the last is the total) and the sum, over ``histograms``."""
    counts = [0] * size
    total = 0.0
    for histogram in histograms:
        for i, n in enumerate(list(histogram.counts)):
            counts[i] += n
        total += histogram.total
    for i in range(1, size):
        counts[i] += counts[i - 1]
    return counts, total


def _buckets(bounds: Sequence[float], cumulative: list[int]) -> list[tuple[str, float]]:
    # repr(float): prometheus_client's own spelling of these bounds ("0.005", "1.0", "3600.0").
    return [*((repr(float(b)), float(c)) for b, c in zip(bounds, cumulative, strict=False)),
            ("+Inf", float(cumulative[-1]))]
