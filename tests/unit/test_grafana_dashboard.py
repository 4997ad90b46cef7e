"""deploy/grafana/kmq-dashboard.json queries only metrics kmq exports: every ``kmq_*`` series in its expressions
(and its variables) is one that a worker's or a tracker's registry serves, with the suffixes Prometheus gives
each type (``_total`` on counters; ``_bucket``, ``_sum``, ``_count`` on histograms)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry

from kmq.redelivery.metrics import TrackerMetrics
from kmq.worker.metrics import WorkerMetrics
from tests.helpers import ROOT

DASHBOARD = ROOT / "deploy" / "grafana" / "kmq-dashboard.json"
SUFFIXES = {"counter": ("_total", "_created"), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count", "_created"),
            "summary": ("_sum", "_count", "_created"), "info": ("_info",), "unknown": ("",)}


def exported() -> set[str]:
    """Every series name kmq's registries serve (a family's name with its type's suffixes)."""
    registries: list[CollectorRegistry] = [WorkerMetrics(["q"]).registry, TrackerMetrics().registry]
    names = set()
    for registry in registries:
        for family in registry.collect():
            names.update(family.name + suffix for suffix in SUFFIXES[family.type])
    return names


def _expressions(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                yield value
            elif key == "query" and isinstance(value, str | dict):
                yield from ([value] if isinstance(value, str) else _expressions(value))
            else:
                yield from _expressions(value)
    elif isinstance(node, list):
        for item in node:
            yield from _expressions(item)


def queried() -> set[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return {name for expr in _expressions(dashboard) for name in re.findall(r"\bkmq_[a-z_]+\b", expr)}


def test_every_metric_the_dashboard_queries_is_one_kmq_exports() -> None:
    names = queried()
    assert names, "the dashboard queries no kmq metric"
    assert names <= exported(), f"not exported by kmq: {sorted(names - exported())}"


def test_the_check_would_catch_a_misspelt_metric() -> None:
    assert "kmq_worker_messages_total" in exported() and "kmq_worker_messages" not in exported()
    assert "kmq_redelivery_lag_seconds_bucket" in exported() and "kmq_in_flight_total" not in exported()


def test_the_dashboard_is_grafana_json_with_panels_and_a_queue_variable() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len(panels) >= 10 and all(p["targets"] for p in panels)
    assert {v["name"] for v in dashboard["templating"]["list"]} == {"datasource", "queue"}
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
