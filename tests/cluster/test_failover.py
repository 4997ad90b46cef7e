"""Failover on a replicated cluster with a queue under load: a producer, two workers, two trackers (processes).

Each fault: every confirmed message handled (by the handler's own log), none dead-lettered (the handler never
fails), no process exited, none printed a traceback, and all stopped cleanly on SIGTERM. Duplicates, late
hand-outs and the recovery time are counted and reported (benches report timings; tests never assert them).
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from kmq.testing.cluster import LocalCluster
from tests.cluster.conftest import REPORT, ClusterConfig
from tests.cluster.faults import (
    Injector,
    controller_kill,
    coordinator_kill,
    figures,
    leader_kill,
    queue_apart_from_controller,
    rolling_restart,
    summary,
)
from tests.cluster.traffic import Traffic
from tests.markers_io import wait_for

pytestmark = pytest.mark.timeout(420)

RATE_PER_S = float(os.environ.get("KMQ_FAULT_RATE", "1000"))
#: Short enough that a stall of a few seconds is near it: a message handed out past its deadline shows up.
REDELIVERY_TIMEOUT_MS = int(os.environ.get("KMQ_FAULT_REDELIVERY_TIMEOUT_MS", "6000"))
#: The workers' consumer group session (librdkafka's default 45 s unless set): one shorter than the cluster's failover
#: makes every worker drop its partitions when the coordinator dies, and the group rejoin after it.
SESSION_TIMEOUT_MS = os.environ.get("KMQ_FAULT_SESSION_TIMEOUT_MS")
STEADY_S = 3.0
AFTER_S = 3.0


def run_fault(name: str, inject: Injector, cluster: LocalCluster, cluster_config: ClusterConfig,
              tmp_path: Path) -> None:
    run_id = uuid.uuid4().hex[:6]
    session = {"session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": "1000"} if SESSION_TIMEOUT_MS else {}
    config = cluster_config(redelivery_timeout_ms=REDELIVERY_TIMEOUT_MS, tracker_group=f"trackers-{run_id}",
                            consumer_kafka=session)
    traffic = Traffic(config, queue_apart_from_controller(cluster, f"jobs-{run_id}"), tmp_path)
    try:
        traffic.start()
        traffic.produce(RATE_PER_S)
        assert wait_for(lambda: len(traffic.runs()) >= RATE_PER_S * STEADY_S, 60, interval_s=0.2), \
            f"no steady flow before the fault: {traffic.tails()}"
        faults = inject(cluster, config, traffic)
        time.sleep(AFTER_S)  # traffic after the last fault, so recovery is measured against a flowing queue
        stopped_at = time.time()
        traffic.stop_producing()
        handled = traffic.wait_handled(120)
        # A copy of a message whose deadline passed needs the tracker to fire and a worker to run it.
        time.sleep(REDELIVERY_TIMEOUT_MS / 1000 + 3)
        outcome = traffic.finish()
    except BaseException:
        traffic.kill_all()
        raise
    lines = summary(name, outcome, figures(faults, outcome, RATE_PER_S, stopped_at))
    REPORT.extend(lines)
    print("\n" + "\n".join(lines))
    missing = outcome.confirmed - outcome.handled
    assert handled and not missing, f"{len(missing)} confirmed messages never handled, e.g. {sorted(missing)[:5]}"
    assert outcome.dead_letters == 0, f"{outcome.dead_letters} messages dead-lettered (the handler never fails)"
    assert not outcome.problems, "\n".join(outcome.problems)
    assert traffic.producer is not None and traffic.producer.exit_code == 0, "the producer lost messages"


def test_a_killed_partition_leader_loses_nothing(whole_cluster: LocalCluster, cluster_config: ClusterConfig,
                                                  tmp_path: Path) -> None:
    run_fault("(a) leader kill", leader_kill, whole_cluster, cluster_config, tmp_path)


def test_a_killed_group_coordinator_loses_nothing(whole_cluster: LocalCluster, cluster_config: ClusterConfig,
                                                   tmp_path: Path) -> None:
    run_fault("(b) coordinator kill", coordinator_kill, whole_cluster, cluster_config, tmp_path)


def test_a_killed_active_controller_loses_nothing(whole_cluster: LocalCluster, cluster_config: ClusterConfig,
                                                   tmp_path: Path) -> None:
    run_fault("(c) controller kill", controller_kill, whole_cluster, cluster_config, tmp_path)


def test_a_rolling_restart_loses_nothing(whole_cluster: LocalCluster, cluster_config: ClusterConfig,
                                         tmp_path: Path) -> None:
    run_fault("(d) rolling restart", rolling_restart, whole_cluster, cluster_config, tmp_path)
