"""The message groups' bench (`make bench`): grouped throughput at 1, 100 and 10,000 groups beside the ungrouped queue
in the same run, and the fairness figure.

Throughput: a worker (32 threads, a handler that returns at once) in a process of its own, on a queue of its own
with the jobs enqueued first; each grouped row's baseline (the same jobs without a group) runs right before it. Rates
are steady state (from the job that completes the first tenth to the last). One group is bounded by one at a time:
each message waits for the End of the one before it to be durable.

Fairness: 100 quiet groups of 10 jobs (a 20 ms handler, 32 threads) alone, then the same behind one busy group with
100,000 jobs waiting (sent first): how long until every quiet job is done, from the moment the quiet jobs are sent,
in both runs; the figure is their ratio (the issue's target: at most 2x). Writes bench-results/<timestamp>-groups/.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kmq import Config, Service, logs
from kmq._kafka.topics import create_topics
from tests.bench import workloads as w
from tests.bench.results import Case, markdown, write
from tests.bench.test_bench_worker import _rate, _tenth_done
from tests.group_handlers import GroupOracle
from tests.group_runs import GroupRun
from tests.helpers import ROOT

QUICK = bool(os.environ.get("KMQ_BENCH_QUICK"))
N_JOBS = 20_000 if QUICK else 60_000
N_ONE_GROUP = 1_000 if QUICK else 3_000
GROUPS = (1, 100, 10_000)
PARTITIONS = 12
THREADS = 32
#: A handler that returns at once (the consumer's loop bounds the rate: the worst case for groups, whose every
#: message costs the loop a Start, an End and a hand-out of its own) and one that waits 1 ms (as on I/O).
HANDLERS = {"0 ms": "tests.handlers:record", "1 ms": "tests.group_handlers:one_ms"}
BUSY = 20_000 if QUICK else 100_000
QUIET_GROUPS, QUIET_EACH, QUIET_WORK_S = 100, 10, 0.02

pytestmark = [pytest.mark.bench, pytest.mark.timeout(3600)]


def fresh(bootstrap: str) -> Config:
    base = w.group("groups")
    config = Config(bootstrap_servers=bootstrap, message_topic=f"{base}.m", marker_topic=f"{base}.mk")
    create_topics(config, partitions=PARTITIONS, marker_partitions=3)
    return config


def send(config: Config, queue: str, n: int, groups: int | None) -> None:
    with Service(config).queue(queue).producer() as producer:
        for i in range(n):
            producer.send_async(b"x" * 256, group=None if groups is None else f"g{i % groups}")
        assert producer.flush(300) == 0


def _worker(config: Config, queue: str, handler: str, n: int, go: Any, out: Any) -> None:
    from kmq.worker import Worker, load_handler

    logs.configure("error")
    worker = Worker(config, [queue], load_handler(handler), THREADS)
    go.wait()
    runner = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    runner.start()
    w._report(out, _tenth_done(lambda: worker.counts["acked"], n, runner), [])


def rate(bootstrap: str, n: int, groups: int | None, handler: str = HANDLERS["0 ms"]) -> float:
    """Jobs/s of a worker on ``n`` jobs in ``groups`` groups (None: ungrouped), from the tenth job to the last."""
    config, queue = fresh(bootstrap), w.group("gq")
    send(config, queue, n, groups)
    return _rate(_worker, (config, queue, handler), n, timeout_s=900)


def throughput_cases(bootstrap: str) -> list[Case]:
    cases = []
    for name, handler in HANDLERS.items():
        for groups in GROUPS:
            n = N_ONE_GROUP if groups == 1 else N_JOBS
            baseline = rate(bootstrap, n, None, handler)
            ours = rate(bootstrap, n, groups, handler)
            note = "one at a time: each job waits for the End of the one before it" if groups == 1 else ""
            cases.append(Case(f"kmq worker, {groups:,} group(s), {name} handler, {THREADS} threads", "jobs/s", ours,
                              baseline, "the same jobs without a group",
                              {"jobs": n, "payload": 256, "partitions": PARTITIONS, "groups": groups}, note=note))
    return cases


def quiet_done_s(bootstrap: str, tmp: Path, busy: int) -> tuple[float, int]:
    """Seconds from sending the quiet jobs until every one is done, behind ``busy`` jobs of one group sent first
    (and read by the worker before the quiet ones are sent); and how many busy jobs ran meanwhile."""
    config = fresh(bootstrap)
    with GroupRun(config, tmp, work_s=QUIET_WORK_S, concurrency=THREADS) as run:
        run.start_worker()
        with Service(config).queue("grouped").producer() as producer:  # the worker has joined once this ran
            producer.send(b"0", group="warm-up")
        assert run.wait_finished(1, time.monotonic() + 120), "the worker never started"
        if busy:
            with Service(config).queue("grouped").producer() as producer:
                for n in range(busy):
                    producer.send_async(b"%d" % n, group="busy")
                assert producer.flush(300) == 0
            assert run.wait_finished(2, time.monotonic() + 120), "the busy group never started"
        started = time.monotonic()
        run.send(QUIET_GROUPS, QUIET_EACH)
        deadline = started + 600
        while time.monotonic() < deadline:
            oracle = GroupOracle.read(run.record)
            quiet = sum(1 for g, rs in oracle.runs.items() if g not in ("busy", "warm-up") for r in rs
                        if r.outcome == "ok")
            if quiet >= QUIET_GROUPS * QUIET_EACH:
                break
            time.sleep(0.05)
        seconds = time.monotonic() - started
        busy_done = sum(1 for r in GroupOracle.read(run.record).runs.get("busy", []) if r.outcome == "ok")
        run.stop()
    return seconds, busy_done


def fairness_case(bootstrap: str, tmp: Path) -> Case:
    alone, _ = quiet_done_s(bootstrap, tmp / "alone", 0)
    behind, busy_ran = quiet_done_s(bootstrap, tmp / "behind", BUSY)
    return Case(f"fairness: {QUIET_GROUPS} groups x {QUIET_EACH} behind one group of {BUSY:,}", "s", behind, alone,
                "the quiet jobs alone", {"handler_ms": QUIET_WORK_S * 1000, "threads": THREADS,
                                         "partitions": PARTITIONS},
                extra={"busy_jobs_run_meanwhile": busy_ran},
                note="ratio = time until every quiet job is done, behind the busy group / alone (target <= 2)")


def test_bench_groups(kafka_bootstrap: str, tmp_path: Path) -> None:
    logs.configure("error")
    started = time.monotonic()
    only = os.environ.get("KMQ_BENCH_ONLY", "")
    cases = [] if only == "fairness" else throughput_cases(kafka_bootstrap)
    cases.append(fairness_case(kafka_bootstrap, tmp_path))
    out = write(ROOT / "bench-results" / (time.strftime("%Y%m%dT%H%M%S") + "-groups"), cases,
                {"quick": QUICK, "seconds": round(time.monotonic() - started)})
    print("\n" + markdown(cases) + f"\n\nresults in {out}")
    assert all(c.ours is not None for c in cases)
