"""Dramatiq on kmq beside Dramatiq on Redis (`make bench`): the same trivial actor under the ``dramatiq`` command.

Tasks/s with one worker process and with several (8 threads each), from the first task any process ran to the last;
enqueue rates; and what a SIGKILLed worker's in-flight tasks go through (kmq: the tracker redelivers them after the
redelivery timeout, or at once to a worker restarted with the same client_id; Redis: another worker requeues them
once the dead one's heartbeat is older than the heartbeat timeout). Ratios are kmq ÷ Redis from the same run. The
Redis server is the machine's package (``apt-get install -y redis-server``), started here on a free port without
persistence and stopped at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlencode

import pytest
from dramatiq import Broker, Message

from kmq import Config
from tests.bench import workloads as w
from tests.bench.results import Case, markdown, write
from tests.bench.test_bench import fresh, tracker
from tests.helpers import ROOT
from tests.markers_io import wait_for

QUICK = bool(os.environ.get("KMQ_BENCH_QUICK"))
N_TASKS = 3_000 if QUICK else 10_000
PROCESSES = (1, 2) if QUICK else (1, 2, 4)
THREADS = 8
N_ENQUEUE_CONFIRMED = 300 if QUICK else 1_000
N_KILL, KILL_TASK_S, KILL_THREADS = 40, 0.3, 4
#: kmq's redelivery timeout and Redis's heartbeat timeout in the kill case: the same, so the cases compare.
TIMEOUT_MS = 10_000
#: A killed worker's consumer leaves its group after this (kmq; Kafka's default is 45 s).
FAST_GROUP = {"consumer_kafka.session.timeout.ms": "6000", "consumer_kafka.heartbeat.interval.ms": "500"}

pytestmark = [pytest.mark.bench, pytest.mark.timeout(3600)]


@contextmanager
def redis_server() -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is missing: apt-get install -y redis-server")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import redis

        client = redis.Redis(port=port)
        if not wait_for(lambda: _pings(client), timeout_s=20):
            raise TimeoutError(f"redis-server on port {port} did not answer within 20 s")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)


def _pings(client: object) -> bool:
    import redis

    try:
        return bool(client.ping())  # type: ignore[attr-defined]
    except redis.ConnectionError:
        return False


def kmq_url(config: Config, **fields: str) -> str:
    query = {"message_topic": config.message_topic, "marker_topic": config.marker_topic,
             "tracker_group": config.tracker_group, **fields}
    return f"kmq://{config.bootstrap_servers}/?{urlencode(query)}"


def broker_for(url: str, confirm: bool = True) -> Broker:
    if url.startswith("kmq://"):
        from kmq.dramatiq import KmqBroker

        return KmqBroker(url=url, confirm_delivery=confirm)
    import redis
    from dramatiq.brokers.redis import RedisBroker

    redis.Redis.from_url(url).flushall()
    return RedisBroker(url=url)


class Workers:
    """``dramatiq`` command processes running tests/bench/dramatiq_app.py, each in its own process group."""

    def __init__(self, url: str, out: Path, **env: str) -> None:
        self.url, self.out, self.env = url, out, env
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, processes: int, threads: int, **env: str) -> subprocess.Popen[bytes]:
        full_env = {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_BROKER_URL": self.url, "BENCH_OUT": str(self.out),
                    **self.env, **env}
        proc = subprocess.Popen([sys.executable, "-m", "dramatiq", "tests.bench.dramatiq_app", "--processes",
                                 str(processes), "--threads", str(threads)], cwd=ROOT, env=full_env,
                                start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def done(self) -> Counter[int]:
        path = self.out / "done.log"
        return Counter(int(line) for line in path.read_text().split()) if path.exists() else Counter()


def tasks_per_second(url: str, processes: int, n: int) -> float:
    """n no-op tasks enqueued first, then handled by ``processes`` worker processes: tasks / (last - first run)."""
    sender = broker_for(url, confirm=False)
    sender.declare_queue("bench")
    for i in range(n):
        sender.enqueue(Message(queue_name="bench", actor_name="noop", args=(i,), kwargs={}, options={}))
    with tempfile.TemporaryDirectory() as out:
        workers = Workers(url, Path(out))
        try:
            for _ in range(processes):  # one command per process: each gets its own process group
                workers.start(1, THREADS)
            sender.join("bench", timeout=600_000)
        finally:
            workers.stop()
            sender.close()
        stats = [json.loads(p.read_text()) for p in Path(out).glob("*.json")]
    ran = [s for s in stats if s["count"]]
    total = sum(s["count"] for s in ran)
    if total < n:
        raise AssertionError(f"{url.split(':')[0]}: {total} of {n} tasks ran")
    return total / (max(s["last"] for s in ran) - min(s["first"] for s in ran))


def enqueue_rate(url: str, n: int, confirm: bool) -> float:
    sender = broker_for(url, confirm=confirm)
    sender.declare_queue("bench_enqueue")
    messages = [Message(queue_name="bench_enqueue", actor_name="noop", args=(i,), kwargs={}, options={})
                for i in range(n)]
    sender.enqueue(messages[0])  # the first send opens the connections
    started = time.perf_counter()
    for message in messages[1:]:
        sender.enqueue(message)
    sender.close()  # waits for unconfirmed sends
    return (n - 1) / (time.perf_counter() - started)


def kill_recovery(url: str, out: Path, **env: str) -> tuple[float, int, int]:
    """A worker busy with N_KILL slow tasks is SIGKILLed and another starts at once: seconds from the kill until
    every task is done, tasks lost (not done within 5 minutes), tasks done twice."""
    sender = broker_for(url)
    sender.declare_queue("bench_slow")
    # Redis: every command does the maintenance that requeues a dead worker's messages (Dramatiq's default chance,
    # 0.1% of commands, left them unrequeued for the 5 minutes this case waits).
    workers = Workers(url, out, BENCH_HEARTBEAT_MS=str(TIMEOUT_MS), BENCH_MAINTENANCE_CHANCE="1000000")
    try:
        first = workers.start(1, KILL_THREADS, **env)
        for i in range(N_KILL):
            sender.enqueue(Message(queue_name="bench_slow", actor_name="slow", args=(i, KILL_TASK_S), kwargs={},
                                   options={}))
        if not wait_for(lambda: sum(workers.done().values()) >= 8, timeout_s=120):
            raise TimeoutError("the first worker did not get going")
        workers.kill(first)
        killed_at = time.monotonic()
        workers.start(1, KILL_THREADS, **env)
        wait_for(lambda: len(workers.done()) == N_KILL, timeout_s=300, interval_s=0.05)
        recovery_s = time.monotonic() - killed_at
        done = workers.done()
    finally:
        workers.stop()
        sender.close()
    return round(recovery_s, 1), N_KILL - len(done), sum(1 for c in done.values() if c > 1)


def throughput_cases(bootstrap: str, redis_url: str) -> list[Case]:
    cases = []
    for processes in PROCESSES:
        config = fresh(bootstrap, "dramatiq", tracker_group=w.group("dq-tracker"))
        with _tracker(config):
            ours = tasks_per_second(kmq_url(config), processes, N_TASKS)
        redis_rate = tasks_per_second(redis_url, processes, N_TASKS)
        cases.append(Case(f"Dramatiq no-op actor, {processes} worker process(es) x {THREADS} threads", "msgs/s",
                          round(ours, 1), round(redis_rate, 1), "Dramatiq's Redis broker",
                          {"tasks": N_TASKS, "processes": processes, "threads": THREADS, "partitions": 6,
                           "prefetch": 2 * THREADS}))
    return cases


def enqueue_cases(bootstrap: str, redis_url: str) -> list[Case]:
    config = fresh(bootstrap, "dramatiq-enqueue")
    redis_rate = enqueue_rate(redis_url, N_ENQUEUE_CONFIRMED, confirm=True)
    confirmed = enqueue_rate(kmq_url(config), N_ENQUEUE_CONFIRMED, confirm=True)
    unconfirmed = enqueue_rate(kmq_url(config), N_TASKS, confirm=False)
    setup = {"threads": 1, "payload": "Dramatiq JSON (~150 B)"}
    return [
        Case("Dramatiq enqueue, confirmed (durable when enqueue returns)", "msgs/s", round(confirmed, 1),
             round(redis_rate, 1), "Redis broker enqueue", {**setup, "messages": N_ENQUEUE_CONFIRMED}),
        Case("Dramatiq enqueue, confirm_delivery=False (then waits for all)", "msgs/s", round(unconfirmed, 1),
             round(redis_rate, 1), "Redis broker enqueue", {**setup, "messages": N_TASKS}),
    ]


def kill_cases(bootstrap: str, redis_url: str) -> list[Case]:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        (base / "redis").mkdir()
        redis_s, redis_lost, redis_twice = kill_recovery(redis_url, base / "redis")
        cases = []
        for label, extra in (("a new worker", {}), ("restarted with the same client_id", {"client_id": "bench-w1"})):
            config = fresh(bootstrap, "dramatiq-kill", tracker_group=w.group("dq-tracker"),
                           redelivery_timeout_ms=TIMEOUT_MS)
            out = base / label.replace(" ", "-")
            out.mkdir()
            with _tracker(config):
                ours_s, lost, twice = kill_recovery(
                    kmq_url(config, redelivery_timeout_ms=str(TIMEOUT_MS), **FAST_GROUP, **extra), out)
            cases.append(Case(
                f"SIGKILLed worker's tasks all done again ({label})", "s", ours_s, redis_s,
                "Redis broker, heartbeat requeue", {"tasks": N_KILL, "task_s": KILL_TASK_S, "threads": KILL_THREADS,
                                                    "timeout_ms": TIMEOUT_MS},
                note=f"lost {lost} (Redis {redis_lost}), run twice {twice} (Redis {redis_twice})"))
    return cases


@contextmanager
def _tracker(config: Config) -> Iterator[None]:
    proc = tracker(config)
    try:
        yield
    finally:
        proc.terminate()
        proc.wait(30)


def test_bench_dramatiq(kafka_bootstrap: str) -> None:
    with redis_server() as redis_url:
        cases = throughput_cases(kafka_bootstrap, redis_url)
        cases += enqueue_cases(kafka_bootstrap, redis_url)
        cases += kill_cases(kafka_bootstrap, redis_url)
    out = write(ROOT / "bench-results" / (time.strftime("%Y%m%dT%H%M%S") + "-dramatiq"), cases,
                {"quick": QUICK, "suite": "dramatiq"})
    print("\n" + markdown(cases) + f"\n\nresults in {out}")
    assert all(c.ours is not None and c.baseline is not None for c in cases)
