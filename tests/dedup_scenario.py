"""The deduplication scenario of issue #34, shared by tests/dedup (one broker, a worker SIGKILLed) and tests/cluster
(a three-node cluster, a partition leader killed as well): 1,000 sends of 800 ids, 200 of them sent twice, from
three producers at once, to three ``kmq worker`` processes and a tracker.

What it must show: every id handled by exactly one of its sends within the window (a worker killed mid-run may run
that send twice: at least once, counted apart), no id lost, ``deduplicated`` = 200; and the same ids sent again after
the window run again.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from kmq import Config, Service
from kmq.ops.stats import collect
from tests.appended import complete_lines
from tests.helpers import ROOT, env_for, tracker_process

IDS, REPEATED, PRODUCERS = 800, 200, 3


@dataclass
class Outcome:
    """What the handlers' log says, per dedup id: the sends (first ids) that ran, and how many runs."""

    sends_run: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    runs: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    @property
    def ids_run_twice(self) -> list[str]:
        """Ids of which more than one send ran: a duplicate handed out (what must never happen)."""
        return sorted(i for i, sends in self.sends_run.items() if len(sends) > 1)

    @property
    def redelivered_runs(self) -> int:
        """Runs of a send that had run before (a killed worker's message, redelivered: at least once)."""
        return sum(self.runs.values()) - sum(len(s) for s in self.sends_run.values())


class DedupRun:
    """Workers and a tracker as processes on ``config``; sends from producer threads; the handlers' log."""

    def __init__(self, config: Config, queue: str, work_dir: Path, *, workers: int = 3) -> None:
        self.config = config
        self.queue = queue
        self.log = work_dir / "runs.jsonl"
        self.log.touch()
        env = {**env_for(config), "KMQTEST_RECORD": str(self.log)}
        self.workers: list[subprocess.Popen[bytes]] = []
        for i in range(workers):
            with open(work_dir / f"worker-{i}.log", "wb") as log:  # the child keeps its own descriptor
                self.workers.append(subprocess.Popen(
                    [sys.executable, "-m", "kmq.cli", "worker", "tests.handlers:note_dedup", "--queue", queue,
                     "--concurrency", "4"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log,
                    start_new_session=True))
        self.tracker = tracker_process(config)
        self.last_send = 0.0

    def send_all(self, seed: int = 34) -> list[str]:
        """The 1,000 sends, shuffled over three producers sending at once; returns the ids sent twice."""
        rng = random.Random(seed)
        ids = [f"id-{i:04d}" for i in range(IDS)]
        twice = rng.sample(ids, REPEATED)
        sends = ids + twice
        rng.shuffle(sends)
        self._send([sends[p::PRODUCERS] for p in range(PRODUCERS)])
        return twice

    def send_again(self, ids: list[str]) -> None:
        self._send([ids[p::PRODUCERS] for p in range(PRODUCERS)])

    def _send(self, parts: list[list[str]]) -> None:
        errors: list[BaseException] = []

        def produce(part: list[str], n: int) -> None:
            try:
                with Service(self.config).queue(self.queue).producer() as producer:
                    for k, dedup_id in enumerate(part):
                        producer.send_async(f"{dedup_id}|{n}.{k}".encode(), dedup_id=dedup_id)
                        time.sleep(random.random() * 0.02)  # spread over a few seconds, interleaved
                    assert producer.flush(60) == 0
            except BaseException as err:  # noqa: BLE001 - re-raised in the test's thread
                errors.append(err)

        threads = [threading.Thread(target=produce, args=(part, n)) for n, part in enumerate(parts)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        self.last_send = time.time()
        assert not errors, errors

    def outcome(self) -> Outcome:
        out = Outcome()
        for line in complete_lines(self.log):
            run = json.loads(line)
            out.sends_run[run["dedup_id"]].add(run["first_message_id"])
            out.runs[run["dedup_id"]] += 1
        return out

    def runs(self) -> int:
        return len(complete_lines(self.log))

    def kill_worker(self, index: int = 0) -> None:
        """SIGKILL a worker (its whole process group) mid-run."""
        os.killpg(self.workers[index].pid, signal.SIGKILL)
        self.workers[index].wait(10)

    def wait_quiet(self, ids: int, timeout_s: float, quiet_s: float) -> Outcome:
        """Waits until ``ids`` ids ran and no run came for ``quiet_s`` (a killed worker's messages come back after
        the redelivery timeout)."""
        deadline = time.monotonic() + timeout_s
        last, still = -1, time.monotonic()
        while time.monotonic() < deadline:
            count = self.runs()
            if count != last:
                last, still = count, time.monotonic()
            elif len(self.outcome().sends_run) >= ids and time.monotonic() - still >= quiet_s:
                break
            time.sleep(0.2)
        return self.outcome()

    def deduplicated(self) -> int:
        return collect(self.config, [self.queue])[0].deduplicated

    def stop(self) -> None:
        for proc in [*self.workers, self.tracker]:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in [*self.workers, self.tracker]:
            try:
                proc.wait(40)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
