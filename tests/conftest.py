"""Fixtures for the functional tests: the run's broker (tests/kafka_plugin.py), uniquely named topics, and kmq
configs on topics and groups of their own, so tests can run side by side (pytest-xdist) on one broker."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import settings

from tests.helpers import ConfigFactory, TopicFactory, unique
from tests.kafka_plugin import (
    admin,
    kafka_bootstrap,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_unconfigure,
)

__all__ = ["admin", "kafka_bootstrap", "pytest_collection_modifyitems", "pytest_configure", "pytest_unconfigure"]

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from kmq.config import Config

# Properties, not timings: a loaded machine (CI runs four tests at once beside a broker) must not fail an example
# for taking 300 ms.
settings.register_profile("kmq", deadline=None)
settings.load_profile("kmq")


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


@pytest.fixture(params=["kmq", "kafka-mq-go"])
def marker_format(request: pytest.FixtureRequest) -> str:
    """Runs a test once per marker format: kmq's batched records and kafka-mq-go's per-message ones."""
    return str(request.param)


@pytest.fixture
def kmq_config(kafka_bootstrap: str, admin: AdminClient, request: pytest.FixtureRequest) -> Iterator[ConfigFactory]:
    """Makes a kmq Config on fresh, uniquely named messages/markers/dead-letter topics (deleted afterwards); with
    ``sets``, named topic sets of those names too (prefix ``<base>-<name>``), every set's topics created."""
    from kmq._kafka.topics import create_topics
    from kmq.config import Config

    made: list[Config] = []

    def make(partitions: int = 3, marker_partitions: int = 2, sets: tuple[str, ...] = (), **fields: object) -> Config:
        base = unique(request.node.name[:30].replace("[", "-").replace("]", "").replace("_", "-"))
        # Groups of its own: a consumer or tracker of another test (running beside it, or left over) never joins
        # this one's groups, whatever its queue names.
        fields.setdefault("tracker_group", f"{base}.trackers")
        fields.setdefault("consumer_group_prefix", f"{base}.")
        if sets:
            fields.setdefault("topic_sets", {name: {"prefix": f"{base}-{name}"} for name in sets})
        config = Config(bootstrap_servers=kafka_bootstrap, message_topic=f"{base}.messages",
                        marker_topic=f"{base}.markers", **fields)  # type: ignore[arg-type]
        for topics in config.all_topic_sets:
            create_topics(config, topics, partitions=partitions, marker_partitions=marker_partitions)
        made.append(config)
        return config

    yield make
    topics = [t for c in made for s in c.all_topic_sets for t in s.topics]
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

    # The tests' frames are small: compiling each plan's generated code (Janino) costs more than interpreting it,
    # and one shuffle partition is enough (measured: the classification tests 49 s -> 32 s).
    spark = session("local[2]", {"spark.sql.shuffle.partitions": "1", "spark.default.parallelism": "1",
                                 "spark.sql.adaptive.enabled": "false", "spark.sql.codegen.wholeStage": "false",
                                 "spark.sql.codegen.factoryMode": "NO_CODEGEN"})
    yield spark
    spark.stop()
