"""The tracker's Prometheus metrics, in a registry of their own (so tests can run several trackers in one process)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric


class TrackerMetrics:
    """All tracker metrics. ``kmq_dead_letters_total`` has the same name and label as a worker's, so one query
    sums both (the tracker dead-letters silent messages, the worker failing ones)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.redeliveries = Counter("kmq_redeliveries", "Messages redelivered, per queue", ["queue"], registry=r)
        self.dead_letters = Counter("kmq_dead_letters", "Messages sent to the dead-letter topic", ["queue"],
                                    registry=r)
        self.unreadable = Counter("kmq_unreadable_records", "Messages dead-lettered because their record could not "
                                  "be read back for a Start by reference (deleted by retention, compacted)",
                                  ["queue"], registry=r)
        self.malformed = Counter("kmq_malformed_markers", "Markers-topic records skipped as malformed", registry=r)
        self.rejoins = Counter("kmq_tracker_rejoins", "Group consumers made again because the group coordinator kept "
                               "this replica out of its group while markers partitions had no tracker", registry=r)
        self.in_flight = Gauge("kmq_in_flight", "Messages started and not ended, per queue", ["queue"], registry=r)
        self.oldest_age = Gauge("kmq_oldest_in_flight_age_seconds", "Age of the oldest in-flight message",
                                ["queue"], registry=r)
        self.rebuild_seconds = Histogram("kmq_rebuild_seconds", "Time to replay a markers partition on assignment",
                                         buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120), registry=r)
        self.redelivery_lag = Histogram("kmq_redelivery_lag_seconds", "Deadline to redelivered copy written",
                                        buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10), registry=r)
        self.consumer_lag = Gauge("kmq_markers_consumer_lag", "Markers not yet read, per partition",
                                  ["partition"], registry=r)


#: How often the per-queue gauges are refreshed (a scan of the in-flight state).
PUBLISH_INTERVAL_S = 5.0


class QueueFigures(Protocol):
    def per_queue(self) -> dict[str, tuple[int, int]]: ...
    def items(self) -> list[tuple[int, Any]]: ...


class StatePublisher:
    """Refreshes the state gauges (in flight and oldest age per queue, consumer lag per partition) every
    PUBLISH_INTERVAL_S; only a tracker with a metrics endpoint runs one (the scan costs time)."""

    def __init__(self, metrics: TrackerMetrics, monotonic: Callable[[], float]) -> None:
        self._metrics = metrics
        self._monotonic = monotonic
        self._last = -PUBLISH_INTERVAL_S
        self._queues: set[str] = set()

    def maybe_publish(self, owned: QueueFigures, lag_of: Callable[[int], int | None]) -> None:
        now = self._monotonic()
        if now - self._last < PUBLISH_INTERVAL_S:
            return
        self._last = now
        m = self._metrics
        clock_ms = max((part.clock.now_ms() or 0 for _p, part in owned.items()), default=0)
        queues = owned.per_queue()
        for queue in self._queues - queues.keys():  # drained, or its partition moved: not stale figures
            m.in_flight.labels(queue).set(0)
            m.oldest_age.labels(queue).set(0)
        for queue, (count, oldest_ms) in queues.items():
            m.in_flight.labels(queue).set(count)
            m.oldest_age.labels(queue).set(max(0, clock_ms - oldest_ms) / 1000)
        self._queues = set(queues)
        m.consumer_lag.clear()
        for p, _part in owned.items():
            lag = lag_of(p)
            if lag is not None:
                m.consumer_lag.labels(str(p)).set(lag)


class SetLabelled:
    """The metrics of several trackers of one process, one per topic set, as one collection: every sample carries a
    ``topic_set`` label (a queue moving between sets, or a markers partition number, is in more than one)."""

    def __init__(self, per_set: dict[str, TrackerMetrics]) -> None:
        self._per_set = per_set

    def collect(self) -> list[Metric]:
        families: dict[str, Metric] = {}
        for name, metrics in self._per_set.items():
            for family in metrics.registry.collect():
                merged = families.setdefault(family.name, Metric(family.name, family.documentation, family.type,
                                                                 family.unit))
                for sample in family.samples:
                    merged.add_sample(sample.name, {**sample.labels, "topic_set": name}, sample.value,
                                      sample.timestamp, sample.exemplar)
        return list(families.values())


def registry_of(per_set: dict[str, TrackerMetrics]) -> CollectorRegistry:
    """What a tracker process serves on /metrics: one set's registry as it is, several sets' labelled."""
    if len(per_set) == 1:
        return next(iter(per_set.values())).registry
    registry = CollectorRegistry()
    registry.register(SetLabelled(per_set))
    return registry
