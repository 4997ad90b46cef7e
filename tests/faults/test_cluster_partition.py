"""One broker of a three-node cluster cut off from the other two (and from every client) for 30 s, under load.

Node 3 runs in a network namespace of its own and listens on its side of the link; nodes 1 and 2 listen on the host
side, so every node and client reaches every other while the link is up. The cut isolates node 3: the controller
fences it (broker.session.timeout.ms, 4 s here), its leaderships move, writes go on with min.insync.replicas 2;
healed, it catches up and rejoins every ISR. Same checks as test_faults.py; health is degraded (under-replicated)
while it is away and ok once the ISRs are whole again.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kmq import Config
from kmq._kafka.settings import PRODUCER_DEFAULTS
from kmq.testing.cluster import LocalCluster
from kmq.testing.faults.netns import Lab
from tests.faults.rig import REDELIVERY_TIMEOUT_MS, SESSION_TIMEOUT_MS, Rig
from tests.faults.test_faults import _checked, _within_bound

pytestmark = pytest.mark.timeout(900)

#: kmq's producers' request.timeout.ms.
REQUEST_TIMEOUT_S = PRODUCER_DEFAULTS["request.timeout.ms"] / 1000


@pytest.fixture(scope="module")
def split_cluster(lab: Lab) -> Iterator[LocalCluster]:
    ns = lab.namespace("b3")
    cluster = LocalCluster(hosts={1: ns.host_address, 2: ns.host_address, 3: ns.address},
                           launch_prefix={3: ns.exec_prefix()})
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def test_one_broker_cut_off_from_the_other_two(lab: Lab, split_cluster: LocalCluster, tmp_path: Path,
                                               results: list[dict[str, object]]) -> None:
    uid = uuid.uuid4().hex[:6]
    config = Config(bootstrap_servers=split_cluster.bootstrap_servers, message_topic=f"f-split-{uid}.messages",
                    marker_topic=f"f-split-{uid}.markers", tracker_group=f"f-split-{uid}-trackers",
                    redelivery_timeout_ms=REDELIVERY_TIMEOUT_MS, unassigned_unhealthy_ms=5_000,
                    unassigned_exit_ms=60_000,
                    consumer_kafka={"session.timeout.ms": str(SESSION_TIMEOUT_MS), "heartbeat.interval.ms": "1000"})
    rig = Rig(config, "q-split", tmp_path).start()
    try:
        time.sleep(8)
        with rig.during(), lab.partitioned(lab.namespaces["b3"]):
            time.sleep(30)
        split_cluster.admin().wait_in_sync(120)
        verdict = rig.finish("one broker of three cut off 30 s", faulted_pids=set())
    finally:
        rig.stop_all()
    _checked(verdict, results)
    # A broker cut off (not crashed) answers nothing, so every write in flight to it when the link went down waits
    # the producers' request.timeout.ms (10 s) before it goes to the new leader (a Start batch then fails and is made
    # again): recovery may add that much.
    _within_bound(verdict, 30, since_fault_start=False, extra_s=REQUEST_TIMEOUT_S)
    during = [h for name in ("worker-1", "worker-2", "tracker") for h in verdict.health_during.get(name, [])]
    assert any("degraded" in h or not h.startswith("200") for h in during), f"health said all is well: {during}"
    assert all("degraded" not in h for h in verdict.health_after.values()), verdict.health_after
