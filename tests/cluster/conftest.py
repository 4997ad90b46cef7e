"""The replicated cluster for the fault tests (three KRaft nodes, RF 3, min.insync.replicas 2): `make cluster-up`'s
when ``KMQ_CLUSTER_BOOTSTRAP_SERVERS`` names it, else one started for the session (tests/cluster/session.py)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from kmq import Config
from kmq._kafka.topics import create_topics
from kmq.testing.broker import BrokerError
from kmq.testing.cluster import LocalCluster
from kmq.wire.control import control_topic
from tests.cluster.session import session_cluster

#: One line per fault, printed at the end of the session (the figures the issue asks for).
REPORT: list[str] = []


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    try:
        with session_cluster() as running:
            yield running
    except BrokerError as err:
        pytest.fail(str(err), pytrace=False)


@pytest.fixture
def whole_cluster(cluster: LocalCluster) -> Iterator[LocalCluster]:
    """Every node up and every partition fully replicated before and after the test (a failed test may leave a
    node down)."""
    _heal(cluster)
    yield cluster
    _heal(cluster)


def _heal(cluster: LocalCluster) -> None:
    for node in cluster.nodes:
        if not node.alive:
            cluster.restart(node.node_id)
    cluster.admin().wait_in_sync(120)


ClusterConfig = Callable[..., Config]


@pytest.fixture
def cluster_config(whole_cluster: LocalCluster, request: pytest.FixtureRequest) -> Iterator[ClusterConfig]:
    """Makes a Config on fresh kmq topics, replicated three times as `kmq topics create` does on a three-node
    cluster (deleted afterwards)."""
    made: list[Config] = []

    def make(partitions: int = 6, marker_partitions: int = 3, **fields: object) -> Config:
        base = f"{request.node.name[:24].replace('_', '-')}-{uuid.uuid4().hex[:8]}"
        config = Config(bootstrap_servers=whole_cluster.bootstrap_servers, message_topic=f"{base}.messages",
                        marker_topic=f"{base}.markers", **fields)  # type: ignore[arg-type]
        # RF 3: the default
        create_topics(config, config.default_topics, partitions=partitions, marker_partitions=marker_partitions)
        made.append(config)
        return config

    yield make
    topics = [t for c in made for t in (c.message_topic, c.marker_topic, c.dlq_topic, control_topic(c.message_topic))]
    if topics:
        admin = AdminClient({"bootstrap.servers": whole_cluster.bootstrap_servers, "log_level": 0})
        for future in admin.delete_topics(topics, operation_timeout=60).values():
            try:
                future.result(timeout=60)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if REPORT:
        terminalreporter.section("cluster faults: recovery and duplicates")
        for line in REPORT:
            terminalreporter.write_line(line)
