"""What each page shows, read from the Model (under its lock) into plain values for the templates. Pure: no Kafka;
nothing here reads a topic, so a page costs the same however much the topics hold."""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from kmq.console import series as s
from kmq.console.letters import ANY, WAITING, Letter, LetterFilter
from kmq.console.model import Model, Models, Status
from kmq.console.workers import Group, Instance, Member
from kmq.ops.lifecycle import Delivery, Key
from kmq.ops.stats import QueueStats, row
from kmq.wire import MessageId
from kmq.wire import vocabulary as v

#: A message past its deadline this long is one no tracker brought back: its tracker (or worker) is unhealthy.
OVERDUE_GRACE_MS = 15_000
#: States a queue page lists messages of: every one of the vocabulary, waiting first.
LISTED_STATES = (v.WAITING, *(state for state in v.STATES if state != v.WAITING))


@dataclass(frozen=True, slots=True)
class QueueRow:
    stats: QueueStats
    rate_in: float
    rate_out: float
    consumers: int | None
    paused_until: int | bool | None


@dataclass(frozen=True, slots=True)
class TrackerPartition:
    partition: int
    owner: Member | None
    committed: int
    end: int
    clock_ms: int
    queues: list[str]
    overdue: int
    late_overdue: int

    @property
    def healthy(self) -> bool:
        return self.owner is not None and not self.late_overdue


@dataclass(frozen=True, slots=True)
class WorkerRow:
    instance: Instance
    held: int
    late: int

    @property
    def healthy(self) -> bool:
        return not self.late


@dataclass(frozen=True, slots=True)
class Health:
    """One topic set's trackers, workers and consumer groups."""

    topic_set: str
    tracker_group: str
    trackers: list[TrackerPartition]
    workers: list[WorkerRow]
    groups: dict[str, Group]
    tracker_members: list[Member]

    @property
    def trackers_healthy(self) -> bool:
        return bool(self.trackers) and all(t.healthy for t in self.trackers)

    @property
    def unhealthy_workers(self) -> int:
        return sum(not w.healthy for w in self.workers)


@dataclass(frozen=True, slots=True)
class HealthSummary:
    """Every served set's health in a few numbers (the overview's cards). A set with no markers partition read
    (its topics not created yet) has nothing to track."""

    sets: list[Health]

    @property
    def partitions(self) -> int:
        return sum(len(h.trackers) for h in self.sets)

    @property
    def unhealthy_partitions(self) -> int:
        return sum(not t.healthy for h in self.sets for t in h.trackers)

    @property
    def tracker_members(self) -> int:
        return sum(len(h.tracker_members) for h in self.sets)

    @property
    def trackers_healthy(self) -> bool:
        return bool(self.partitions) and not self.unhealthy_partitions

    @property
    def workers(self) -> int:
        """Consumer instances (a process consuming queues of several sets is one)."""
        return len({w.instance.instance_id for h in self.sets for w in h.workers})

    @property
    def unhealthy_workers(self) -> int:
        return len({w.instance.instance_id for h in self.sets for w in h.workers if not w.healthy})


@dataclass(frozen=True, slots=True)
class Overview:
    rows: list[QueueRow]
    chart: dict[str, Any]
    health: HealthSummary
    status: Status


def chart_data(chart: s.Chart) -> dict[str, Any]:
    """A chart as console.js draws it (uPlot's columns: the time axis, then each series)."""
    return {"t": chart.minutes, "events": chart.events, "backlog": chart.backlog,
            "processing": {f"p{p}": values for p, values in chart.processing_ms.items()}}


def queue_row(model: Model, queue: str, now_ms: int, topic_set: str) -> QueueRow:
    """``queue``'s figures in one set (a queue moving between sets has a row in each, as in ``kmq stats``)."""
    paused = model.paused(queue, now_ms)
    text = "" if paused is False else ("yes" if paused is None else "until")
    group = model.workers.groups.get(queue)
    return QueueRow(row(queue, model.live.summary(queue), now_ms, text, topic_set),
                    model.series.rate_per_s(queue, s.SENT, now_ms),
                    model.series.rate_per_s(queue, s.ACKED, now_ms) + model.series.rate_per_s(
                        queue, s.DEAD_LETTERED, now_ms),
                    None if group is None else len(group.members), paused)


def overview(models: Models, now_ms: int) -> Overview:
    rows = [queue_row(models[name], q, now_ms, name) for q, name in models.queues()]
    return Overview(rows, chart_data(models.chart(s.ALL, now_ms)),
                    HealthSummary([health(model, now_ms, topic_set.name, topic_set.tracker_group)
                                   for topic_set, model in models]),
                    dataclasses.replace(models.status))


def health(model: Model, now_ms: int, topic_set: str, tracker_group: str) -> Health:
    w = model.workers
    late_by_queue: dict[str, int] = {}
    trackers = []
    for p in sorted(w.ends.end):
        queues = sorted(q for q, parts in w.marker_partitions.items() if p in parts)
        overdue = sum(model.live.count(q, v.OVERDUE) for q in queues)
        late = 0
        for q in queues:
            if q not in late_by_queue:
                late_by_queue[q] = _late_overdue(model, q, now_ms)
            late += late_by_queue[q]
        owner = w.tracker_group.owner(p) if w.tracker_group is not None else None
        trackers.append(TrackerPartition(p, owner, w.ends.committed.get(p, -1), w.ends.end[p], w.clocks.get(p, 0),
                                         queues, overdue, late))
    workers = []
    for instance in sorted(w.instances.values(), key=lambda i: -i.last_seen_ms):
        late = sum(_late(model.live.fold.deliveries.get(mid), now_ms) for mid in instance.held)
        workers.append(WorkerRow(instance, len(instance.held), late))
    members = list(w.tracker_group.members) if w.tracker_group is not None else []
    return Health(topic_set, tracker_group, trackers, workers, dict(w.groups), members)


def _late(d: Delivery | None, now_ms: int) -> bool:
    return d is not None and d.open and d.deadline[1] < now_ms - OVERDUE_GRACE_MS


def _late_overdue(model: Model, queue: str, now_ms: int, most: int = 1_000) -> int:
    late = 0
    for key in islice(model.live.keys(queue, v.OVERDUE), most):
        late += any(_late(d, now_ms) for _, d in model.live.deliveries(key))
    return late


# --- a queue's messages ---------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class MessageRow:
    key: Key
    state: str
    enqueued_ms: int | None
    deliveries: int
    holder: str


@dataclass(frozen=True, slots=True)
class Page:
    rows: list[Any]
    page: int
    size: int
    total: int

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.size))


def messages(model: Model, queue: str, state: str, page: int, size: int) -> Page:
    keys = list(islice(model.live.keys(queue, state), page * size, (page + 1) * size))
    return Page([message_row(model, key) for key in keys], page, size, model.live.count(queue, state))


def message_row(model: Model, key: Key) -> MessageRow:
    life = model.live.lives.get(key)
    holder = ""
    for mid, d in model.live.deliveries(key):
        found = model.workers.holder(mid)
        if d.open and found is not None:
            holder = found.instance_id
    state = model.live.state_of(key) or "unknown"
    return MessageRow(key, state, life.enqueued_ms if life else None, life.max_delivery_count if life else 0, holder)


@dataclass(frozen=True, slots=True)
class MessageView:
    key: Key
    state: str
    row: MessageRow
    deliveries: list[tuple[MessageId, Delivery, str]] = field(default_factory=list)
    record_ids: list[MessageId] = field(default_factory=list)
    letters: list[Letter] = field(default_factory=list)


def message(model: Model, key: Key) -> MessageView | None:
    state = model.live.state_of(key)
    if state is None:
        return None
    deliveries = []
    for mid, d in model.live.deliveries(key):
        holder = model.workers.holder(mid)
        deliveries.append((mid, d, holder.instance_id if holder is not None and d.open else ""))
    return MessageView(key, state, message_row(model, key), deliveries, model.live.record_ids(key),
                       model.letters.of_message(key))


# --- dead letters ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class LetterRow:
    letter: Letter
    #: The set whose dead-letter topic holds it (its id is a position there).
    topic_set: str
    waits: bool
    state: str

    @property
    def ref(self) -> str:
        """What names it across sets: ``SET/PARTITION:OFFSET`` (kmq.console.pages.parse_letter_ref)."""
        return letter_ref(self.topic_set, self.letter.dlq_id)


def letter_ref(topic_set: str, dlq_id: MessageId) -> str:
    return f"{topic_set}/{dlq_id}"


def _selected(models: Models, wanted: LetterFilter, sets: list[str]) -> Iterator[tuple[str, Letter, bool]]:
    """The letters ``wanted`` selects in ``sets`` but for their status, newest first across the sets, each with its
    set and whether it waits."""
    def of(name: str) -> Iterator[tuple[str, Letter, bool]]:
        model = models[name]
        return ((name, letter, waits) for letter, waits in model.letters.select(wanted, model.state_of))

    return heapq.merge(*(of(name) for name in sets), key=lambda found: -found[1].at_ms)


def letters(models: Models, wanted: LetterFilter, sets: list[str], page: int, size: int) -> tuple[Page, int]:
    """A page of the letters ``wanted`` selects in ``sets``, and how many of those it selects but for their status
    wait (what a redrive by this filter puts back): one pass."""
    rows: list[LetterRow] = []
    total = waiting = 0
    first = page * size
    for name, letter, waits in _selected(models, wanted, sets):
        waiting += waits
        if wanted.status == ANY or waits == (wanted.status == WAITING):
            if first <= total < first + size:
                rows.append(_letter_row(models[name], name, letter, waits))
            total += 1
    return Page(rows, page, size, total), waiting


def letter_rows(models: Models, found: list[tuple[str, MessageId]]) -> Page:
    """The letters at ``found`` (a search's: set and id), those the console read."""
    rows = [_letter_row(models[name], name, letter) for name, mid in found
            if (letter := models[name].letters.get(mid)) is not None]
    return Page(rows, 0, max(1, len(rows)), len(rows))


def _letter_row(model: Model, topic_set: str, letter: Letter, waits: bool | None = None) -> LetterRow:
    return LetterRow(letter, topic_set, model.letters.waits(letter, model.state_of) if waits is None else waits,
                     (model.state_of(letter.key) if letter.key else None) or "")


def waiting_letters(models: Models, wanted: LetterFilter, sets: list[str]) -> list[tuple[str, Letter]]:
    """What a redrive by ``wanted`` would put back: the letters it selects in ``sets`` that still wait."""
    return [(name, letter) for name, letter, waits in _selected(models, wanted, sets) if waits]
