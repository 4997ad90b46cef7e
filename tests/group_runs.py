"""GroupRun: sends grouped messages, runs ``kmq worker`` processes on them (killing one and adding one along the
way) and a redelivery tracker beside them, and reads the handlers' log back (tests.group_handlers)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from kmq import Config, Service
from tests.group_handlers import GroupOracle
from tests.helpers import ROOT, env_for, tracker_thread


class GroupRun:
    def __init__(self, config: Config, tmp: Path, *, mode: str = "", work_s: float = 0.002,
                 concurrency: int = 8, env: dict[str, str] | None = None) -> None:
        self.config, self.env = config, env or {}
        Path(tmp).mkdir(parents=True, exist_ok=True)
        self.record = Path(tmp) / "runs.jsonl"
        self.mode, self.work_s, self.concurrency = mode, work_s, concurrency
        self.procs: list[subprocess.Popen[str]] = []
        self.killed: dict[int, float] = {}

    def __enter__(self) -> GroupRun:
        self._tracker = tracker_thread(self.config)
        self._tracker.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=30)
        self._tracker.__exit__(exc_type, exc, tb)

    def send(self, groups: int, per_group: int, queue: str = "grouped") -> None:
        with Service(self.config).queue(queue).producer() as producer:
            for n in range(per_group):
                for g in range(groups):
                    producer.send_async(b"%d" % n, group=f"g{g}")
            assert producer.flush(60) == 0

    def start_worker(self, queue: str = "grouped") -> subprocess.Popen[str]:
        extra = ["--time-limit", "1"] if self.mode == "time-limit" else []
        with (self.record.parent / f"worker-{len(self.procs)}.log").open("w") as log:  # the child keeps its own fd
            proc = subprocess.Popen(
                [sys.executable, "-m", "kmq.cli", "worker", "tests.group_handlers:run", "--queue", queue,
                 "--concurrency", str(self.concurrency), "--backoff-base", "0.3", "--backoff-max", "0.5", *extra],
                cwd=ROOT, env={**env_for(self.config), "KMQTEST_RECORD": str(self.record),
                               "KMQTEST_GROUP_MODE": self.mode, "KMQTEST_WORK_S": str(self.work_s),
                               "KMQ_LOG_LEVEL": "info", **self.env},
                stdout=subprocess.DEVNULL, stderr=log, text=True)
        self.procs.append(proc)
        return proc

    def oracle(self) -> GroupOracle:
        return GroupOracle.read(self.record, self.killed)

    def finished(self) -> int:
        """Messages whose handler finished (ok) at least once."""
        return len({(r.group, r.n) for rs in self.oracle().runs.values() for r in rs if r.outcome == "ok"})

    def wait_finished(self, count: int, deadline: float) -> bool:
        while time.monotonic() < deadline:
            if self.finished() >= count:
                return True
            time.sleep(0.2)
        return False

    def kill_worker(self, proc: subprocess.Popen[str], mid_run_s: float = 10.0) -> None:
        """SIGKILLs ``proc``, once one of its handlers is mid-run (waiting up to ``mid_run_s`` for that)."""
        deadline = time.monotonic() + mid_run_s
        while time.monotonic() < deadline and not any(
                r.pid == proc.pid and r.end is None for rs in self.oracle().runs.values() for r in rs):
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        self.killed[proc.pid] = time.time()
        proc.communicate(timeout=30)

    def stop(self) -> None:
        """SIGTERMs every worker still running; each must exit cleanly."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        errors = []
        for index, proc in enumerate(self.procs):
            proc.communicate(timeout=60)
            # -SIGTERM: a worker added late was stopped while it started (before its signal handlers were set).
            if proc.pid not in self.killed and proc.returncode not in (0, -signal.SIGTERM):
                log = (self.record.parent / f"worker-{index}.log").read_text()
                errors.append((proc.returncode, log[-2000:]))
        assert not errors, errors

    def go(self, *, groups: int, per_group: int, workers: int, kill_after: int, add_after: int,
           timeout_s: float = 180) -> dict[str, object]:
        """Sends, starts ``workers``, SIGKILLs the first once ``kill_after`` runs finished, adds one once
        ``add_after`` did, waits for every message to finish, stops the rest (SIGTERM)."""
        self.send(groups, per_group)
        started = time.monotonic()
        deadline = started + timeout_s
        for _ in range(workers):
            self.start_worker()
        self.wait_finished(kill_after, deadline)
        self.kill_worker(self.procs[0])
        self.wait_finished(add_after, deadline)
        self.start_worker()
        self.wait_finished(groups * per_group, deadline)
        seconds = time.monotonic() - started
        self.stop()
        return {"oracle": self.oracle(), "seconds": round(seconds, 1), "killed": len(self.killed),
                "added": len(self.procs) - workers}
