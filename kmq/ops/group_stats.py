"""Per message group figures for ``kmq stats --groups``: each group's waiting messages, those in flight, and the
age of its oldest unfinished one, the groups with the largest backlog first. They come from the same classification
as ``kmq stats`` (kmq.ops.lifecycle): a grouped message read by its owner but not yet handed out is *waiting* (its
partition is committed at its group's lowest unfinished message), one handed out and not settled *in flight*."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kmq import wire
from kmq.config import Config
from kmq.ops.lifecycle import Context, MessageLife, classify
from kmq.ops.stats import Scanner, committed_offsets, sets_to_read
from kmq.wire import vocabulary as v

#: States of a group's message that is being worked on (handed out, or back after a release with a delay).
BUSY = (v.IN_FLIGHT, v.DELAYED, v.OVERDUE)


@dataclass(frozen=True, slots=True)
class GroupStats:
    queue: str
    group: str
    waiting: int
    in_flight: int
    oldest_age_s: float
    acked: int


def group_rows(lives: Iterable[MessageLife], now_ms: int, top: int | None = None) -> list[GroupStats]:
    """Per (queue, group): its figures; the ``top`` groups by backlog (waiting, then in flight) of each queue."""
    found: dict[tuple[str, str], list[int]] = {}
    for life in lives:
        if life.group is None:
            continue
        row = found.setdefault((life.queue, life.group), [0, 0, 0, 0])
        since = 0
        if life.state == v.WAITING:
            row[0] += 1
            since = life.waiting_since_ms or life.enqueued_ms or 0
        elif life.state in BUSY:
            row[1] += 1
            since = life.in_flight_since_ms or life.first_start_ms or 0
        elif life.state == v.ACKED:
            row[3] += 1
        if since and (not row[2] or since < row[2]):
            row[2] = since
    rows = [GroupStats(queue, group, waiting, busy, round(max(0, now_ms - oldest) / 1000, 1) if oldest else 0.0,
                       acked)
            for (queue, group), (waiting, busy, oldest, acked) in found.items()]
    rows.sort(key=lambda r: (r.queue, -r.waiting, -r.in_flight, -r.oldest_age_s, r.group))
    if top is None:
        return rows
    kept: dict[str, int] = {}
    out = []
    for r in rows:
        kept[r.queue] = kept.get(r.queue, 0) + 1
        if kept[r.queue] <= top:
            out.append(r)
    return out


def collect_groups(config: Config, queues: list[str] | None = None, top: int | None = None,
                   now_ms: int | None = None, *, topic_sets: list[str] | None = None) -> list[GroupStats]:
    """The groups of every queue (or of these), read from the topics of each set as ``kmq stats`` reads them."""
    now_ms = wire.now_ms() if now_ms is None else now_ms
    lives: list[MessageLife] = []
    for topics in sets_to_read(config, queues, topic_sets):
        with Scanner(config, topics) as scanner:
            scanner.read(now_ms)
            context = Context(now_ms, committed_offsets(config, topics), scanner.control.purged_before,
                              frozenset(config.at_most_once_queues))
            lives += classify(scanner.fold.deliveries, scanner.records, scanner.dead_letters, context).values()
    rows = group_rows(lives, now_ms, top)
    return [r for r in rows if not queues or r.queue in queues]
