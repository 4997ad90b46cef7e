"""A queue under load as in production, in real processes: one paced producer, two workers, two trackers.

``Traffic`` starts them on a Config's topics, samples every process's /healthz while it runs, and at the end
stops them (SIGTERM), checks they were all still running, exited cleanly and printed no traceback, and collects
what the analysis needs: the producer's confirmed messages, the handlers' runs, the markers and dead letters.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from kmq import Config
from kmq.wire import consumer_group
from kmq.wire.marker_batch import decode_record
from tests.cluster.analysis import MarkerLog, Run, load_confirmed, load_runs
from tests.helpers import ROOT, env_for, free_port, members_holding_partitions
from tests.markers_io import wait_for

#: Producer cap; the harness stops it (SIGTERM) when the scenario is over.
MAX_MESSAGES = 1_000_000
WORKERS = 2
TRACKERS = 2
#: The workers' handler: one that also notes the consumer's waits can be swapped in to see where time goes.
HANDLER = os.environ.get("KMQ_FAULT_HANDLER", "tests.cluster.handlers:note")


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    metrics_port: int | None = None
    exit_code: int | None = None


@dataclass
class HealthSample:
    t: float
    name: str
    status: int
    body: str


@dataclass
class Outcome:
    """What a run left behind, read after every process stopped."""

    confirmed: set[str]
    runs: list[Run]
    markers: MarkerLog
    dead_letters: int
    problems: list[str]
    health: list[HealthSample] = field(default_factory=list)

    @property
    def handled(self) -> set[str]:
        return {r.payload for r in self.runs}


class Traffic:
    """``start()`` the workers and trackers, ``produce(rate)``, inject faults, then ``finish()``."""

    def __init__(self, config: Config, queue: str, work_dir: Path, *, concurrency: int = 4) -> None:
        self.config = config
        self.queue = queue
        self.dir = work_dir
        self.record = work_dir / "handled.jsonl"
        self.confirmed = work_dir / "confirmed.tsv"
        self.env = {**env_for(config), "KMQTEST_RECORD": str(self.record)}
        self.concurrency = concurrency
        self.procs: list[Proc] = []
        self.producer: Proc | None = None
        self.rate_per_s = 0.0
        self.health: list[HealthSample] = []
        self._sampling = threading.Event()
        self._sampler: threading.Thread | None = None

    def _spawn(self, name: str, args: list[str], metrics: bool = False) -> Proc:
        port = free_port() if metrics else None
        log = self.dir / f"{name}.log"
        extra = ["--metrics-port", str(port)] if port else []
        with log.open("wb") as out:
            popen = subprocess.Popen([sys.executable, *args, *extra], cwd=ROOT, env=self.env, stdout=out,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        proc = Proc(name, popen, log, port)
        self.procs.append(proc)
        return proc

    def start(self, timeout_s: float = 90.0) -> None:
        for i in range(1, TRACKERS + 1):
            self._spawn(f"tracker-{i}", ["-m", "kmq.redelivery"], metrics=True)
        for i in range(1, WORKERS + 1):
            self._spawn(f"worker-{i}", ["-m", "kmq.cli", "worker", HANDLER, "--queue", self.queue,
                                        "--concurrency", str(self.concurrency)], metrics=True)
        admin = AdminClient({"bootstrap.servers": self.config.bootstrap_servers, "log_level": 0})
        joined = wait_for(lambda: _members(admin, consumer_group(self.queue)) == WORKERS
                          and _members(admin, self.config.tracker_group) == TRACKERS, timeout_s, interval_s=0.5)
        assert joined, f"workers and trackers did not all hold partitions within {timeout_s:.0f}s: {self.tails()}"
        self._sampler = threading.Thread(target=self._sample_health, name="health-sampler", daemon=True)
        self._sampler.start()

    def produce(self, rate_per_s: float) -> None:
        self.rate_per_s = rate_per_s
        self.producer = self._spawn("producer", ["-m", "tests.cluster.producer_proc", self.queue,
                                                 str(MAX_MESSAGES), str(rate_per_s), str(self.confirmed)])

    def stop_producing(self, timeout_s: float = 150.0) -> None:
        """SIGTERM: the producer stops sending and waits for its last reports (a failover may hold them)."""
        assert self.producer is not None
        self.producer.popen.send_signal(signal.SIGTERM)
        self.producer.exit_code = self.producer.popen.wait(timeout_s)

    def runs(self) -> list[Run]:
        return load_runs(self.record)

    def wait_handled(self, timeout_s: float) -> bool:
        """Until every confirmed message has had a handler run."""
        return wait_for(lambda: load_confirmed(self.confirmed) <= {r.payload for r in self.runs()}, timeout_s,
                        interval_s=0.5)

    def _sample_health(self) -> None:
        while not self._sampling.wait(0.5):
            for proc in self.procs:
                if proc.metrics_port is None or proc.popen.poll() is not None:
                    continue
                status, body = _healthz(proc.metrics_port)
                self.health.append(HealthSample(time.time(), proc.name, status, body))

    def finish(self, timeout_s: float = 60.0) -> Outcome:
        """Stops every process and collects the outcome; ``problems`` names what a clean run must not show."""
        self._sampling.set()
        if self._sampler is not None:
            self._sampler.join(5)
        problems = [f"{p.name} exited early with code {p.popen.returncode}: {_tail(p.log)}"
                    for p in self.procs if p is not self.producer and p.popen.poll() is not None]
        for proc in self.procs:
            if proc.popen.poll() is None:
                proc.popen.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.exit_code = proc.popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.exit_code = proc.popen.wait(10)
                problems.append(f"{proc.name} did not stop within {timeout_s:.0f}s of SIGTERM")
        for proc in self.procs:
            text = proc.log.read_text(errors="replace")
            if "Traceback" in text:
                problems.append(f"{proc.name} printed a traceback: {_tail(proc.log, 'Traceback')}")
            if proc.exit_code not in (0, None):
                problems.append(f"{proc.name} exited with {proc.exit_code}: {_tail(proc.log)}")
        markers = read_marker_log(self.config.bootstrap_servers, self.config.marker_topic)
        dead = count_records(self.config.bootstrap_servers, self.config.dlq_topic)
        return Outcome(load_confirmed(self.confirmed), self.runs(), markers, dead, problems, self.health)

    def kill_all(self) -> None:
        """After a failed test: nothing may outlive it."""
        self._sampling.set()
        for proc in self.procs:
            if proc.popen.poll() is None:
                proc.popen.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.popen.wait(10)

    def tails(self) -> str:
        return "\n".join(f"--- {p.name}\n{_tail(p.log)}" for p in self.procs)


def _members(admin: AdminClient, group: str) -> int:
    """Members holding partitions; 0 while the group's coordinator cannot answer (a fresh cluster creates its
    offsets topic on the first group's request)."""
    try:
        return members_holding_partitions(admin, group)
    except (KafkaException, TimeoutError):
        return 0


def _healthz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=3) as response:
            return int(response.status), response.read().decode().strip()
    except urllib.error.HTTPError as err:
        return int(err.code), err.read().decode().strip()
    except OSError as err:
        return 0, f"no answer: {err}"


def _tail(path: Path, start: str | None = None, lines: int = 12) -> str:
    text = path.read_text(errors="replace").splitlines()
    if start is not None:
        first = next((i for i, line in enumerate(text) if start in line), 0)
        return "\n".join(text[first:first + lines])
    return "\n".join(text[-lines:])


def _reader(bootstrap: str, topic: str) -> Consumer:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, "log_level": 0})
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    return consumer


def _read_all(bootstrap: str, topic: str, idle_s: float = 3.0, timeout_s: float = 60.0) -> list[object]:
    consumer = _reader(bootstrap, topic)
    records: list[object] = []
    deadline = time.monotonic() + timeout_s
    last = time.monotonic()
    try:
        while time.monotonic() < deadline and time.monotonic() - last < idle_s:
            good = [r for r in consumer.consume(1000, 0.2) if r.error() is None]
            if good:
                records.extend(good)
                last = time.monotonic()
    finally:
        consumer.close()
    return records


def read_marker_log(bootstrap: str, topic: str) -> MarkerLog:
    log = MarkerLog()
    for record in _read_all(bootstrap, topic):
        log.add(record.timestamp()[1], decode_record(record.value()))  # type: ignore[attr-defined]
    return log


def count_records(bootstrap: str, topic: str) -> int:
    return len(_read_all(bootstrap, topic, idle_s=2.0))
