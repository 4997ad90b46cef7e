"""One broker of a three-node cluster cut off from the other two (and from every client) for 30 s, under load.

Node 3 runs in a network namespace of its own and listens on its side of the link; nodes 1 and 2 listen on the host
side, so every node and client reaches every other while the link is up. The cut isolates node 3: the controller
fences it (broker.session.timeout.ms, 4 s here), its leaderships move, writes go on with min.insync.replicas 2;
healed, it catches up and rejoins every ISR. Same checks as test_faults.py; health is degraded (under-replicated)
while it is away and ok once the ISRs are whole again.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import ElectionType, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from kmq import Config
from kmq._kafka.settings import CLIENT_DEFAULTS
from kmq._kafka.topics import MARKER_TOPIC_CONFIG
from kmq.testing.cluster import LocalCluster
from kmq.testing.cluster_admin import OFFSETS_TOPIC, offsets_partition
from kmq.testing.faults.netns import Lab
from tests.faults.rig import REDELIVERY_TIMEOUT_MS, SESSION_TIMEOUT_MS, Rig
from tests.faults.test_faults import _checked, _within_bound

pytestmark = pytest.mark.timeout(900)

#: How long kmq's clients wait for a broker that answers nothing (socket.timeout.ms).
REQUEST_TIMEOUT_S = CLIENT_DEFAULTS["socket.timeout.ms"] / 1000


@pytest.fixture(scope="module")
def split_cluster(lab: Lab) -> Iterator[LocalCluster]:
    ns = lab.namespace("b3")
    cluster = LocalCluster(hosts={1: ns.host_address, 2: ns.host_address, 3: ns.address},
                           launch_prefix={3: ns.exec_prefix()})
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def _coordinated_by(cluster: LocalCluster, node: int) -> tuple[Config, str]:
    """A config and a queue whose worker and tracker groups are both coordinated by ``node`` (Kafka's rule: the leader
    of the group's ``__consumer_offsets`` partition)."""
    offsets = _leading(cluster, node)
    for _ in range(1000):
        uid = uuid.uuid4().hex[:6]
        config, queue = _config(cluster, uid), f"q-split-{uid}"
        groups = (config.default_topics.consumer_group(queue), config.default_topics.tracker_group)
        if all(offsets[offsets_partition(g, len(offsets))][0] == node for g in groups):
            return config, queue
    raise AssertionError(f"no group names coordinated by node {node} in 1000 draws")


def _leading(cluster: LocalCluster, node: int, timeout_s: float = 60.0) -> dict[int, tuple[int, list[int], list[int]]]:
    """The offsets topic's partitions once ``node`` leads some: a node that joined the cluster last may lead none until
    a preferred leader election (Kafka runs one every 5 min), so one is asked for."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **cluster.admin_settings()})
    deadline = time.monotonic() + timeout_s
    while True:
        offsets = cluster.admin().partitions(OFFSETS_TOPIC)
        if any(leader == node for leader, _replicas, _isr in offsets.values()):
            return offsets
        assert time.monotonic() < deadline, f"node {node} leads no partition of {OFFSETS_TOPIC}"
        with contextlib.suppress(KafkaException):  # "election not needed" for the partitions already balanced
            admin.elect_leaders(ElectionType.PREFERRED,
                                [TopicPartition(OFFSETS_TOPIC, p) for p in offsets]).result(timeout=30)
        time.sleep(1)


def _topics_led_by(cluster: LocalCluster, config: Config, node: int) -> None:
    """The messages (4 partitions, half led by ``node``) and markers (2, both led by it) topics, made as
    ``kmq topics create`` makes them (which then finds them there)."""
    others = sorted(cluster.admin().brokers() - {node})
    first, second = [node, *others], [node, *reversed(others)]
    durable = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
    topics = config.default_topics
    wanted = [NewTopic(topics.messages, 4, replica_assignment=[first, second, [others[0], node, others[1]],
                                                               [others[1], node, others[0]]], config=dict(durable)),
              NewTopic(topics.markers, 2, replica_assignment=[first, second],
                       config={**MARKER_TOPIC_CONFIG, **durable})]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers, **cluster.admin_settings()})
    for future in admin.create_topics(wanted, operation_timeout=30).values():
        future.result(timeout=30)
    leaders = cluster.admin().leaders([topics.messages, topics.markers], timeout_s=30)
    assert sum(leader == node for leader in leaders.values()) == 4, leaders


def _config(cluster: LocalCluster, uid: str) -> Config:
    return Config(bootstrap_servers=cluster.bootstrap_servers, message_topic=f"f-split-{uid}.messages",
                  marker_topic=f"f-split-{uid}.markers", tracker_group=f"f-split-{uid}-trackers",
                  redelivery_timeout_ms=REDELIVERY_TIMEOUT_MS, unassigned_unhealthy_ms=5_000,
                  unassigned_exit_ms=60_000,
                  consumer_kafka={"session.timeout.ms": str(SESSION_TIMEOUT_MS), "heartbeat.interval.ms": "1000"})


def test_one_broker_cut_off_from_the_other_two(lab: Lab, split_cluster: LocalCluster, tmp_path: Path,
                                               results: list[dict[str, object]]) -> None:
    config, queue = _coordinated_by(split_cluster, 3)
    _topics_led_by(split_cluster, config, 3)
    rig = Rig(config, queue, tmp_path).start()
    try:
        time.sleep(8)
        with rig.during(), lab.partitioned(lab.namespaces["b3"]):
            time.sleep(30)
        split_cluster.admin().wait_in_sync(120)
        verdict = rig.finish("one broker of three cut off 30 s", faulted_pids=set())
    finally:
        rig.stop_all()
    _checked(verdict, results)
    # A broker cut off (not crashed) answers nothing, so every request in flight to it when the link went down waits
    # socket.timeout.ms (10 s) before it is failed and its writes go to the new leader: recovery may add that much.
    _within_bound(verdict, 30, since_fault_start=False, extra_s=REQUEST_TIMEOUT_S)
    during = [h for name in ("worker-1", "worker-2", "tracker") for h in verdict.health_during.get(name, [])]
    assert any("degraded" in h or not h.startswith("200") for h in during), f"health said all is well: {during}"
    assert all("degraded" not in h for h in verdict.health_after.values()), verdict.health_after
