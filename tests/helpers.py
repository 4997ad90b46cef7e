"""Functional-test helpers: an in-process tracker, worker and tracker subprocesses, bounded receives."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer as RawConsumer
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka import Producer as RawProducer
from confluent_kafka.admin import AdminClient

from kmq import Config, Consumer, Message
from kmq._kafka import LEADERSHIP_MOVING
from kmq.redelivery.tracker import RedeliveryTracker
from tests.markers_io import wait_for

ROOT = Path(__file__).resolve().parent.parent
#: The fixtures' factories (tests/conftest.py): a uniquely named topic, a Config on topics and groups of its own.
TopicFactory = Callable[..., str]
ConfigFactory = Callable[..., Config]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"

# Small enough that a killed member leaves the group within seconds (the broker's minimum is 6 s).
FAST_GROUP = {"session.timeout.ms": "6000", "heartbeat.interval.ms": "500"}


@contextmanager
def tracker_thread(config: Config, **options: Any) -> Iterator[RedeliveryTracker]:
    tracker = RedeliveryTracker(config, **options)
    thread = threading.Thread(target=tracker.run, name="test-tracker", daemon=True)
    thread.start()
    try:
        yield tracker
    finally:
        tracker.stop()
        thread.join(30)
        assert not thread.is_alive(), "tracker did not stop within 30 s"


def receive_n(consumer: Consumer, count: int, timeout_s: float = 30.0) -> list[Message]:
    got: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.receive(0.2)
        if msg is not None:
            got.append(msg)
    return got


def write_transaction(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    """Writes ``(key, value)`` records to partition 0 of ``topic`` in one committed transaction, and returns once a
    read_committed reader sees them: ``commit_transaction`` returns when the coordinator has logged the commit, the
    partition's commit marker follows a moment later, and until then its last stable offset (the end offset such a
    reader is told) stays before the records."""
    producer = RawProducer({"bootstrap.servers": bootstrap, "transactional.id": topic})
    producer.init_transactions(10)
    producer.begin_transaction()
    for key, value in records:
        producer.produce(topic, value, key, partition=0)
    producer.commit_transaction(10)
    reader = RawConsumer({"bootstrap.servers": bootstrap, "group.id": "unused", "isolation.level": "read_committed"})
    try:
        assert wait_for(lambda: reader.get_watermark_offsets(TopicPartition(topic, 0), 10)[1] > len(records)), \
            f"the commit marker of the transaction on {topic!r} was not written within 20 s"
    finally:
        reader.close()


def receive_expecting(consumer: Consumer, count: int, timeout_s: float = 30.0, linger_s: float = 2.0) -> list[Message]:
    """Receives until ``count`` messages came (however long the group join takes, up to ``timeout_s``), then for
    ``linger_s`` more: what the caller checks must not come has that long to show up."""
    got = receive_n(consumer, count, timeout_s)
    return got + receive_n(consumer, 1_000_000, linger_s) if len(got) == count else got


def members_holding_partitions(admin: AdminClient, group: str, topic: str | None = None) -> int:
    """How many members of ``group`` hold at least one partition (of ``topic``, if given) now; none while the
    group's coordinator is not serving yet (a broker started a moment ago answers NOT_COORDINATOR). Trackers of
    every markers topic share one group: a member left from an earlier tracker holds its own topic's partitions,
    not the new one's."""
    try:
        description = admin.describe_consumer_groups([group])[group].result(timeout=10)
    except TimeoutError:  # a loaded or fresh broker slow to answer: the caller's wait asks again
        return 0
    except KafkaException as exc:
        if exc.args[0].code() in LEADERSHIP_MOVING:
            return 0
        raise
    return sum(1 for member in description.members
               if any(topic is None or tp.topic == topic for tp in member.assignment.topic_partitions))


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_kmq(config: Config | None, *args: str, stdin: str | None = None, timeout: float = 60,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``kmq ARGS`` as a subprocess configured for ``config`` (through KMQ_* variables; none without a config)."""
    base = env_for(config) if config else {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "kmq.cli", *args], cwd=ROOT, env={**base, **(env or {})},
                          input=stdin, capture_output=True, text=True, timeout=timeout, check=False)


def env_for(config: Config) -> dict[str, str]:
    """The environment that makes ``Config.load()`` in a child process equal ``config``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KMQ_BOOTSTRAP_SERVERS": config.bootstrap_servers,
           "KMQ_MESSAGE_TOPIC": config.message_topic, "KMQ_MARKER_TOPIC": config.marker_topic,
           "KMQ_REDELIVERY_TIMEOUT_MS": str(config.redelivery_timeout_ms),
           "KMQ_MAX_DELIVERIES": str(config.max_deliveries)}
    defaults = Config(bootstrap_servers="x")
    for fld in dataclasses.fields(Config):
        value = getattr(config, fld.name)
        if isinstance(value, int | str) and value != getattr(defaults, fld.name):
            env["KMQ_" + fld.name.upper()] = str(value)
    for name in ("consumer_kafka", "producer_kafka"):
        for key, value in getattr(config, name).items():
            env[f"KMQ_{name.upper()}_" + key.upper().replace(".", "_")] = value
    return env


def first_time(marker: Path) -> bool:
    """True the first time any process asks about ``marker`` (a handler that fails or rejects a message once)."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def config_file(config: Config, directory: Path) -> Path:
    """A YAML file that ``Config.from_yaml`` reads back as ``config`` (topic sets and routes included, which no
    environment variable holds): what a child process is given with ``--config``."""
    import yaml

    fields, defaults = config.__reduce__()[1][0], Config(bootstrap_servers="x").__reduce__()[1][0]
    data = {name: list(value) if isinstance(value, tuple) else value for name, value in fields.items()
            if name == "bootstrap_servers" or value != defaults[name]}
    path = directory / f"kmq-{uuid.uuid4().hex[:8]}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


class WorkerProcess:
    """A worker in its own process: receives ``hold`` messages of ``queue``, acks the first ``ack``, then waits."""

    def __init__(self, config: Config, queue: str, hold: int, ack: int = 0) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.worker_proc", queue, str(hold), str(ack)], cwd=ROOT,
            env=env_for(config), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.received: list[dict[str, object]] = []

    def wait_holding(self, timeout_s: float = 40.0) -> list[dict[str, object]]:
        assert self.proc.stdout is not None
        result: list[str] = []

        def read() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                result.append(line)
                if line.startswith("HOLDING"):
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout_s)
        assert result and result[-1].startswith("HOLDING"), f"worker did not reach HOLDING: {result[-3:]}"
        self.received = [json.loads(line) for line in result[:-1]]
        return self.received

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def tracker_process(config: Config, *extra: str) -> subprocess.Popen[str]:
    env = env_for(config)
    env["KMQ_USE_NOW_IF_NO_MARKER_SEEN_MS"] = str(config.use_now_if_no_marker_seen_ms)
    log_file = tempfile.NamedTemporaryFile(prefix="kmq-tracker-", suffix=".log", delete=False)  # noqa: SIM115
    with log_file:
        return subprocess.Popen([sys.executable, "-m", "kmq.redelivery", *extra], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=log_file, text=True)
