"""Per-minute series of each queue (and of all queues, under ``ALL``) for the console's charts: events counted by
the minute they were written in, the backlog's changes, and processing times as log-bucket histograms, so a chart
of the last hour costs the same with a thousand messages or a million. Pure: no Kafka.

Minutes older than ``keep_minutes`` are dropped, but for the backlog, whose changes are summed into a base: the
backlog at a minute is the base plus every change up to it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

#: All queues together.
ALL = ""
SENT, ACKED, REDELIVERED, DEAD_LETTERED = "sent", "acked", "redelivered", "dead_lettered"
EVENTS = (SENT, ACKED, REDELIVERED, DEAD_LETTERED)
#: Processing-time buckets: bucket ``i`` holds durations up to ``BASE_MS * GROWTH ** i`` (1 ms to about a day).
BASE_MS, GROWTH, BUCKETS = 1.0, 1.25, 80
PERCENTILES = (50, 95, 99)
MINUTE_MS = 60_000


def minute(at_ms: int) -> int:
    return at_ms // MINUTE_MS


def bucket(duration_ms: int) -> int:
    if duration_ms <= BASE_MS:
        return 0
    return min(BUCKETS - 1, math.ceil(math.log(duration_ms / BASE_MS, GROWTH)))


def bucket_upper_ms(index: int) -> float:
    return BASE_MS * GROWTH ** index


@dataclass(slots=True)
class _Queue:
    events: dict[str, dict[int, int]] = field(default_factory=lambda: {name: defaultdict(int) for name in EVENTS})
    backlog: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    backlog_base: int = 0
    durations: dict[int, dict[int, int]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(int)))


@dataclass(frozen=True, slots=True)
class Chart:
    """One queue's last minutes, oldest first: ``minutes`` are epoch seconds of each minute's start."""

    minutes: list[int]
    events: dict[str, list[int]]
    backlog: list[int]
    #: Percentile -> per minute, the processing time in ms (None: no ack in that minute).
    processing_ms: dict[int, list[float | None]]


class Series:
    def __init__(self, keep_minutes: int = 180) -> None:
        self._keep = keep_minutes
        self._queues: dict[str, _Queue] = defaultdict(_Queue)
        self._oldest = 0  # the oldest minute kept

    def count(self, queue: str, name: str, at_ms: int, n: int = 1) -> None:
        m = minute(at_ms)
        if m < self._oldest or not n:
            return
        for q in (queue, ALL):
            self._queues[q].events[name][m] += n

    def backlog_change(self, queue: str, at_ms: int, delta: int) -> None:
        m = minute(at_ms)
        for q in (queue, ALL):
            s = self._queues[q]
            if m < self._oldest:
                s.backlog_base += delta
            else:
                s.backlog[m] += delta

    def processing(self, queue: str, at_ms: int, duration_ms: int) -> None:
        m = minute(at_ms)
        if m < self._oldest:
            return
        b = bucket(max(0, duration_ms))
        for q in (queue, ALL):
            self._queues[q].durations[m][b] += 1

    def rate_per_s(self, queue: str, name: str, now_ms: int, last: int = 5) -> float:
        """Events per second over the last ``last`` whole minutes (the current one not counted)."""
        found = self._queues.get(queue)
        if found is None:
            return 0.0
        counts = found.events[name]
        now = minute(now_ms)
        return sum(counts.get(m, 0) for m in range(now - last, now)) / (60 * last)

    def prune(self, now_ms: int) -> None:
        """Drops minutes past ``keep_minutes`` (the backlog's changes go into its base)."""
        oldest = minute(now_ms) - self._keep
        if oldest <= self._oldest:
            return
        self._oldest = oldest
        for s in self._queues.values():
            for counts in s.events.values():
                for m in [m for m in counts if m < oldest]:
                    del counts[m]
            for m in [m for m in s.backlog if m < oldest]:
                s.backlog_base += s.backlog.pop(m)
            for m in [m for m in s.durations if m < oldest]:
                del s.durations[m]

    def chart(self, queue: str, now_ms: int, minutes: int = 60) -> Chart:
        return chart([self], queue, now_ms, minutes)


def chart(many: Sequence[Series], queue: str, now_ms: int, minutes: int = 60) -> Chart:
    """``queue``'s last ``minutes`` in the sum of ``many`` series (the console keeps one per topic set: a moving
    queue's, or all queues', are charted across them, percentiles from the merged histograms)."""
    parts = [found for series in many if (found := series._queues.get(queue)) is not None]
    last = minute(now_ms)
    span = range(last - minutes + 1, last + 1)
    backlog, level = [], sum(p.backlog_base + sum(d for m, d in p.backlog.items() if m < span[0]) for p in parts)
    for m in span:
        level += sum(p.backlog.get(m, 0) for p in parts)
        backlog.append(level)
    processing: dict[int, list[float | None]] = {p: [] for p in PERCENTILES}
    for m in span:
        hist: dict[int, int] = defaultdict(int)
        for part in parts:
            for index, n in part.durations.get(m, {}).items():
                hist[index] += n
        for p in PERCENTILES:
            processing[p].append(_percentile(hist, p) if hist else None)
    return Chart([m * 60 for m in span],
                 {name: [sum(p.events[name].get(m, 0) for p in parts) for m in span] for name in EVENTS},
                 backlog, processing)


def _percentile(hist: dict[int, int], p: int) -> float:
    """The upper bound of the bucket holding the ``p``-th percentile."""
    rank = math.ceil(sum(hist.values()) * p / 100)
    seen = 0
    for index in sorted(hist):
        seen += hist[index]
        if seen >= rank:
            return round(bucket_upper_ms(index), 1)
    return round(bucket_upper_ms(max(hist)), 1)
