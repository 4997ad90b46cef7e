"""Deduplicated sends across a killed partition leader and a SIGKILLed worker on a three-node cluster (issue #34):
1,000 sends of 800 ids (200 sent twice) from three producers at once; while they come, the node leading the most
messages partitions is SIGKILLed (then restarted) and so is one of three workers. Every id is handled by exactly one
of its sends, none is lost, ``deduplicated`` counts the 200; after the window, the same ids run again."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from kmq.testing.cluster import LocalCluster
from tests.cluster.conftest import REPORT, ClusterConfig
from tests.dedup_scenario import IDS, REPEATED, DedupRun
from tests.helpers import FAST_GROUP
from tests.markers_io import wait_for

pytestmark = pytest.mark.timeout(420)

WINDOW_MS = 30_000


def test_every_id_is_handled_once_across_a_killed_leader_and_a_killed_worker(
    whole_cluster: LocalCluster, cluster_config: ClusterConfig, tmp_path: Path,
) -> None:
    config = cluster_config(redelivery_timeout_ms=4000, dedup_window_ms=WINDOW_MS, consumer_kafka=FAST_GROUP)
    run = DedupRun(config, "orders", tmp_path)
    victim = Counter(whole_cluster.admin().leaders([config.message_topic]).values()).most_common(1)[0][0]
    faults: list[str] = []

    def faults_mid_run() -> None:
        if wait_for(lambda: run.runs() >= 200, 90, interval_s=0.05):
            whole_cluster.kill(victim)
            faults.append(f"node {victim} (leader of the most messages partitions) killed after {run.runs()} runs")
        if wait_for(lambda: run.runs() >= 400, 90, interval_s=0.05):
            run.kill_worker(0)
            faults.append(f"a worker SIGKILLed after {run.runs()} runs")

    try:
        time.sleep(10)  # the workers in their group
        injector = threading.Thread(target=faults_mid_run)
        injector.start()
        twice = run.send_all()
        injector.join(120)
        assert len(faults) == 2, faults
        outcome = run.wait_quiet(IDS, timeout_s=180, quiet_s=8)
        whole_cluster.restart(victim)
        assert len(outcome.sends_run) == IDS, f"{IDS - len(outcome.sends_run)} ids never handled"
        assert outcome.ids_run_twice == [], "a duplicate send was handed out"
        assert wait_for(lambda: run.deduplicated() == REPEATED, 60), run.deduplicated()
        line = (f"(dedup) 1,000 sends of {IDS} ids, {'; '.join(faults)}: every id handled by one send, "
                f"{REPEATED} duplicates never handed out, {outcome.redelivered_runs} redelivered run(s)")
        REPORT.append(line)
        print("\n" + line)
        time.sleep(max(0.0, run.last_send + WINDOW_MS / 1000 + 1 - time.time()))
        again = twice[:50]
        run.send_again(again)
        assert wait_for(lambda: all(len(run.outcome().sends_run[i]) == 2 for i in again), 90)
    finally:
        run.stop()
