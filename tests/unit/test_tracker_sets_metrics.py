"""A tracker process of several topic sets serves their metrics as one, each sample labelled with its set."""

from __future__ import annotations

from prometheus_client import generate_latest

from kmq.redelivery.metrics import TrackerMetrics, registry_of


def test_one_sets_metrics_are_served_as_they_are_and_several_sets_labelled() -> None:
    a, b = TrackerMetrics(), TrackerMetrics()
    a.redeliveries.labels("q").inc()
    b.redeliveries.labels("q").inc(2)
    b.consumer_lag.labels("0").set(7)
    assert registry_of({"default": a}) is a.registry
    text = generate_latest(registry_of({"a": a, "b": b})).decode()
    assert 'kmq_redeliveries_total{queue="q",topic_set="a"} 1.0' in text
    assert 'kmq_redeliveries_total{queue="q",topic_set="b"} 2.0' in text
    assert 'kmq_markers_consumer_lag{partition="0",topic_set="b"} 7.0' in text
    assert text.count("# TYPE kmq_redeliveries_total counter") == 1
