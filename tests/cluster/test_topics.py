"""Durable defaults on a three-node cluster: `kmq topics create` replicates three times with min.insync.replicas 2,
and `kmq topics check` names every weakness of topics made otherwise (exit 1 with --strict)."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from kmq import Config
from kmq._kafka.durability import describe
from kmq.testing.cluster import LocalCluster
from kmq.wire.control import control_topic
from tests.helpers import ROOT, env_for

pytestmark = pytest.mark.timeout(180)


def kmq(config: Config, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kmq.cli", *args], cwd=ROOT, env=env_for(config), capture_output=True,
                          text=True, timeout=120, check=False)


def names(config: Config) -> list[str]:
    return [config.message_topic, config.marker_topic, config.dlq_topic, control_topic(config.message_topic)]


@pytest.fixture
def admin(whole_cluster: LocalCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": whole_cluster.bootstrap_servers, "log_level": 0})


def fresh_config(cluster: LocalCluster) -> Config:
    base = f"durable-{uuid.uuid4().hex[:8]}"
    return Config(bootstrap_servers=cluster.bootstrap_servers, message_topic=f"{base}.m", marker_topic=f"{base}.mk")


def test_topics_create_replicates_three_times_with_two_in_sync(whole_cluster: LocalCluster, admin: AdminClient) -> None:
    config = fresh_config(whole_cluster)
    try:
        created = kmq(config, "topics", "create")
        assert created.returncode == 0, created.stderr
        assert created.stdout.count("replication factor 3, min.insync.replicas 2") == 4, created.stdout
        for topic in describe(admin, names(config), 30):
            assert (topic.replication, topic.min_insync, topic.unclean_election) == (3, 2, False), topic
        checked = kmq(config, "topics", "check", "--strict")
        assert checked.returncode == 0 and "warning" not in checked.stdout, checked.stdout + checked.stderr
    finally:
        admin.delete_topics(names(config), operation_timeout=30)


def test_topics_check_names_each_weakness_and_strict_fails_on_them(whole_cluster: LocalCluster,
                                                                    admin: AdminClient) -> None:
    # Given topics made by hand: messages on one replica (the cluster requires two in sync), markers kept 1 h with
    # one in-sync replica required, dead letters with unclean leader election on
    config = fresh_config(whole_cluster)
    futures = admin.create_topics([
        NewTopic(config.message_topic, 3, 1),
        NewTopic(config.marker_topic, 3, 3, config={"message.timestamp.type": "LogAppendTime",
                                                    "min.insync.replicas": "1", "retention.ms": "3600000"}),
        NewTopic(config.dlq_topic, 3, 3, config={"unclean.leader.election.enable": "true"}),
    ])
    try:
        for future in futures.values():
            future.result(30)
        # When they are checked
        lenient = kmq(config, "topics", "check")
        strict = kmq(config, "topics", "check", "--strict")
        # Then each weakness is one warning line; only --strict fails on them
        warnings = [line for line in lenient.stdout.splitlines() if line.startswith("warning: ")]
        assert lenient.returncode == 0, lenient.stderr
        assert any("replication factor 1 on a 3-broker cluster" in w and config.message_topic in w for w in warnings)
        assert any("min.insync.replicas=2 is more than its replication factor 1" in w for w in warnings)
        assert any("min.insync.replicas=1 with replication factor 3" in w for w in warnings)
        assert any("retention.ms=3600000 is shorter than the 12 h redelivery cap" in w for w in warnings)
        assert any("unclean.leader.election.enable=true" in w and config.dlq_topic in w for w in warnings)
        assert len(warnings) == 5, warnings
        assert strict.returncode == 1 and "Traceback" not in strict.stderr
    finally:
        admin.delete_topics(names(config)[:3], operation_timeout=30)
