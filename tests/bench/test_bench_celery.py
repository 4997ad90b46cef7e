"""Celery on kmq beside Celery on Redis (its usual broker), same task, same machine, same run.

The same trivial task on both: tasks/s through one prefork worker with one pool process, with four, and with two
workers of two processes each (several consumers of one queue); how fast ``apply_async`` returns a durable task;
and what a worker SIGKILLed with tasks in flight costs (kmq: the tracker redelivers after the visibility timeout;
Redis: kombu's ``restore_visible`` sweep, after the same visibility timeout). A redis-server from the machine's
packages (``apt-get install -y redis-server``) is started on a free port for the run and stopped after.
Writes bench-results/<timestamp>-celery/ (results.json, results.md).
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
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

pytest.importorskip("celery", reason="the Celery bench needs kmq[celery]: make celery-install")

from kmq import Config, logs
from tests.bench.results import Case, markdown, write
from tests.bench.test_bench import fresh
from tests.helpers import ROOT, env_for, free_port, members_holding_partitions
from tests.markers_io import wait_for

QUICK = bool(os.environ.get("KMQ_BENCH_QUICK"))
N_TASKS = 2_000 if QUICK else 5_000
N_PUBLISH = 300 if QUICK else 1_000
N_KILL, KILL_WORK_S, VISIBILITY_S = 200, 0.1, 10
SHAPES = ((1, 1), (1, 4), (2, 2))  # (worker processes, pool processes each)
RUN = uuid.uuid4().hex[:8]

pytestmark = [pytest.mark.bench, pytest.mark.timeout(1800)]


def tracker(config: Config) -> subprocess.Popen[bytes]:
    """A tracker process holding the markers partitions before any worker starts (as test_bench's, but a slow
    group description on a broker started a moment ago counts as "not yet" instead of failing the bench)."""
    from confluent_kafka.admin import AdminClient

    log = tempfile.TemporaryFile()  # noqa: SIM115 - the tracker writes to it for as long as it runs
    proc = subprocess.Popen([sys.executable, "-m", "kmq.redelivery"], cwd=ROOT, env=env_for(config),
                            stdout=subprocess.DEVNULL, stderr=log)
    admin = AdminClient({"bootstrap.servers": config.bootstrap_servers})

    def holding() -> bool:
        if proc.poll() is not None:  # it will never hold one: say why now, not after the whole wait
            log.seek(0)
            raise RuntimeError(f"the tracker exited {proc.returncode}: {log.read().decode()[-2000:]}")
        try:
            return members_holding_partitions(admin, config.tracker_group, config.marker_topic) > 0
        except TimeoutError:
            return False

    try:
        if not wait_for(holding, timeout_s=90):
            proc.kill()
            raise TimeoutError(f"the tracker got no markers partition within 90 s (group {config.tracker_group!r})")
    finally:
        log.close()  # the tracker writes on through its own descriptor (an unclosed one failed a run at collection)
    return proc


@contextmanager
def redis_server() -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is missing: apt-get install -y redis-server (the Celery bench's baseline)")
    port = free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "redis-server did not answer PING within 20 s"
            time.sleep(0.1)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)


class Side:
    """One broker under test: its Celery environment, a queue per case, workers started and killed."""

    def __init__(self, name: str, broker: str, options: dict[str, object], base_env: dict[str, str]) -> None:
        self.name = name
        self.broker = broker
        self.options = options
        self.base_env = base_env
        self.tmp = Path(tempfile.gettempdir()) / f"kmq-celery-bench-{name}-{RUN}"
        self.tmp.mkdir()

    def env(self, queue: str, work_s: float = 0.0, **options: object) -> dict[str, str]:
        return {**self.base_env, "CELERY_BENCH_BROKER": self.broker,
                "CELERY_BENCH_OPTIONS": json.dumps({**self.options, **options}), "CELERY_BENCH_QUEUE": queue,
                "CELERY_BENCH_OUT": str(self.tmp / f"{queue}.txt"), "CELERY_BENCH_WORK_S": str(work_s)}

    def app(self, env: dict[str, str]):  # type: ignore[no-untyped-def]
        from tests.bench.celery_app import make_app

        return make_app(env)

    def start_worker(self, env: dict[str, str], name: str, concurrency: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tests.bench.celery_app", "worker", "-P", "prefork",
             "-c", str(concurrency), "-n", f"{name}@%h", "--without-gossip", "--without-mingle",
             "--without-heartbeat", "-l", "WARNING"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def runs(env: dict[str, str]) -> list[tuple[int, float]]:
    try:
        text = Path(env["CELERY_BENCH_OUT"]).read_text()
    except FileNotFoundError:
        return []
    return [(int(a), float(b)) for a, b in (line.split() for line in text.splitlines() if line.strip())]


def wait_for_numbers(env: dict[str, str], n: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while len({number for number, _ in runs(env)}) < n:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def stop(procs: list[subprocess.Popen[bytes]], sig: int = signal.SIGTERM) -> None:
    """SIGTERM to each main process (Celery stops its pool: a group-wide SIGTERM can leave billiard waiting on a
    lock a killed child held); SIGKILL to each whole group."""
    for proc in procs:
        if proc.poll() is None:
            if sig == signal.SIGKILL:
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)
    for proc in procs:
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def publish_rate(side: Side, **options: object) -> float:
    """``apply_async`` until it returns, task by task (kmq: durable on the topic, or queued in the client with
    ``confirm_publish=False``; Redis: LPUSH answered)."""
    app = side.app(side.env(f"pub-{uuid.uuid4().hex[:6]}", **options))
    try:
        app.send_task("bench.noop", args=[-1])  # connects, declares and warms up outside the measurement
        started = time.perf_counter()
        for number in range(N_PUBLISH):
            app.send_task("bench.noop", args=[number])
        return N_PUBLISH / (time.perf_counter() - started)
    finally:
        app.close()


def consume_rate(side: Side, workers: int, concurrency: int) -> float:
    """Tasks/s from the first task's run to the last (worker start and group joins are not measured)."""
    env = side.env(f"rate-{uuid.uuid4().hex[:6]}", confirm_publish=False) if side.name == "kmq" else side.env(
        f"rate-{uuid.uuid4().hex[:6]}")
    app = side.app(env)
    for number in range(N_TASKS):
        app.send_task("bench.noop", args=[number])
    app.close()
    procs = [side.start_worker(side.env(env["CELERY_BENCH_QUEUE"]), f"{side.name}{i}", concurrency)
             for i in range(workers)]
    try:
        assert wait_for_numbers(env, N_TASKS, 600), f"{side.name}: not every task ran within 600 s"
    finally:
        stop(procs)
    times = sorted(t for _, t in runs(env))
    return (len(times) - 1) / (times[-1] - times[0])


def kill_case(side: Side) -> dict[str, float]:
    """Two workers of two processes; one SIGKILLed (with its pool) a quarter of the way in. Returns the seconds
    from the kill until every task had run, and how many ran twice."""
    env = side.env(f"kill-{uuid.uuid4().hex[:6]}", work_s=KILL_WORK_S, visibility_timeout=VISIBILITY_S)
    app = side.app(env)
    for number in range(N_KILL):
        app.send_task("bench.noop", args=[number])
    app.close()
    procs = [side.start_worker(env, f"{side.name}k{i}", 2) for i in range(2)]
    try:
        assert wait_for_numbers(env, N_KILL // 4, 300), f"{side.name}: the first quarter did not run"
        killed_at = time.time()
        stop(procs[:1], signal.SIGKILL)
        recovered = wait_for_numbers(env, N_KILL, 120)
        done_at = time.time()
    finally:
        stop(procs[1:])
    numbers = [n for n, _ in runs(env)]
    return {"recovery_s": round(done_at - killed_at, 1) if recovered else float("nan"),
            "run_twice": len(numbers) - len(set(numbers)), "lost": N_KILL - len(set(numbers))}


def test_bench_celery(kafka_bootstrap: str) -> None:
    logs.configure("error")
    started = time.monotonic()
    config: Config = fresh(kafka_bootstrap, "celery")
    kmq_options = {"kmq": {"message_topic": config.message_topic, "marker_topic": config.marker_topic}}
    base_env = env_for(config)
    cases: list[Case] = []
    track = tracker(config)
    try:
        with redis_server() as redis_url:
            kmq = Side("kmq", f"kmq://{kafka_bootstrap.split(',')[0]}", kmq_options, base_env)
            redis = Side("redis", redis_url, {}, base_env)
            ours, theirs = publish_rate(kmq), publish_rate(redis)
            cases.append(Case("Celery apply_async (returns when stored)", "tasks/s", ours, theirs, "Celery on Redis",
                              {"tasks": N_PUBLISH}, note="kmq: durable (acks=all) on Kafka; Redis: LPUSH, no fsync"))
            ours = publish_rate(kmq, confirm_publish=False)
            cases.append(Case("Celery apply_async, kmq confirm_publish=False", "tasks/s", ours, theirs,
                              "Celery on Redis", {"tasks": N_PUBLISH},
                              note="kmq returns once the task is queued in the client (failures logged)"))
            for workers, concurrency in SHAPES:
                ours, theirs = consume_rate(kmq, workers, concurrency), consume_rate(redis, workers, concurrency)
                cases.append(Case(f"Celery trivial task, {workers} worker(s) x {concurrency} process(es)", "tasks/s",
                                  ours, theirs, "Celery on Redis",
                                  {"tasks": N_TASKS, "workers": workers, "concurrency": concurrency,
                                   "acks_late": True, "prefetch_multiplier": 4}))
            ours_kill, theirs_kill = kill_case(kmq), kill_case(redis)
            cases.append(Case("Celery worker SIGKILLed: kill -> every task run", "s", ours_kill["recovery_s"],
                              theirs_kill["recovery_s"], "Celery on Redis",
                              {"tasks": N_KILL, "task_s": KILL_WORK_S, "visibility_timeout_s": VISIBILITY_S,
                               "workers": "2 x 2"},
                              extra={"kmq": ours_kill, "redis": theirs_kill},
                              note=f"run twice kmq/redis {ours_kill['run_twice']}/{theirs_kill['run_twice']}, "
                                   f"lost {ours_kill['lost']}/{theirs_kill['lost']}"))
    finally:
        track.terminate()
        track.wait(30)
        for side_dir in Path(tempfile.gettempdir()).glob(f"kmq-celery-bench-*-{RUN}"):
            shutil.rmtree(side_dir, ignore_errors=True)
    out = write(ROOT / "bench-results" / (time.strftime("%Y%m%dT%H%M%S") + "-celery"), cases,
                {"quick": QUICK, "seconds": round(time.monotonic() - started)})
    print("\n" + markdown(cases) + f"\n\nresults in {out}")
    assert all(c.ours is not None and c.baseline is not None for c in cases)
