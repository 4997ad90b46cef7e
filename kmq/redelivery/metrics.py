"""The tracker's Prometheus metrics, in a registry of their own (so tests can run several trackers in one process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class TrackerMetrics:
    """All tracker metrics. ``kmq_dead_letters_total`` has the same name and label as a worker's, so one query
    sums both (the tracker dead-letters silent messages, the worker failing ones)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.redeliveries = Counter("kmq_redeliveries", "Messages redelivered, per queue", ["queue"], registry=r)
        self.dead_letters = Counter("kmq_dead_letters", "Messages sent to the dead-letter topic", ["queue"],
                                    registry=r)
        self.malformed = Counter("kmq_malformed_markers", "Markers-topic records skipped as malformed", registry=r)
        self.in_flight = Gauge("kmq_in_flight", "Messages started and not ended, per queue", ["queue"], registry=r)
        self.oldest_age = Gauge("kmq_oldest_in_flight_age_seconds", "Age of the oldest in-flight message",
                                ["queue"], registry=r)
        self.rebuild_seconds = Histogram("kmq_rebuild_seconds", "Time to replay a markers partition on assignment",
                                         buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120), registry=r)
        self.redelivery_lag = Histogram("kmq_redelivery_lag_seconds", "Deadline to redelivered copy written",
                                        buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10), registry=r)
        self.consumer_lag = Gauge("kmq_markers_consumer_lag", "Markers not yet read, per partition",
                                  ["partition"], registry=r)
