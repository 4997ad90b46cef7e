"""MetricsEndpoint: a worker's /metrics, /readyz (/healthz) and /livez, bound before the worker talks to the
broker."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from http.server import ThreadingHTTPServer

from kmq._kafka.group_view import KafkaGroupAdmin
from kmq._kafka.offsets import group_members
from kmq.config import Config
from kmq.metrics_http import PROBE_TIMEOUT_S, BrokerProbe, Health, TrackerPresence, first_problem, serve
from kmq.worker.health import WorkerHealth
from kmq.worker.metrics import WorkerMetrics
from kmq.worker.queue_consumers import QueueConsumers


class MetricsEndpoint:
    """``bind()`` serves (a port in use raises KmqError: the one line a user sees); ``close()`` stops serving."""

    def __init__(self, config: Config, queues: Sequence[str], metrics: WorkerMetrics, consumers: QueueConsumers,
                 stopping: threading.Event) -> None:
        self._config = config
        self._queues = queues
        self._metrics = metrics
        self._consumers = consumers
        self._stopping = stopping
        self._server: ThreadingHTTPServer | None = None

    def bind(self, port: int | None = None) -> int | None:
        """Serves on ``port`` (0: a free one), else on ``metrics_port`` if set; returns the port served on."""
        if self._server is None and (port is not None or self._config.metrics_port):
            unassigned = WorkerHealth(self._config, lambda: self._consumers.consumers,
                                      KafkaGroupAdmin(self._config), time.monotonic)
            self._server = serve(self._metrics.registry, self._config.metrics_host,
                                 self._config.metrics_port if port is None else port,
                                 self._health_check(unassigned),
                                 live=lambda: unassigned.live() if self._consumers.consumers else None)
        return None if self._server is None else int(self._server.server_address[1])

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def _health_check(self, unassigned: WorkerHealth) -> Health:
        """Healthy while the consumers work, the broker answers, each queue with records waiting has a partition
        here (``unassigned``) and (unless every queue is at most once) a tracker runs; the reason otherwise."""
        probes: list[BrokerProbe] = []
        config = self._config
        # At-most-once queues need no tracker (nothing of theirs is ever redelivered); the others, their set's.
        trackers = [TrackerPresence(_members_of(config, topics.tracker_group), topics.tracker_group)
                    for topics in dict.fromkeys(t for q in self._queues if q not in config.at_most_once_queues
                                                for t in config.reading_sets(q))]

        def health() -> str | None:
            if self._stopping.is_set():
                return "stopping"
            if not self._consumers.consumers:
                return "starting"
            if not probes:
                consumers = list(self._consumers.consumers)
                probes.append(BrokerProbe(consumers[0].metadata_client, consumers[0].topics.markers,
                                          stalled=lambda: max(c.writes_stalled_s() for c in consumers)))
            failed = next((c.failure for c in self._consumers.consumers if c.failure), None)
            return failed or first_problem(probes[0], unassigned.ready, *trackers)

        return health


def _members_of(config: Config, group: str) -> Callable[[], int | None]:
    return lambda: group_members(config, group, PROBE_TIMEOUT_S)
