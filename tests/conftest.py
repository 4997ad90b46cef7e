"""Session-wide real Kafka for functional tests and benches.

Order: ``KMQ_BOOTSTRAP_SERVERS`` if set; testcontainers' Kafka if a Docker engine answers a ping; else the
local Maven-jar KRaft broker (kmq.testing.broker), started once per session and stopped at its end.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from kmq.testing.broker import LocalKafka

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from kmq.config import Config


def _docker_answers() -> bool:
    """A raw ``GET /_ping`` to the engine, so a dead socket costs milliseconds and leaks nothing."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        if host.startswith("unix://"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            address: str | tuple[str, int] = host.removeprefix("unix://")
        elif host.startswith("tcp://"):
            name, _, port = host.removeprefix("tcp://").partition(":")
            sock, address = socket.socket(), (name, int(port or 2375))
        else:
            return False
        with sock:
            sock.settimeout(2)
            sock.connect(address)
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            return sock.recv(64).split(b" ")[1:2] == [b"200"]
    except (OSError, ValueError, IndexError):
        return False


def _testcontainers_kafka(stack: ExitStack) -> str:
    try:
        from testcontainers.kafka import KafkaContainer
    except ImportError:
        from testcontainers.community.kafka import KafkaContainer  # type: ignore[no-redef]
    container = stack.enter_context(KafkaContainer().with_kraft())
    return str(container.get_bootstrap_server())


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """The bootstrap address of the session's real broker."""
    env = os.environ.get("KMQ_BOOTSTRAP_SERVERS")
    if env:
        yield env
        return
    with ExitStack() as stack:
        if _docker_answers():
            yield _testcontainers_kafka(stack)
            return
        broker = stack.enter_context(LocalKafka())
        print(f"\nkmq: local Kafka {broker.version} at {broker.bootstrap_servers} "
              f"started in {broker.start_seconds:.1f}s")
        yield broker.bootstrap_servers


@pytest.fixture(scope="session")
def admin(kafka_bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_bootstrap})


TopicFactory = Callable[..., str]


@pytest.fixture
def new_topic(admin: AdminClient, request: pytest.FixtureRequest) -> Iterator[TopicFactory]:
    """Creates uniquely named topics for one test and deletes them afterwards."""
    created: list[str] = []

    def create(prefix: str = "t", partitions: int = 1, config: dict[str, str] | None = None) -> str:
        name = f"{prefix}-{request.node.name[:40]}-{uuid.uuid4().hex[:8]}".replace("[", "-").replace("]", "")
        futures = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})],
                                      operation_timeout=30)
        futures[name].result(timeout=30)
        created.append(name)
        return name

    yield create
    if created:
        for future in admin.delete_topics(created, operation_timeout=30).values():
            future.result(timeout=30)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


ConfigFactory = Callable[..., "Config"]


@pytest.fixture(params=["kmq", "kafka-mq-go"])
def marker_format(request: pytest.FixtureRequest) -> str:
    """Runs a test once per marker format: kmq's batched records and kafka-mq-go's per-message ones."""
    return str(request.param)


@pytest.fixture
def kmq_config(kafka_bootstrap: str, admin: AdminClient, request: pytest.FixtureRequest) -> Iterator[ConfigFactory]:
    """Makes a kmq Config on fresh, uniquely named messages/markers/dead-letter topics (deleted afterwards)."""
    from kmq._kafka.topics import create_topics
    from kmq.config import Config
    from kmq.wire.control import control_topic

    made: list[Config] = []

    def make(partitions: int = 3, marker_partitions: int = 2, **fields: object) -> Config:
        base = unique(request.node.name[:30].replace("[", "-").replace("]", "").replace("_", "-"))
        # A tracker group of its own: a tracker left over from another test (or session) never joins this one's.
        fields.setdefault("tracker_group", f"{base}.trackers")
        config = Config(bootstrap_servers=kafka_bootstrap, message_topic=f"{base}.messages",
                        marker_topic=f"{base}.markers", **fields)  # type: ignore[arg-type]
        create_topics(config, partitions=partitions, marker_partitions=marker_partitions)
        made.append(config)
        return config

    yield make
    topics = [t for c in made for t in (c.message_topic, c.marker_topic, c.dlq_topic, control_topic(c.message_topic))]
    if topics:
        for future in admin.delete_topics(topics, operation_timeout=30).values():
            try:
                future.result(timeout=30)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:  # a test may delete one itself
                    raise


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local Spark session for the whole test session (the audit's tests share it: a session takes seconds)."""
    from kmq.ops.audit.job import session

    spark = session("local[2]", {"spark.sql.shuffle.partitions": "4", "spark.default.parallelism": "2"})
    yield spark
    spark.stop()
