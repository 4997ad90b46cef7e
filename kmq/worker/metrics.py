"""A worker's Prometheus metrics, named after Dramatiq's Prometheus middleware where one applies, per queue."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)


class WorkerMetrics:
    """All worker metrics, in a registry of their own (several workers may run in one process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.processed = Counter("kmq_worker_messages", "Handler runs that finished (any outcome)", ["queue"],
                                 registry=r)
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
        self.in_progress = Gauge("kmq_worker_messages_inprogress", "Messages a handler is running on now",
                                 ["queue"], registry=r)
        self.in_flight = Gauge("kmq_worker_in_flight", "Messages read and not settled (buffered or running)",
                               ["queue"], registry=r)
        self.duration = Histogram("kmq_worker_message_duration_seconds", "Handler run time", ["queue"],
                                  buckets=DURATION_BUCKETS, registry=r)
