"""What the console knows: everything it read from the topics, folded as it arrives (kmq.console.follower feeds it,
the pages read it under ``lock``). Pure: no Kafka.

A ``Model`` holds one topic set's (a message id is a position in its set's topics, so two sets' ids collide, and a
queue moving between sets has messages in both); ``Models`` holds one per set the console serves, under one lock.

- message lifecycles: kmq.ops.live (the classification ``kmq stats`` and the audit share), forgetting what was acked;
- per-minute series for the charts (kmq.console.series), from the same records;
- the dead letters (kmq.console.letters), the workers and trackers (kmq.console.workers), the control topic's state.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from kmq.console import series as s
from kmq.console.letters import Letter, Letters
from kmq.console.series import Series
from kmq.console.workers import Workers
from kmq.ops.lifecycle import DeadLetter, Key, MessageLife, Record
from kmq.ops.live import Change, LiveLifecycles
from kmq.topic_sets import TopicSet
from kmq.wire import vocabulary as v
from kmq.wire.control import ControlState
from kmq.wire.vocabulary import MarkerEvent as E


@dataclass(slots=True)
class Status:
    """How the following goes: shown on every page."""

    #: The first round (everything on the topics when the console started) is done.
    caught_up: bool = False
    rounds: int = 0
    #: Records read in all, and in the round under way (of how many, while catching up).
    records: int = 0
    round_done: int = 0
    round_total: int = 0
    last_round_ms: int = 0
    last_round_s: float = 0.0
    #: The last round's error ("" when it went well): the pages show what was read before it.
    error: str = ""


class Model:
    """One topic set's messages, dead letters, workers and control state."""

    def __init__(self, at_most_once: frozenset[str] = frozenset(), keep_minutes: int = 180,
                 lock: threading.RLock | None = None) -> None:
        self.lock = threading.RLock() if lock is None else lock
        self.live = LiveLifecycles(at_most_once, forget_acked=True)
        self.series = Series(keep_minutes)
        self.letters = Letters()
        self.workers = Workers()
        self.control = ControlState()
        #: Backlog share of each message not yet forgotten: (entered the backlog ms, left it ms or None).
        self._backlog: dict[Key, tuple[int, int | None]] = {}

    # --- feeding ---------------------------------------------------------------------------------------------------

    def add_markers(self, partition: int, offset: int, at_ms: int, value: bytes | None) -> None:
        self.workers.record(partition, at_ms)
        for marker in self.live.add_markers(value, at_ms, offset):
            d = self.live.fold.deliveries.get(marker.message_id)
            queue = d.queue if d is not None and d.starts else ""
            self.workers.marker(marker, queue, partition, at_ms)
            if d is None or not queue:
                continue
            event = v.marker_event(marker)
            if event is E.ACK and d.events[E.ACK] == 1:
                self.series.count(queue, s.ACKED, at_ms)
                if d.start_ms:
                    self.series.processing(queue, at_ms, at_ms - d.start_ms)
            elif event is E.REDELIVER:
                self.series.count(queue, s.REDELIVERED, at_ms)

    def add_record(self, record: Record) -> None:
        self.live.add_record(record)
        if record.first_id_header is None:
            self.series.count(record.queue, s.SENT, record.timestamp_ms)

    def add_dead_letter(self, letter: Letter, dead: DeadLetter) -> None:
        self.letters.add(letter)
        self.live.add_dead_letter(dead)
        self.series.count(letter.queue, s.DEAD_LETTERED, letter.at_ms)

    def refresh(self, now_ms: int, most: int | None = None) -> list[Change]:
        """Classifies again what the records read since touched (``most`` at a time: see LiveLifecycles)."""
        changes = self.live.refresh(now_ms, most)
        for change in changes:
            self._move_backlog(change, now_ms)
        self.series.prune(now_ms)
        self.workers.forget_idle(now_ms)
        return changes

    def _move_backlog(self, change: Change, now_ms: int) -> None:
        queue = change.key[0]
        old = self._backlog.pop(change.key, None)
        if old is not None:
            self.series.backlog_change(queue, old[0], -1)
            if old[1] is not None:
                self.series.backlog_change(queue, old[1], +1)
        share = _backlog_share(change.new, now_ms) if change.new is not None else None
        if share is None:
            return
        self.series.backlog_change(queue, share[0], +1)
        if share[1] is not None:
            self.series.backlog_change(queue, share[1], -1)
        if change.new is not None and change.new.state != v.ACKED:  # an acked message is forgotten: its share stays
            self._backlog[change.key] = share

    # --- reading ---------------------------------------------------------------------------------------------------

    def queues(self) -> list[str]:
        """Every queue seen on a topic, paused, or with a consumer group."""
        return sorted({*self.live.queues(), *self.letters.queues(), *self.control.paused_until,
                       *self.workers.groups})

    def state_of(self, key: Key) -> str | None:
        return self.live.state_of(key)

    def paused(self, queue: str, now_ms: int) -> int | bool | None:
        """False if the queue takes messages, else until when (ms; None: until resumed)."""
        if not self.control.paused(queue, now_ms):
            return False
        return self.control.paused_until.get(queue)


class Models:
    """A Model per topic set the console serves (in the order given), one lock for all of them, and how the
    following goes. A page takes ``lock`` once and reads any set."""

    def __init__(self, sets: Sequence[TopicSet], at_most_once: frozenset[str] = frozenset(),
                 keep_minutes: int = 180) -> None:
        if not sets:
            raise ValueError("a console serves at least one topic set")
        self.lock = threading.RLock()
        self.status = Status()
        self.sets: dict[str, TopicSet] = {one.name: one for one in sets}
        self._models = {name: Model(at_most_once, keep_minutes, self.lock) for name in self.sets}

    def __getitem__(self, name: str) -> Model:
        return self._models[name]

    def __iter__(self) -> Iterator[tuple[TopicSet, Model]]:
        for name, model in self._models.items():
            yield self.sets[name], model

    def queues(self) -> list[tuple[str, str]]:
        """Every queue of every set, as (queue, set name), by queue (a queue moving between sets is in two)."""
        order = {name: i for i, name in enumerate(self.sets)}
        return sorted(((queue, name) for name, model in self._models.items() for queue in model.queues()),
                      key=lambda found: (found[0], order[found[1]]))

    def sets_of(self, queue: str) -> list[str]:
        """The sets in which the console knows ``queue``."""
        return [name for name, model in self._models.items() if queue in model.queues()]

    def chart(self, queue: str, now_ms: int) -> s.Chart:
        """``queue``'s charts (``series.ALL``: every queue's) summed over the sets."""
        return s.chart([model.series for model in self._models.values()], queue, now_ms)


def _backlog_share(m: MessageLife, now_ms: int) -> tuple[int, int | None] | None:
    """When a message entered the backlog (was enqueued, or its newest waiting record written) and left it (its
    first Start; without one, when it was seen to leave: purged, consumed)."""
    if m.state == v.WAITING:
        return (m.waiting_since_ms, None) if m.waiting_since_ms is not None else None
    if m.enqueued_ms is None:
        return None
    return m.enqueued_ms, max(m.enqueued_ms, m.first_start_ms or now_ms)
