"""The worker's bench (`make bench`): `kmq worker` jobs/s with a trivial handler at 1, 8 and 32 threads and child
processes, beside the bare consumer loop (`receive()` + `ack()`, one thread) in the same run, in both marker formats.

Each side runs in a process of its own with a tracker running (in the bench process), on a queue of its own with
the jobs enqueued first; each row's baseline runs right before it. Rates are steady state: from the job that
completes the first tenth to the last, so group joins and child-process start-up (32 spawned interpreters) are not
measured. Writes bench-results/<timestamp>-worker/ and prints the table.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from queue import Empty
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from kmq import Config, Service, logs, tune_gc
from kmq._kafka.topics import create_topics
from tests.bench import workloads as w
from tests.bench.results import Case, markdown, write
from tests.bench.tracker_probe import TrackerProbe
from tests.helpers import ROOT, members_holding_partitions
from tests.markers_io import wait_for

QUICK = bool(os.environ.get("KMQ_BENCH_QUICK"))
#: Jobs per run: at 50-100k jobs/s a thread run must last long enough to outweigh the machine's noise.
N_THREAD_JOBS = 30_000 if QUICK else 100_000
N_PROCESS_JOBS = 10_000 if QUICK else 20_000
THREADS = (1, 8, 32)
PROCESSES = (1, 8) if QUICK else (1, 8, 32)
PARTITIONS = 6
HANDLER = "tests.handlers:record"
#: Rounds of each thread and handler-process row, each side's best kept (one in bench-quick).
ROUNDS = 1 if QUICK else 2

pytestmark = [pytest.mark.bench, pytest.mark.timeout(1800)]


def fresh(bootstrap: str, marker_format: str) -> tuple[Config, str]:
    base = w.group("worker")
    config = Config(bootstrap_servers=bootstrap, message_topic=f"{base}.m", marker_topic=f"{base}.mk",
                    marker_format=marker_format)
    create_topics(config, config.default_topics, partitions=PARTITIONS, marker_partitions=3)
    return config, w.group("wq")


def _tenth_done(count: Any, n: int, runner: threading.Thread) -> float | None:
    """Polls ``count()`` until it reaches ``n``; returns when it reached a tenth of it."""
    tenth_at = None
    while count() < n:
        if not runner.is_alive():
            raise RuntimeError(f"{runner.name} ended after {count()} of {n} jobs")
        if tenth_at is None and count() >= n // 10:
            tenth_at = time.perf_counter()
        time.sleep(0.002)
    return tenth_at


def _bare_loop(config: Config, queue: str, n: int, go: Any, out: Any) -> None:
    """The baseline: one thread's ``receive()`` + ``ack()`` loop on one consumer, the collector tuned once set up
    (as the performance guide says, and as `kmq worker` does)."""
    logs.configure("error")
    consumer = Service(config).queue(queue).consumer()
    tune_gc()
    w.set_up_done(go)
    acked = [0]

    def loop() -> None:
        while acked[0] < n:
            msg = consumer.receive(0.2)
            if msg is not None:
                msg.ack()
                acked[0] += 1

    runner = threading.Thread(target=loop, name="the receive loop", daemon=True)
    runner.start()
    tenth_at = _tenth_done(lambda: acked[0], n, runner)
    w._report(out, tenth_at, [])


def _worker(config: Config, queue: str, concurrency: int, processes: bool, n: int, go: Any,
            out: Any) -> None:
    """``Worker(...).run()`` with a handler that returns at once; counts acks."""
    from kmq.worker import Worker, load_handler

    logs.configure("error")
    worker = Worker(config, [queue], load_handler(HANDLER), concurrency, processes=processes, handler_spec=HANDLER)
    w.set_up_done(go)  # as `kmq worker` does once set up
    runner = threading.Thread(target=worker.run, kwargs={"install_signals": False, "on_started": tune_gc},
                              name="the worker", daemon=True)
    runner.start()
    tenth_at = _tenth_done(lambda: worker.counts["acked"], n, runner)
    w._report(out, tenth_at, [])


def _rate(target: Any, args: tuple[Any, ...], n: int, timeout_s: float = 300) -> float:
    """Runs ``target`` in a process of its own (not a daemon: a worker in process mode starts children); returns
    jobs/s from the tenth job to the last."""
    ctx = mp.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, n, go, out))
    proc.start()
    try:
        time.sleep(1)
        go.set()
        try:
            tenth_at, end, _ = out.get(timeout=timeout_s)
        except Empty:
            raise TimeoutError(f"{n} jobs not done in {timeout_s} s (exit code {proc.exitcode})") from None
    finally:
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join(10)
    return (n - n // 10) / (end - tenth_at)


def _measured(bootstrap: str, marker_format: str, target: Any, args: tuple[Any, ...], n: int) -> float:
    config, queue = fresh(bootstrap, marker_format)
    w.kmq_send(config, queue, n, 256, sync=False)
    with TrackerProbe(config):
        return _rate(target, (config, queue, *args), n)


def worker_cases(bootstrap: str) -> list[Case]:
    """Each row's baseline runs right before it, on as many jobs, ROUNDS times alternating, and each side's best
    round is kept: the machine's speed drifts within a run, and one round of either side moved up to 1.8x between
    runs of the same code."""
    cases: list[Case] = []
    runs = [("kmq", threads, False) for threads in THREADS] + [("kmq", p, True) for p in PROCESSES] + \
           [("kafka-mq-go", threads, False) for threads in THREADS]
    for marker_format, concurrency, processes in runs:
        n = N_PROCESS_JOBS if processes else N_THREAD_JOBS
        baseline = ours = 0.0
        for _ in range(ROUNDS):
            baseline = max(baseline, _measured(bootstrap, marker_format, _bare_loop, (), n))
            ours = max(ours, _measured(bootstrap, marker_format, _worker, (concurrency, processes), n))
        mode = "handler processes (--handler-processes)" if processes else "threads"
        cases.append(Case(f"kmq worker, 0 ms handler, {concurrency} {mode}, {marker_format} markers", "jobs/s",
                          ours, baseline, "consumer receive()+ack(), 1 thread",
                          {"jobs": n, "payload": 256, "partitions": PARTITIONS, "concurrency": concurrency,
                           "processes": processes, "tracker": "running", "rounds": ROUNDS}))
    return cases


#: Jobs per `--processes` run: ~1 ms each, so ~10 s on one process.
N_SPIN_JOBS = 4_000 if QUICK else 10_000
SPIN_HANDLER = "tests.handlers:spin_1ms"


def _pool_rate(config: Config, queue: str, processes: int, n: int, progress: Path) -> float:
    """``kmq worker --processes N`` (a WorkerPool, one thread per child) on ``n`` CPU-bound jobs sent once every
    child serves (so each has its share of the partitions): jobs/s from the tenth to the last, from the handlers'
    progress files (the children report their counts only at exit)."""
    from kmq.worker.pool import WorkerPool, WorkerRecipe

    for stale in progress.iterdir():
        stale.unlink()
    pool = WorkerPool(WorkerRecipe(config, (queue,), SPIN_HANDLER, log_level="error"), processes)
    runner = threading.Thread(target=pool.run, kwargs={"install_signals": False}, name="the pool", daemon=True)

    def done() -> int:
        return sum(int(f.read_text() or 0) for f in progress.iterdir())

    runner.start()
    try:
        deadline = time.monotonic() + 300
        while pool.serving < processes:
            if not runner.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the pool of {processes} did not start: {pool.failures}")
            time.sleep(0.05)
        # The group's assignment settles after the last member opened its consumer: a rebalance mid-run would
        # stall every child for seconds (each must hold partitions before the jobs come).
        admin = AdminClient({"bootstrap.servers": config.bootstrap_servers})
        group = config.topics_for(queue).consumer_group(queue)
        if not wait_for(lambda: members_holding_partitions(admin, group) == processes, timeout_s=60):
            raise RuntimeError(f"the pool's {processes} members did not all get partitions of {group!r}")
        time.sleep(1)
        w.kmq_send(config, queue, n, 256, sync=False)
        tenth_at = None
        while (count := done()) < n - 100 * processes:  # each child writes its count every 100 jobs
            if not runner.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the pool of {processes} ended or stalled after {count} of {n} jobs")
            if tenth_at is None and count >= n // 10:
                tenth_at = time.perf_counter()
            time.sleep(0.005)
        end = time.perf_counter()
    finally:
        pool.stop()
        runner.join(60)
    assert tenth_at is not None and not pool.failures, pool.failures
    return (count - n // 10) / (end - tenth_at)


def pool_cases(bootstrap: str, rounds: int = 2) -> list[Case]:
    """`--processes 2` against `--processes 1` with a ~1 ms pure-Python handler, best of ``rounds`` each,
    alternating (the machine's speed drifts within a run)."""
    progress = Path(tempfile.mkdtemp(prefix="kmq-bench-progress-"))
    os.environ["KMQ_BENCH_PROGRESS"] = str(progress)  # the spawned children inherit it
    best = {1: 0.0, 2: 0.0}
    try:
        for _ in range(rounds):
            for processes in (1, 2):
                config, queue = fresh(bootstrap, "kmq")
                with TrackerProbe(config):
                    best[processes] = max(best[processes], _pool_rate(config, queue, processes, N_SPIN_JOBS,
                                                                      progress))
    finally:
        os.environ.pop("KMQ_BENCH_PROGRESS", None)
        shutil.rmtree(progress, ignore_errors=True)
    return [Case("kmq worker --processes 2, ~1 ms pure-Python handler", "jobs/s", best[2], best[1],
                 "kmq worker --processes 1, same handler",
                 {"jobs": N_SPIN_JOBS, "payload": 256, "partitions": PARTITIONS, "concurrency": 1,
                  "rounds": rounds, "cores": os.cpu_count(), "load": " ".join(f"{x:.1f}" for x in os.getloadavg()),
                  "tracker": "running"})]


def _run(kafka_bootstrap: str, suffix: str, make_cases: Callable[[str], list[Case]]) -> None:
    logs.configure("error")
    started = time.monotonic()
    cases = make_cases(kafka_bootstrap)
    out = write(ROOT / "bench-results" / (time.strftime("%Y%m%dT%H%M%S") + suffix), cases,
                {"quick": QUICK, "seconds": round(time.monotonic() - started)})
    print("\n" + markdown(cases) + f"\n\nresults in {out}")
    assert all(c.ours is not None for c in cases)


def test_bench_worker_processes(kafka_bootstrap: str) -> None:
    _run(kafka_bootstrap, "-worker-processes", pool_cases)


def test_bench_worker(kafka_bootstrap: str) -> None:
    _run(kafka_bootstrap, "-worker", worker_cases)
