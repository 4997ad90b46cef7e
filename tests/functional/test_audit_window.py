"""An incremental audit (`--from/--to`) on generated topics: it reads only the offsets from the window on (no full
scan, bytes reported), classifies every message enqueued in the window as a full audit does (equal to the
generator's ground truth for the window), and reports messages that began before the window apart, never as lost."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from kmq.config import Config
from kmq.ops.audit import generate
from kmq.ops.audit.job import AuditOptions, run
from kmq.wire import vocabulary as v
from kmq.wire.control import control_topic

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def day(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Config, dict[str, Any]]]:
    """Three simulated hours of traffic (6,000 message lives) and the truth of the second hour."""
    prefix = f"window-{uuid.uuid4().hex[:8]}"
    truth_file = tmp_path_factory.mktemp("truth") / "truth.json"
    assert generate.main(["--bootstrap-servers", kafka_bootstrap, "--prefix", prefix, "--messages", "6000",
                          "--hours", "3", "--window", "1:2", "--truth", str(truth_file)]) == 0
    config = Config(bootstrap_servers=kafka_bootstrap, message_topic=f"{prefix}.messages",
                    marker_topic=f"{prefix}.markers", at_most_once_queues=tuple(generate.AT_MOST_ONCE))
    yield config, json.loads(truth_file.read_text())
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.delete_topics([config.message_topic, config.marker_topic, config.dlq_topic,
                                       control_topic(config.message_topic)], operation_timeout=30).values():
        future.result(30)


def test_an_hourly_window_reads_from_its_offsets_on_and_classifies_what_began_in_it(
    day: tuple[Config, dict[str, Any]], tmp_path: Path, spark: SparkSession,
) -> None:
    config, truth = day
    [window] = truth["windows"]
    full = run(config, AuditOptions(out_dir=tmp_path / "full", now_ms=truth["now_ms"]), spark)
    hour = run(config, AuditOptions(out_dir=tmp_path / "hour", now_ms=truth["now_ms"], from_ms=window["from_ms"],
                                    to_ms=window["to_ms"]), spark)
    # Only the needed offsets: the first hour of every topic is not read.
    for topic in ("messages", "markers"):
        assert 0 < hour["topics"][topic]["records"] < full["topics"][topic]["records"] * 0.8, topic
        assert 0 < hour["topics"][topic]["bytes"] < full["topics"][topic]["bytes"]
        starts = [start for start, _ in hour["topics"][topic]["partitions"].values()]
        # Each partition from its first record at or after the window's start (less 5 min for markers); a
        # partition whose first record is already in the window is read from 0 (seen once on the markers partition
        # of the kafka-mq-go queue), so not every start need be past 0: most are.
        assert sum(start > 0 for start in starts) * 2 > len(starts), f"{topic} read from offset 0: {starts}"
    assert hour["topics"]["messages"]["records"] == sum(
        end - start for start, end in hour["topics"]["messages"]["partitions"].values())
    # Every message enqueued in the hour is classified as the generator planned it.
    for queue, expected in window["queues"].items():
        got = hour["queues"][queue]
        assert {s: got.get(s, 0) for s in v.STATES} == {s: expected.get(s, 0) for s in v.STATES}, queue
        assert got["lost"] == expected.get("overdue", 0) + expected.get("vanished", 0)
    # Lives that crossed the window's start are reported as having begun before it.
    assert sum(q.get("before_window", 0) for q in hour["queues"].values()) > 0
    assert sum(q.get("produced", 0) for q in hour["queues"].values()) == sum(
        sum(q.values()) for q in window["queues"].values())
