"""What a fault run shows, from the handlers' own log and the markers topic (pure: no Kafka).

- every confirmed message handled (by payload), duplicates (runs of one message beyond the first, by first id);
- recovery: from the fault until handler throughput is back to half the offered rate for a whole second;
- late hand-outs: a run that began after the message's deadline as the markers topic held it then (the newest
  Start or keep-alive written before the run, plus its redelivery timeout), i.e. the tracker was entitled to copy it.
"""

from __future__ import annotations

import bisect
import itertools
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kmq.wire.markers import EndReason, Marker, MarkerType
from tests.appended import complete_lines

STEP_S = 0.05


@dataclass(frozen=True, slots=True)
class Run:
    """One handler run (a line of the handler's log)."""

    payload: str
    id: str
    first: str
    count: int
    t: float
    pid: int


def load_runs(path: Path) -> list[Run]:
    runs = [Run(**json.loads(line)) for line in complete_lines(path)]
    return sorted(runs, key=lambda r: r.t)


def load_confirmed(path: Path) -> set[str]:
    return {line.split("\t", 1)[0] for line in complete_lines(path)}


def duplicates(runs: Iterable[Run]) -> int:
    """Runs beyond the first of each message (a redelivered copy counts under its first id)."""
    per_message = Counter(r.first for r in runs)
    return sum(n - 1 for n in per_message.values() if n > 1)


def recovery_s(times: Sequence[float], fault_at: float, rate_per_s: float, *, window_s: float = 1.0,
               share: float = 0.5, until: float | None = None) -> float | None:
    """Seconds from ``fault_at`` until a ``window_s`` window holds ``share`` of the offered rate again, after the
    throughput first fell below it (0.0 when it never did); None when it had not recovered by ``until``."""
    want = share * rate_per_s * window_s
    end = until if until is not None else (times[-1] if times else fault_at)

    def enough(t: float) -> bool:
        return bisect.bisect_left(times, t + window_s) - bisect.bisect_left(times, t) >= want

    t = fault_at
    while t + window_s <= end and enough(t):
        t += STEP_S
    if t + window_s > end:
        return 0.0
    while t + window_s <= end:
        if enough(t):
            return round(t - fault_at, 2)
        t += STEP_S
    return None


def longest_gap_s(times: Sequence[float], start: float, end: float) -> float:
    """The longest stretch in [start, end] without a handler run."""
    inside = [start, *[t for t in times if start <= t <= end], end]
    return round(max((b - a for a, b in itertools.pairwise(inside)), default=0.0), 2)


@dataclass(slots=True)
class MarkerLog:
    """Per message id, the (append time ms, deadline ms) of each Start and plain keep-alive, in log order."""

    deadlines: dict[str, list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))
    #: Per message id, the append time of its first ack.
    acked_ms: dict[str, int] = field(default_factory=dict)

    def add(self, timestamp_ms: int, markers: Iterable[Marker]) -> None:
        for m in markers:
            if m.type is MarkerType.START or (m.type is MarkerType.KEEPALIVE and not m.reason):
                self.deadlines[str(m.message_id)].append((timestamp_ms, timestamp_ms + m.redeliver_after_ms))
            elif m.type is MarkerType.END and m.end_reason is EndReason.ACKED:
                self.acked_ms.setdefault(str(m.message_id), timestamp_ms)

    def deadline_at(self, message_id: str, at_ms: int) -> int | None:
        written = [d for ts, d in self.deadlines.get(message_id, ()) if ts <= at_ms]
        return max(written) if written else None


def late_hand_outs(runs: Iterable[Run], markers: MarkerLog) -> list[tuple[Run, float]]:
    """Runs that began past their message's deadline, each with how late (s)."""
    late = []
    for run in runs:
        at_ms = int(run.t * 1000)
        deadline = markers.deadline_at(run.id, at_ms)
        if deadline is not None and at_ms > deadline:
            late.append((run, (at_ms - deadline) / 1000))
    return late


def late_settles(runs: Iterable[Run], markers: MarkerLog) -> list[float]:
    """For each message run more than once: how long after its first delivery's deadline that delivery's ack was
    appended (positive: the ack landed too late, e.g. held by a failover, and the tracker copied the message)."""
    first: dict[str, Run] = {}
    repeated: set[str] = set()
    for run in runs:
        if run.first in first:
            repeated.add(run.first)
        else:
            first[run.first] = run
    out = []
    for key in repeated:
        run = first[key]
        deadline = markers.deadline_at(run.id, int(run.t * 1000))
        ended = markers.acked_ms.get(run.id)
        if deadline is not None and ended is not None:
            out.append((ended - deadline) / 1000)
    return sorted(out)
