"""The asyncio bench (`make bench`): kmq.aio's receive + ack beside the sync consumer's, and a worker with an
I/O-bound coroutine handler (``await asyncio.sleep(0.05)``) at concurrency 100 beside the thread worker at 100
threads (``time.sleep(0.05)``), all in the same run.

Each side runs in a process of its own with a tracker running (in the bench process), on a queue of its own with
the jobs enqueued first; each row's baseline runs right before it. Rates are steady state, from the job that
completes the first tenth to the last (tests/bench/test_bench_worker.py). Writes bench-results/<timestamp>-aio/ and
prints the table.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import threading
import time
from typing import Any

import pytest

from kmq import Service, logs
from tests.bench import workloads as w
from tests.bench.results import Case, markdown, write
from tests.bench.test_bench_worker import _bare_loop, _measured, _tenth_done
from tests.helpers import ROOT

QUICK = bool(os.environ.get("KMQ_BENCH_QUICK"))
N_RECEIVE = 30_000 if QUICK else 100_000
N_IO = 3_000 if QUICK else 10_000
IO_CONCURRENCY = 100
BATCH = 500
#: Alternating runs of each receive case (the median of each side is reported, every run in results.json).
ROUNDS = 2 if QUICK else 3

pytestmark = [pytest.mark.bench, pytest.mark.timeout(1800)]


def _bare_batches(config: Any, queue: str, n: int, go: Any, out: Any) -> None:
    """The sync baseline of receive_many: one thread's ``receive_many(500)`` + ``ack()`` loop."""
    logs.configure("error")
    consumer = Service(config).queue(queue).consumer()
    go.wait()
    acked = [0]

    def loop() -> None:
        while acked[0] < n:
            for msg in consumer.receive_many(BATCH, 0.2):
                msg.ack()
                acked[0] += 1

    runner = threading.Thread(target=loop, name="the receive loop", daemon=True)
    runner.start()
    w._report(out, _tenth_done(lambda: acked[0], n, runner), [])


def _async_loop(config: Any, queue: str, batch: int, n: int, go: Any, out: Any) -> None:
    """``async for message in consumer: await message.ack()`` (batch 1), or ``receive_many(batch)`` + acks, on an
    event loop in one thread."""
    logs.configure("error")
    acked = [0]
    started = threading.Event()

    async def main() -> None:
        async with Service(config).queue(queue).async_consumer() as consumer:
            started.set()
            await asyncio.get_running_loop().run_in_executor(None, go.wait)
            if batch == 1:
                async for message in consumer:
                    await message.ack()
                    acked[0] += 1
                    if acked[0] >= n:
                        break
            else:
                while acked[0] < n:
                    for message in await consumer.receive_many(batch, 0.2):
                        await message.ack()
                        acked[0] += 1

    runner = threading.Thread(target=asyncio.run, args=(main(),), name="the event loop", daemon=True)
    runner.start()
    started.wait(120)
    w._report(out, _tenth_done(lambda: acked[0], n, runner), [])


def _worker(config: Any, queue: str, handler_spec: str, concurrency: int, n: int, go: Any, out: Any) -> None:
    """``Worker(...).run()`` with the given handler; counts acks."""
    from kmq.worker import Worker, load_handler

    logs.configure("error")
    worker = Worker(config, [queue], load_handler(handler_spec), concurrency)
    go.wait()
    runner = threading.Thread(target=worker.run, kwargs={"install_signals": False}, name="the worker", daemon=True)
    runner.start()
    w._report(out, _tenth_done(lambda: worker.counts["acked"], n, runner), [])


def aio_cases(bootstrap: str) -> list[Case]:
    cases: list[Case] = []
    setup = {"messages": N_RECEIVE, "payload": 256, "partitions": 6, "processes": 1, "tracker": "running",
             "marker_format": "kmq"}
    sides = ((1, _bare_loop, "receive()"), (BATCH, _bare_batches, f"receive_many({BATCH})"))
    for batch, baseline_target, label in sides:
        # Alternating rounds, the median of each side: this machine's load moves a single run by 2x either way.
        baselines, ours_runs = [], []
        for _ in range(ROUNDS):
            baselines.append(_measured(bootstrap, "kmq", baseline_target, (), N_RECEIVE))
            ours_runs.append(_measured(bootstrap, "kmq", _async_loop, (batch,), N_RECEIVE))
        baseline, ours = statistics.median(baselines), statistics.median(ours_runs)
        what = "async for + await ack()" if batch == 1 else f"await receive_many({BATCH}) + await ack()"
        cases.append(Case(f"kmq.aio {what}, 1 event loop", "msgs/s", ours, baseline,
                          f"Consumer {label} + ack(), 1 thread", {**setup, "rounds": ROUNDS},
                          extra={"ours_runs": [round(r) for r in ours_runs],
                                 "baseline_runs": [round(r) for r in baselines]}))
    io_setup = {"jobs": N_IO, "payload": 256, "partitions": 6, "concurrency": IO_CONCURRENCY, "processes": 1,
                "handler": "50 ms of waiting", "tracker": "running"}
    baseline = _measured(bootstrap, "kmq", _worker, ("tests.handlers_async:io_50ms_sync", IO_CONCURRENCY), N_IO)
    ours = _measured(bootstrap, "kmq", _worker, ("tests.handlers_async:io_50ms", IO_CONCURRENCY), N_IO)
    cases.append(Case(f"kmq worker, async def handler awaiting 50 ms, concurrency {IO_CONCURRENCY}, 1 event loop",
                      "jobs/s", ours, baseline, f"thread worker, time.sleep(0.05), {IO_CONCURRENCY} threads",
                      {**io_setup, "ideal_jobs_per_s": IO_CONCURRENCY / 0.05}))
    return cases


def test_bench_aio(kafka_bootstrap: str) -> None:
    logs.configure("error")
    started = time.monotonic()
    cases = aio_cases(kafka_bootstrap)
    out = write(ROOT / "bench-results" / (time.strftime("%Y%m%dT%H%M%S") + "-aio"), cases,
                {"quick": QUICK, "seconds": round(time.monotonic() - started)})
    print("\n" + markdown(cases) + f"\n\nresults in {out}")
    assert all(c.ours is not None for c in cases)
