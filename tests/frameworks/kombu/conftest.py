"""Fixtures kombu's integration test classes expect (``connection``, ``invalid_connection``,
``failover_connection``), on a kmq transport: one set of kmq topics for the session, a unique queue-name prefix per
test (so each test's fixed queue names are new queues), a real broker from tests/conftest.py."""

from __future__ import annotations

import contextlib
import sys
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from kmq import Config, Service
from tests.frameworks.kombu import sdist
from tests.helpers import free_port

# kombu's classes are imported from the sdist by the test modules: its root goes on the path at collection.
sys.path.insert(0, str(sdist.ensure()))

import kmq.kombu  # registers the kmq:// scheme
from kmq.kombu.broadcast import PUBLISHER
from kmq.kombu.producers import POOL

kombu = pytest.importorskip("kombu")


@pytest.fixture(scope="session")
def kombu_config(kafka_bootstrap: str, admin: AdminClient) -> Iterator[Config]:
    """kmq topics shared by every test of the session (queues are unique per test)."""
    base = f"kombu-{uuid.uuid4().hex[:8]}"
    config = Config(bootstrap_servers=kafka_bootstrap, message_topic=f"{base}.messages",
                    marker_topic=f"{base}.markers", redelivery_timeout_ms=5000)
    # An even number: two workers own half each (the share test).
    Service(config).create_topics(partitions=4, marker_partitions=1)
    yield config
    # The transport's process-wide producers go while the session's broker still runs (at exit it is gone, and so
    # is pytest's captured stderr their librdkafka lines would go to).
    POOL.close(5.0)
    PUBLISHER.flush(5.0)
    topics = [config.message_topic, config.marker_topic, config.dlq_topic, f"{config.message_topic}.control",
              f"{config.message_topic}.broadcast"]
    for future in admin.delete_topics(topics, operation_timeout=30).values():
        with contextlib.suppress(KafkaException):  # a topic no test needed was never created
            future.result(timeout=30)


def transport_options(config: Config) -> dict[str, object]:
    return {"kmq": {"message_topic": config.message_topic, "marker_topic": config.marker_topic,
                    "redelivery_timeout_ms": config.redelivery_timeout_ms},
            "queue_name_prefix": f"{uuid.uuid4().hex[:10]}.", "wait_time_seconds": 5.0}


def url(config: Config) -> str:
    return f"kmq://{config.bootstrap_servers.split(',')[0]}"


@pytest.fixture
def connection(kombu_config: Config) -> Iterator[kmq.kombu.Transport]:
    conn = kombu.Connection(url(kombu_config), transport_options=transport_options(kombu_config))
    yield conn
    conn.release()


@pytest.fixture
def invalid_connection() -> kmq.kombu.Transport:
    return kombu.Connection(f"kmq://127.0.0.1:{free_port()}", connect_timeout=1)


@pytest.fixture
def failover_connection(kombu_config: Config) -> Iterator[kmq.kombu.Transport]:
    conn = kombu.Connection(f"kmq://127.0.0.1:{free_port()};{url(kombu_config)}", connect_timeout=2,
                            transport_options=transport_options(kombu_config))
    yield conn
    conn.release()
