"""The cluster rows of `make bench`: kmq on a replicated three-node cluster (RF 3, min.insync.replicas 2) beside raw
produce, raw consume+commit and a ShareConsumer on the same cluster in the same run, and the throughput dip around
a partition leader's SIGKILL with its recovery time beside Kafka's own failover time.

The cluster is `make cluster-up`'s when KMQ_CLUSTER_BOOTSTRAP_SERVERS names it, else one started for this file.
Writes bench-results/<timestamp>-cluster/ (results.json, results.md, throughput.png) and prints the table.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from kmq import Config, logs
from kmq._kafka.topics import create_topics
from kmq.testing.cluster import FAILOVER_SETTINGS, LocalCluster
from tests.bench import workloads as w
from tests.bench.results import Case, markdown, write
from tests.bench.tracker_probe import TrackerProbe
from tests.cluster.analysis import duplicates, late_hand_outs
from tests.cluster.faults import figures, leader_kill, queue_apart_from_controller
from tests.cluster.session import session_cluster
from tests.cluster.traffic import Traffic
from tests.helpers import ROOT
from tests.markers_io import wait_for

QUICK = bool(os.environ.get("KMQ_BENCH_QUICK"))
N_PRODUCE = 20_000 if QUICK else 100_000
N_E2E = 20_000 if QUICK else 50_000
PARTITIONS = 6
REPLICAS = 3
FAULT_RATE = 1_000
SETUP = {"partitions": PARTITIONS, "replication_factor": REPLICAS, "min_insync_replicas": 2, "nodes": 3}

pytestmark = [pytest.mark.bench, pytest.mark.timeout(1800)]


def replicated_topic(admin: AdminClient) -> str:
    name = w.group("raw-rf3")
    admin.create_topics([NewTopic(name, PARTITIONS, REPLICAS)])[name].result(30)
    return name


def fresh(bootstrap: str, name: str, **fields: object) -> Config:
    base = w.group(name)
    config = Config(bootstrap_servers=bootstrap, message_topic=f"{base}.m", marker_topic=f"{base}.mk",
                    **fields)  # type: ignore[arg-type]
    create_topics(config, config.default_topics, partitions=PARTITIONS, marker_partitions=3,
                  replication_factor=REPLICAS)
    return config


def send_case(bootstrap: str, admin: AdminClient) -> Case:
    w.raw_produce(bootstrap, replicated_topic(admin), N_PRODUCE // 2, 256)  # warm-up: a fresh cluster is slow at first
    raw = w.raw_produce(bootstrap, replicated_topic(admin), N_PRODUCE, 256)
    ours = w.kmq_send(fresh(bootstrap, "send"), "bench", N_PRODUCE, 256, sync=False)
    return Case("cluster: send_async 256 B", "msgs/s", ours, raw, "raw produce (acks=all, idempotent)",
                {**SETUP, "messages": N_PRODUCE, "payload": 256})


def consume_cases(bootstrap: str, admin: AdminClient) -> list[Case]:
    topic = replicated_topic(admin)
    w.raw_produce(bootstrap, topic, N_E2E, 256)
    raw, _ = w.run_consumers(w._raw_consume, (bootstrap, topic, w.group("raw")), N_E2E, 1)
    share = _share_rate(bootstrap, admin)
    config = fresh(bootstrap, "e2e")
    queue = w.group("e2e")
    w.kmq_send(config, queue, N_E2E, 256, sync=False)
    with TrackerProbe(config):
        ours, _ = w.run_consumers(w._kmq_consume, (config, queue, 0), N_E2E, 1)
    setup = {**SETUP, "messages": N_E2E, "payload": 256, "processes": 1}
    return [Case("cluster: ShareConsumer explicit ack (the baseline below)", "msgs/s", share, raw,
                 "raw consume+commit", setup),
            Case("cluster: kmq receive() + ack, kmq markers", "msgs/s", ours, share, "ShareConsumer explicit ack",
                 {**setup, "tracker": "running"}, extra={"vs_raw": round(ours / raw, 3)},
                 note=f"{ours / raw:.2f}x raw")]


def _share_rate(bootstrap: str, admin: AdminClient) -> float:
    topic = replicated_topic(admin)
    share_group = w.share_group_from_earliest(admin)
    w.raw_produce(bootstrap, topic, N_E2E, 256)
    rate, _ = w.run_consumers(w._share_consume, (bootstrap, topic, share_group), N_E2E, 1, timeout_s=180)
    return rate


def leader_kill_case(cluster: LocalCluster, work_dir: Path) -> Case:
    """A queue at a steady 1,000 msgs/s (a producer, two workers, two trackers, as processes); the node leading
    the most messages and markers partitions is SIGKILLed, restarted once the queue has recovered."""
    config = fresh(cluster.bootstrap_servers, "fault", tracker_group=w.group("trackers"))
    traffic = Traffic(config, queue_apart_from_controller(cluster, f"bench-{uuid.uuid4().hex[:6]}"), work_dir)
    try:
        traffic.start()
        traffic.produce(FAULT_RATE)
        assert wait_for(lambda: len(traffic.runs()) >= FAULT_RATE * 3, 60, interval_s=0.2)
        faults = leader_kill(cluster, config, traffic)
        time.sleep(3)
        end = time.time()
        traffic.stop_producing()
        traffic.wait_handled(120)
        outcome = traffic.finish()
    except BaseException:
        traffic.kill_all()
        raise
    fig = figures(faults, outcome, FAULT_RATE, end)[0]
    lost = len(outcome.confirmed - outcome.handled)
    return Case("cluster: leader kill, kmq throughput back (s after the kill)", "s", fig.recovery_s, fig.failover_s,
                "Kafka's own failover (dead node fenced)",
                {**SETUP, "rate_per_s": FAULT_RATE, "redelivery_timeout_ms": config.redelivery_timeout_ms,
                 **{k: v for k, v in FAILOVER_SETTINGS.items() if k.startswith("broker.")}},
                extra={"longest_gap_s": fig.longest_gap_s, "duplicates": duplicates(outcome.runs), "lost": lost,
                       "late_hand_outs": len(late_hand_outs(outcome.runs, outcome.markers))},
                note=f"longest gap {fig.longest_gap_s:.1f} s, {duplicates(outcome.runs)} duplicates, {lost} lost")


def test_bench_cluster(tmp_path: Path) -> None:
    logs.configure("error")
    started = time.monotonic()
    with session_cluster() as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, "log_level": 0})
        cases = [send_case(cluster.bootstrap_servers, admin)]
        cases += consume_cases(cluster.bootstrap_servers, admin)
        cases.append(leader_kill_case(cluster, tmp_path))
    out = write(ROOT / "bench-results" / f"{time.strftime('%Y%m%dT%H%M%S')}-cluster", cases,
                {"quick": QUICK, "seconds": round(time.monotonic() - started),
                 "broker": "three combined KRaft 4.4.0 nodes on one machine (kmq.testing.cluster), RF 3, "
                           "min.insync.replicas 2, unless KMQ_CLUSTER_BOOTSTRAP_SERVERS"})
    print("\n" + markdown(cases) + f"\n\nresults in {out}")
    assert all(c.ours is not None for c in cases)
