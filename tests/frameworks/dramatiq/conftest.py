"""Fixtures for Dramatiq's own test suite (and ours) with the kmq broker on a real Kafka broker.

Dramatiq's tests ask for ``stub_broker`` and ``stub_worker``: here they are a ``KmqBroker`` and a Dramatiq worker
on it. One set of kmq topics serves the whole session, with a redelivery tracker running on it; each test gets its
own queue prefix (so its own kmq queues and consumer groups), which keeps tests apart without a topic per test.
Result and rate-limiter backends are Dramatiq's in-memory stubs only: they are not what is under test.

``run_suite.py`` loads this module as a plugin (``-p``) for Dramatiq's files, deselecting ``excluded.txt``.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dramatiq
import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from dramatiq import Worker
from dramatiq.rate_limits.backends import StubBackend as StubRateLimiterBackend
from dramatiq.results.backends import StubBackend as StubResultBackend

from kmq import Config, Service
from kmq.dramatiq import KmqBroker
from kmq.dramatiq.queue_watch import close_watches
from tests.helpers import tracker_thread
from tests.kafka_plugin import admin, kafka_bootstrap, pytest_configure, pytest_unconfigure

# The broker plugin, registered here too when this module is loaded with -p.
__all__ = ["admin", "kafka_bootstrap", "pytest_configure", "pytest_unconfigure"]

EXCLUDED = Path(__file__).with_name("excluded.txt")
#: The package run_suite.py makes for Dramatiq's test files.
SUITE_PACKAGE = "dramatiq_suite"


@dataclass(frozen=True)
class DramatiqSession:
    config: Config
    tag: str


@pytest.fixture(scope="session")
def dramatiq_session(kafka_bootstrap: str, admin: AdminClient) -> Iterator[DramatiqSession]:
    """The session's kmq topics (deleted at its end, with the consumer groups its tests made) and its tracker."""
    tag = f"kdq-{uuid.uuid4().hex[:8]}"
    # An idle consumer's poll lasts next_message_timeout_ms, and closing one waits for that poll: 0.1 s, not 1 s,
    # since every test closes its consumers.
    config = Config(bootstrap_servers=kafka_bootstrap, message_topic=f"{tag}.messages", marker_topic=f"{tag}.markers",
                    tracker_group=f"{tag}-tracker", next_message_timeout_ms=100)
    statuses = Service(config).create_topics(partitions=3, marker_partitions=2)
    try:
        with tracker_thread(config):
            yield DramatiqSession(config, tag)
    finally:
        close_watches()  # their readers would keep asking for the deleted topics (or a stopped broker) until exit
        groups = [g.group_id for g in admin.list_consumer_groups().result(timeout=30).valid
                  if g.group_id.startswith((f"kafka-mq-{tag}", tag))]
        if groups:
            for future in admin.delete_consumer_groups(groups, request_timeout=30).values():
                try:
                    future.result(timeout=30)
                except KafkaException as exc:  # a killed worker's member until its session times out: left over
                    if exc.args[0].code() not in (KafkaError.NON_EMPTY_GROUP, KafkaError.GROUP_ID_NOT_FOUND):
                        raise
        topics = [s.name for s in statuses]
        for future in admin.delete_topics(topics, operation_timeout=30).values():
            future.result(timeout=30)


def new_broker(session: DramatiqSession, **options: object) -> KmqBroker:
    """A KmqBroker on the session's topics with queues of its own (a fresh queue prefix)."""
    return KmqBroker(session.config, queue_prefix=f"{session.tag}-{uuid.uuid4().hex[:8]}.", **options)  # type: ignore[arg-type]


@pytest.fixture
def stub_broker(dramatiq_session: DramatiqSession) -> Iterator[KmqBroker]:
    broker = new_broker(dramatiq_session)
    broker.emit_after("process_boot")
    dramatiq.set_broker(broker)
    yield broker
    broker.flush_all()
    broker.close()


@pytest.fixture
def stub_worker(stub_broker: KmqBroker) -> Iterator[Worker]:
    """A worker that has already handled a message on the ``default`` queue (most tests' actors use it), as a
    deployed worker has when tasks come: its group joined, its Kafka clients connected. A few of Dramatiq's tests
    time a first task to within 0.5 s, less than a new Kafka client's start-up (a fresh idempotent producer waits
    ~0.5 s for its producer id)."""
    worker = Worker(stub_broker, worker_timeout=100, worker_threads=32)
    worker.start()
    warm_up(stub_broker, "default")
    yield worker
    worker.stop()


def warm_up(broker: KmqBroker, queue_name: str, timeout_s: float = 30.0) -> None:
    """Sends one message through ``queue_name`` and waits until it is handled and acked."""
    handled = threading.Event()
    actor = dramatiq.actor(handled.set, actor_name=f"kmq_warm_up_{uuid.uuid4().hex[:8]}", queue_name=queue_name,
                           broker=broker, max_retries=0)
    actor.send()
    if not handled.wait(timeout_s):
        raise AssertionError(f"the warm-up message on {queue_name!r} was not handled within {timeout_s:.0f}s")
    broker.join(queue_name, timeout=round(timeout_s * 1000))


@pytest.fixture
def stub_result_backend() -> StubResultBackend:
    return StubResultBackend()


@pytest.fixture(params=["stub"])
def result_backend(request: pytest.FixtureRequest) -> StubResultBackend:
    return StubResultBackend()


@pytest.fixture
def stub_rate_limiter_backend() -> StubRateLimiterBackend:
    return StubRateLimiterBackend()


@pytest.fixture(params=["stub"])
def rate_limiter_backend(request: pytest.FixtureRequest) -> StubRateLimiterBackend:
    return StubRateLimiterBackend()


def read_exclusions(path: Path = EXCLUDED) -> dict[str, str]:
    """``file.py::test_name`` (or a whole ``file.py``) → why it cannot apply to a real broker."""
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, reason = line.partition("  ")
            out[name.strip()] = reason.strip()
    return out


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselects the Dramatiq tests listed in excluded.txt (a stale entry is an error)."""
    suite = [item for item in items if item.nodeid.startswith(f"{SUITE_PACKAGE}/")]
    if not suite:
        return
    excluded = {name: reason for name, reason in read_exclusions().items() if "::" in name}
    collected_files = {item.nodeid.split("/", 1)[1].split("::")[0] for item in suite}
    keep, dropped, seen = [], [], set()
    for item in items:
        short = item.nodeid.split("/", 1)[-1].split("[")[0]
        if item in suite and short in excluded:
            dropped.append(item)
            seen.add(short)
        else:
            keep.append(item)
    stale = [name for name in excluded if name.split("::")[0] in collected_files and name not in seen
             and not config.option.keyword and not config.option.markexpr]
    if stale:
        raise pytest.UsageError(f"excluded.txt names tests that do not exist: {', '.join(stale)}")
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
