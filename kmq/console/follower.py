"""The Follower: a thread that reads the topics on, round after round, into the console's Models, so a page view
reads memory and never the topics. Each round reads, for each topic set the console serves, what ``kmq stats``
reads, in its order (committed offsets and purge times, markers, messages, dead letters: every copy an End speaks of
is read with it), up to the end offsets seen when the round starts, into that set's Model, then classifies again
what changed (kmq.ops.live). The first round reads everything the topics hold; later ones only what was written
since. A set that cannot be read (its ACLs, its brokers) is said so on every page; the others are still followed.

Every console replica follows on its own: they share nothing but Kafka.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import TypeVar

import structlog
from confluent_kafka import Message as KafkaMessage

from kmq import _kafka, wire
from kmq.config import Config
from kmq.console import topics
from kmq.console.letters import Letter
from kmq.console.model import Model, Models
from kmq.ops import stats
from kmq.topic_sets import TopicSet
from kmq.wire import vocabulary as v

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

#: Records applied to the model at a time: pages wait for the lock at most this long while a backlog is read.
CHUNK = 5_000
#: Messages classified at a time, likewise.
REFRESH_SLICE = 20_000
#: Records read between two classifications in a long round.
CLASSIFY_EVERY = 200_000
#: A set nothing was written to since its queues' committed offsets were last read has them read this often only. A
#: consumer commits as it takes records, and writes their Starts (the next round reads them, then the offsets again);
#: at most once it writes none, so a set with such a queue's records waiting is read every groups round. Each read
#: makes a client per group (kmq._kafka.offsets.committed_of_groups), ~1.5 ms of CPU each: with 100 queues, every 5 s
#: kept an idle console at 3.3% of a core, every 30 s at <1%. Otherwise only a reset by hand is seen this late.
QUIET_OFFSETS_EVERY_S = 30.0
T = TypeVar("T")


class Follower:
    def __init__(self, config: Config, models: Models, interval_s: float = 1.0, groups_every_s: float = 5.0,
                 clock: Callable[[], int] = wire.now_ms) -> None:
        self.config = config
        self.models = models
        self._interval_s = interval_s
        self._groups_every_s = groups_every_s
        self._clock = clock
        self._follows = {name: topics.Follow(config, topic_set, self._progress)
                         for name, topic_set in models.sets.items()}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._groups_at = 0.0
        #: Per set: when its queues' committed offsets were last read, and whether records were read since.
        self._offsets_at: dict[str, float] = {}
        self._written_since: dict[str, bool] = {}
        self.caught_up = threading.Event()

    def start(self) -> Follower:
        self._thread = threading.Thread(target=self._run, name="kmq-console-follower", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.round()
            except Exception as err:  # noqa: BLE001 - the broker away: keep what was read, say so, try again
                log.warning("console_round_failed", error=str(err))
                with self.models.lock:
                    self.models.status.error = str(err)
            self._stop.wait(max(0.0, self._interval_s - (time.monotonic() - started)))

    def round(self) -> None:
        """Reads what was written since the last round, set by set, and classifies again what it touched. A set
        that fails is named in the status (the first round is not done until every set was read once)."""
        started = time.monotonic()
        # Groups are read less often than the topics (a request per queue): older offsets only leave a consumed
        # record waiting a little longer.
        groups_due = time.monotonic() - self._groups_at >= self._groups_every_s or not self.caught_up.is_set()
        read, failed = 0, []
        for topic_set, model in self.models:
            try:
                read += self._read_set(topic_set, model, groups_due)
            except Exception as err:  # noqa: BLE001 - one set's ACLs or topics: the others are still followed
                log.warning("console_set_round_failed", topic_set=topic_set.name, error=str(err))
                failed.append(f"set {topic_set.name}: {err}")
        if groups_due:
            self._groups_at = time.monotonic()
        self._refresh()
        with self.models.lock:
            status = self.models.status
            status.rounds += 1
            status.records += read
            status.round_done = status.round_total = 0
            status.last_round_ms, status.last_round_s = self._clock(), time.monotonic() - started
            status.error = "; ".join(failed)
            status.caught_up = status.caught_up or not failed
        if not failed:
            self.caught_up.set()

    def _read_set(self, topic_set: TopicSet, model: Model, groups_due: bool) -> int:
        config, follow = self.config, self._follows[topic_set.name]
        # Committed offsets before the markers, as kmq stats reads them (a record committed past has its Start read).
        offsets_due = groups_due and self._offsets_due(topic_set.name, model)
        committed = topics.committed_offsets(config, topic_set) if offsets_due else None
        if offsets_due:
            self._offsets_at[topic_set.name], self._written_since[topic_set.name] = time.monotonic(), False
        control = list(follow.records(topic_set.control))
        with model.lock:
            if committed is not None:
                model.live.set_committed(committed)
            for record in control:
                model.control.apply(record.key() or b"", record.value(), record.offset() or 0)
            model.live.set_purged_before(model.control.purged_before)
        read = self._apply(model, follow.records(topic_set.markers), self._marker)
        read += self._apply(model, follow.records(topic_set.messages), self._message)
        read += self._apply(model, follow.records(topic_set.dead_letters), self._dead_letter)
        if read:
            self._written_since[topic_set.name] = True
        if groups_due:
            self._read_groups(topic_set, model, offsets_due)
        return read

    def _offsets_due(self, name: str, model: Model) -> bool:
        """Whether the set's queues' committed offsets may have moved since they were read (QUIET_OFFSETS_EVERY_S)."""
        if self._written_since.get(name, True) or time.monotonic() - self._offsets_at[name] >= QUIET_OFFSETS_EVERY_S:
            return True
        with model.lock:
            return any(model.live.count(q, v.WAITING) for q in self.config.at_most_once_queues)

    def _read_groups(self, topic_set: TopicSet, model: Model, offsets_due: bool) -> None:
        """The groups' members and the tracker's progress; the redrive groups' offsets too when ``offsets_due`` (a
        redrive writes to the set's topics)."""
        config = self.config
        with model.lock:
            queues = model.queues()
            lettered = model.letters.queues()
        by_group = {topic_set.consumer_group(q): q for q in queues}
        groups = topics.describe_groups(config, [*by_group, topic_set.tracker_group])
        ends = topics.markers_ends(config, topic_set)
        redriven = topics.redrive_offsets(config, topic_set, lettered) if offsets_due else {}
        with model.lock:  # a group its coordinator did not describe this time keeps its last description
            model.workers.tracker_group = groups.pop(topic_set.tracker_group, None) or model.workers.tracker_group
            model.workers.groups.update((by_group[g], group) for g, group in groups.items() if g in by_group)
            model.workers.ends = ends
            for queue, offsets in redriven.items():
                model.letters.set_redriven_up_to(queue, offsets)

    def _refresh(self) -> None:
        """Classifies what was read, a slice at a time: pages read in between (a first round classifies every
        message)."""
        now = self._clock()
        for _, model in self.models:
            while True:
                with model.lock:
                    model.refresh(now, REFRESH_SLICE)
                    if not model.live.pending:
                        break

    def _apply(self, model: Model, records: Iterator[KafkaMessage],
               apply: Callable[[Model, KafkaMessage], None]) -> int:
        count = unclassified = 0
        for chunk in _chunks(records, CHUNK):
            with model.lock:
                for record in chunk:
                    apply(model, record)
            count += len(chunk)
            unclassified += len(chunk)
            if unclassified >= CLASSIFY_EVERY:
                # A long read (the first round) classifies as it goes: what is acked is then forgotten (kmq.ops.live),
                # so memory holds the messages still moving, not the whole topics. (Its state is final; a round
                # classifies all again at its end.)
                self._refresh()
                unclassified = 0
        return count

    @staticmethod
    def _marker(model: Model, record: KafkaMessage) -> None:
        model.add_markers(record.partition() or 0, record.offset() or 0, _kafka.record_timestamp_ms(record),
                          record.value())

    @staticmethod
    def _message(model: Model, record: KafkaMessage) -> None:
        model.add_record(stats.to_record(record))

    @staticmethod
    def _dead_letter(model: Model, record: KafkaMessage) -> None:
        dead = stats.to_dead_letter(record)
        model.add_dead_letter(Letter(_kafka.message_id(record), dead.queue, dead.first_id, dead.reason,
                                     dead.timestamp_ms), dead)

    def _progress(self, _topic: str, done: int, total: int) -> None:
        with self.models.lock:
            self.models.status.round_done, self.models.status.round_total = done, total

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        for follow in self._follows.values():
            follow.close()


def _chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield chunk
