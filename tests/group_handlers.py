"""The handler of the message groups' worker tests (``kmq worker tests.group_handlers:run``) and their oracle.

Each run appends a "start" and an "end" line to $KMQTEST_RECORD (O_APPEND: one write per line, atomic across
processes) with the wall time, the process, the group, the payload (the message's number in its group) and the
delivery count. $KMQTEST_GROUP_MODE picks a misbehaviour for a message's first delivery: "release" (every 7th
raises: the worker releases it after its backoff delay), "time-limit" (every 11th sleeps past the worker's
--time-limit: stopped and released). $KMQTEST_WORK_S: how long a run takes (default 0.002 s).
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from kmq import Message
from tests.appended import complete_lines


def _line(event: str, message: Message, **extra: object) -> None:
    line = json.dumps({"event": event, "at": time.time(), "pid": os.getpid(), "group": message.group,
                       "n": int(message.payload), "count": message.delivery_count, "id": str(message.message_id),
                       **extra})
    with open(os.environ["KMQTEST_RECORD"], "a") as out:
        out.write(line + "\n")


def run(message: Message) -> None:
    mode, n = os.environ.get("KMQTEST_GROUP_MODE", ""), int(message.payload)
    _line("start", message)
    outcome = "ok"
    try:
        time.sleep(float(os.environ.get("KMQTEST_WORK_S", "0.002")))
        if message.delivery_count == 1 and mode == "release" and n % 7 == 3:
            outcome = "failed"
            raise RuntimeError("fails once: released after the backoff")
        if message.delivery_count == 1 and mode == "time-limit" and n % 11 == 5:
            outcome = "timed-out"
            for _ in range(1200):  # Python code, as a handler's: the worker's interrupt stops it
                time.sleep(0.05)
    finally:
        _line("end", message, outcome=outcome)


@dataclass
class Run:
    group: str
    n: int
    pid: int
    start: float
    end: float | None = None
    outcome: str = ""


@dataclass
class GroupOracle:
    """What the handlers' log says, and the checks: per group in send order, never two at once, nothing lost."""

    runs: dict[str, list[Run]] = field(default_factory=lambda: defaultdict(list))

    @classmethod
    def read(cls, record: Path, killed: dict[int, float] | None = None) -> GroupOracle:
        oracle, open_runs = cls(), {}
        for raw in complete_lines(record):
            line = json.loads(raw)
            key = (line["pid"], line["id"], line["count"])
            if line["event"] == "start":
                open_runs[key] = run = Run(line["group"], line["n"], line["pid"], line["at"])
                oracle.runs[run.group].append(run)
            elif key in open_runs:
                run = open_runs.pop(key)
                run.end, run.outcome = line["at"], line["outcome"]
        for run in open_runs.values():  # cut short by a SIGKILL: it ran until the kill
            run.end = (killed or {}).get(run.pid)
        return oracle

    def cut_short(self) -> list[Run]:
        """Runs a SIGKILL stopped mid-way."""
        return [r for runs in self.runs.values() for r in runs if r.outcome == "" and r.end is not None]

    def done(self) -> int:
        return sum(1 for runs in self.runs.values() for r in runs if r.outcome == "ok")

    def check(self, groups: int, per_group: int) -> dict[str, int]:
        assert len(self.runs) == groups, f"{groups - len(self.runs)} groups never ran"
        overlaps, inversions, lost = [], [], []
        for group, runs in self.runs.items():
            runs.sort(key=lambda r: r.start)
            for before, after in itertools.pairwise(runs):
                if before.end is None or after.start < before.end:
                    overlaps.append((group, before.n, after.n))
                if after.n < before.n:
                    inversions.append((group, before.n, after.n))
            finished = {r.n for r in runs if r.outcome == "ok"}
            lost += [(group, n) for n in range(per_group) if n not in finished]
        assert not overlaps, f"two runs of one group at once: {overlaps[:10]}"
        assert not inversions, f"out of send order: {inversions[:10]}"
        assert not lost, f"never finished: {lost[:10]} ({len(lost)} in all)"
        runs = [r for rs in self.runs.values() for r in rs]
        return {"runs": len(runs), "reruns": len(runs) - groups * per_group,
                "not_ok": sum(r.outcome != "ok" for r in runs)}


def one_ms(message: Message) -> None:
    """A 1 ms handler that waits (as on I/O), for the bench."""
    time.sleep(0.001)
