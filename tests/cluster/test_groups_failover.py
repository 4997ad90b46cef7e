"""Message groups on the three-node cluster: the node leading the most messages and markers partitions is
SIGKILLed mid-run and restarted, under two ``kmq worker`` processes. The oracle is the handlers' own log
(tests.group_handlers): every group in send order, never two of one group at once, nothing lost."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from kmq.testing.cluster import LocalCluster
from tests.cluster.conftest import REPORT, ClusterConfig
from tests.group_runs import GroupRun

pytestmark = pytest.mark.timeout(420)

GROUPS, PER_GROUP = 50, 20


def test_a_leader_kill_keeps_every_group_in_order_one_at_a_time_and_loses_nothing(
    whole_cluster: LocalCluster, cluster_config: ClusterConfig, tmp_path: Path,
) -> None:
    config = cluster_config(redelivery_timeout_ms=6000,
                            consumer_kafka={"session.timeout.ms": "10000", "heartbeat.interval.ms": "1000"})
    total = GROUPS * PER_GROUP
    with GroupRun(config, tmp_path, work_s=0.01) as run:
        run.send(GROUPS, PER_GROUP)
        started = time.monotonic()
        deadline = started + 300
        run.start_worker()
        run.start_worker()
        assert run.wait_finished(total // 4, deadline), "no steady flow before the fault"
        leaders = Counter(whole_cluster.admin().leaders([config.message_topic, config.marker_topic]).values())
        victim = max(leaders, key=lambda node: (leaders[node], node != whole_cluster.active_controller()))
        killed_at = time.monotonic()
        whole_cluster.kill(victim)
        whole_cluster.wait_fenced(victim)
        time.sleep(5)
        whole_cluster.restart(victim)
        assert run.wait_finished(total, deadline), f"{total - run.finished()} messages never finished"
        seconds = time.monotonic() - started
        run.stop()
    figures = run.oracle().check(GROUPS, PER_GROUP)
    line = (f"groups leader kill: {GROUPS}x{PER_GROUP} in order, one at a time, none lost; {figures}; "
            f"{seconds:.1f} s in all, the kill at {killed_at - started:.1f} s")
    REPORT.append(line)
    print("\n" + line)
