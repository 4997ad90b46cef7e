"""The tracker's Prometheus metrics and its small HTTP endpoint (/metrics, /healthz)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST


class TrackerMetrics:
    """All tracker metrics, in a registry of their own (so tests can run several trackers in one process)."""

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


def serve(metrics: TrackerMetrics, port: int, healthy: Callable[[], bool]) -> ThreadingHTTPServer:
    """Serves /metrics and /healthz on ``port`` (all interfaces) from a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/metrics"):
                body, status, kind = generate_latest(metrics.registry), 200, CONTENT_TYPE_LATEST
            elif self.path.startswith("/healthz"):
                ok = healthy()
                body, status, kind = (b"ok\n" if ok else b"unhealthy\n"), (200 if ok else 503), "text/plain"
            else:
                body, status, kind = b"not found\n", 404, "text/plain"
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
    threading.Thread(target=server.serve_forever, name="kmq-metrics", daemon=True).start()
    return server
