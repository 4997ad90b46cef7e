"""The run's real Kafka broker, as a pytest plugin: ``tests/conftest.py`` and the framework suites' conftests use it.

Order: ``KMQ_BOOTSTRAP_SERVERS`` if set; testcontainers' Kafka if a Docker engine answers a ping; else the local
Maven-jar KRaft broker (kmq.testing.broker). Started once per run in ``pytest_configure``, before pytest-xdist starts
its workers, which inherit the address; stopped in ``pytest_unconfigure``.
"""

from __future__ import annotations

import os
import socket
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from packaging.version import Version

from kmq.testing.broker import LocalKafka


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


_BROKERS = ExitStack()


def _wants_a_broker(config: pytest.Config) -> bool:
    """Unit-only runs (every path under tests/unit) start no broker, nor do fault runs (tests/faults starts brokers
    of its own, listening in network namespaces) or the secured broker's tests (tests/secure start their own)."""
    paths = config.args or list(config.getini("testpaths"))
    return any(not {"unit", "faults", "secure"} & set(Path(str(path)).parts) for path in paths)


def pytest_configure(config: pytest.Config) -> None:
    """One broker for the whole run, started before pytest-xdist starts its workers, which inherit its address
    through ``KMQ_BOOTSTRAP_SERVERS`` (a worker is never the one to start it)."""
    if config.getoption("dist", "no") == "loadgroup" and Version(pytest.__version__) >= Version("9.2"):
        # Loudly, not a silently slower run: every Spark test would start a session of its own.
        raise pytest.UsageError(f"pytest {pytest.__version__}: pytest-xdist's --dist loadgroup does not group tests "
                                "with it (pytest-dev/pytest-xdist#1386); install the pytest pyproject.toml pins")
    if os.environ.get("KMQ_BOOTSTRAP_SERVERS") or hasattr(config, "workerinput") or not _wants_a_broker(config):
        return
    if _docker_answers():
        address = _testcontainers_kafka(_BROKERS)
    else:
        broker = _BROKERS.enter_context(LocalKafka())
        address = broker.bootstrap_servers
        print(f"kmq: local Kafka {broker.version} at {address} started in {broker.start_seconds:.1f}s",
              file=sys.stderr)
    os.environ["KMQ_BOOTSTRAP_SERVERS"] = address


def pytest_unconfigure(config: pytest.Config) -> None:
    _BROKERS.close()


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook turns the groups into node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The audit's tests share one Spark session: under pytest-xdist they run in one worker, in make test-audit.
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)
            item.add_marker(pytest.mark.xdist_group("spark"))


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    """The bootstrap address of the run's real broker (see pytest_configure)."""
    address = os.environ.get("KMQ_BOOTSTRAP_SERVERS")
    if not address:
        pytest.fail("no broker: KMQ_BOOTSTRAP_SERVERS is unset and none was started for this run")
    return address


@pytest.fixture(scope="session")
def admin(kafka_bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_bootstrap})
