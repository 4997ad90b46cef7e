"""PoolEndpoint: one /metrics and /healthz for a pool of worker processes.

Each child serves its own Worker metrics on a free loopback port and tells the parent which; a scrape of the
pool's port reads every running child's and relabels each sample with ``process="<index>"`` (the children's
counters are their own, so they are never summed across restarts by the pool: Prometheus' ``rate`` handles a child's
reset as it does a restarted single worker's). /healthz is healthy when every child runs and says it is healthy.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from http.server import ThreadingHTTPServer
from typing import Any, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from kmq.config import Config
from kmq.metrics_http import DEGRADED, PROBE_TIMEOUT_S, Health, serve


class ChildView(Protocol):
    index: int
    process: Any
    ready: bool
    metrics_port: int | None


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=PROBE_TIMEOUT_S) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as err:
        return int(err.code), err.read().decode()
    except OSError as err:
        return 0, str(err)


class _ChildrenCollector(Collector):
    def __init__(self, children: Callable[[], Sequence[ChildView]], restarts: Callable[[], int]) -> None:
        self._children = children
        self._restarts = restarts

    def collect(self) -> Iterator[Metric]:
        children = list(self._children())
        running = GaugeMetricFamily("kmq_worker_processes", "Worker processes of the pool, by state",
                                    labels=["state"])
        ready = sum(1 for c in children if c.ready)
        running.add_metric(["serving"], ready)
        running.add_metric(["starting_or_restarting"], len(children) - ready)
        yield running
        yield CounterMetricFamily("kmq_worker_process_restarts", "Worker processes started again after one died",
                                  value=self._restarts())
        merged: dict[str, Metric] = {}
        for child in children:
            if not child.ready or child.metrics_port is None:
                continue
            status, text = _get(child.metrics_port, "/metrics")
            if status != 200:
                continue
            for family in text_string_to_metric_families(text):
                into = merged.setdefault(family.name, Metric(family.name, family.documentation, family.type,
                                                             family.unit))
                for sample in family.samples:
                    into.add_sample(sample.name, {**sample.labels, "process": str(child.index)}, sample.value,
                                    sample.timestamp)
        yield from merged.values()


class PoolEndpoint:
    """``bind()`` serves on ``config.metrics_port`` (if set); ``close()`` stops serving."""

    def __init__(self, config: Config, children: Callable[[], Sequence[ChildView]], stopping: Callable[[], bool],
                 restarts: Callable[[], int]) -> None:
        self._config = config
        self._children = children
        self._stopping = stopping
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(_ChildrenCollector(children, restarts))
        self._server: ThreadingHTTPServer | None = None

    def bind(self) -> None:
        if self._server is None and self._config.metrics_port:
            self._server = serve(self._registry, self._config.metrics_host, self._config.metrics_port,
                                 self._health(), live=self._live)

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def _live(self) -> str | None:
        """A child that says a restart is its way back (its /livez) says so for the pool: the parent restarts a
        child that dies, not one that lives on stuck."""
        for child in self._children():
            if child.process is not None and child.ready and child.metrics_port is not None:
                status, text = _get(child.metrics_port, "/livez")
                if status == 503:
                    return f"worker process {child.index}: {text.strip().removeprefix('unhealthy: ')}"
        return None

    def _health(self) -> Health:
        def health() -> str | None:
            if self._stopping():
                return "stopping"
            degraded: str | None = None
            for child in self._children():
                if child.process is None:
                    return f"worker process {child.index} is not running (restarting)"
                if not child.ready or child.metrics_port is None:
                    return f"worker process {child.index} is starting"
                status, text = _get(child.metrics_port, "/healthz")
                answer = text.strip()
                if status != 200:
                    return f"worker process {child.index}: {answer.removeprefix('unhealthy: ') or 'no answer'}"
                if answer.startswith("ok (") and degraded is None:
                    degraded = f"{DEGRADED}worker process {child.index}: {answer[4:-1].removeprefix(DEGRADED)}"
            return degraded

        return health
