"""The Follower: a thread that reads the topics on, round after round, into the console's Model, so a page view
reads memory and never the topics. Each round reads what ``kmq stats`` reads, in its order (committed offsets and
purge times, markers, messages, dead letters: every copy an End speaks of is read with it), up to the end offsets
seen when the round starts, then classifies again what changed (kmq.ops.live). The first round reads everything
the topics hold; later ones only what was written since.

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
from kmq.console.model import Model
from kmq.ops import stats

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

#: Records applied to the model at a time: pages wait for the lock at most this long while a backlog is read.
CHUNK = 5_000
#: Messages classified at a time, likewise.
REFRESH_SLICE = 20_000
#: Records read between two classifications in a long round.
CLASSIFY_EVERY = 200_000
T = TypeVar("T")


class Follower:
    def __init__(self, config: Config, model: Model, interval_s: float = 1.0, groups_every_s: float = 5.0,
                 clock: Callable[[], int] = wire.now_ms) -> None:
        self.config = config
        self.model = model
        self._interval_s = interval_s
        self._groups_every_s = groups_every_s
        self._clock = clock
        self._follow = topics.Follow(config, self._progress)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._groups_at = 0.0
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
                with self.model.lock:
                    self.model.status.error = str(err)
            self._stop.wait(max(0.0, self._interval_s - (time.monotonic() - started)))

    def round(self) -> None:
        """Reads what was written since the last round and classifies again what it touched."""
        started = time.monotonic()
        model, config, topic_set = self.model, self.config, self._follow.topics
        # Read before the markers, as kmq stats does (a record committed past has its Start read), and less often
        # than they are (one request per queue): older offsets only leave a consumed record waiting a little longer.
        groups_due = time.monotonic() - self._groups_at >= self._groups_every_s or not self.caught_up.is_set()
        committed = topics.committed_offsets(config) if groups_due else None
        control = list(self._follow.records(topic_set.control))
        with model.lock:
            if committed is not None:
                model.live.set_committed(committed)
            for record in control:
                model.control.apply(record.key() or b"", record.value(), record.offset() or 0)
            model.live.set_purged_before(model.control.purged_before)
        read = self._apply(self._follow.records(topic_set.markers), self._marker)
        read += self._apply(self._follow.records(topic_set.messages), self._message)
        read += self._apply(self._follow.records(topic_set.dead_letters), self._dead_letter)
        if groups_due:
            self._groups_at = time.monotonic()
            self._read_groups()
        self._refresh()
        with model.lock:
            status = model.status
            status.rounds += 1
            status.records += read
            status.round_done = status.round_total = 0
            status.last_round_ms, status.last_round_s = self._clock(), time.monotonic() - started
            status.error = ""
            status.caught_up = True
        self.caught_up.set()

    def _read_groups(self) -> None:
        config, model = self.config, self.model
        with model.lock:
            queues = model.queues()
            lettered = model.letters.queues()
        groups = topics.describe_groups(config, [config.consumer_group(q) for q in queues] + [config.tracker_group])
        ends = topics.markers_ends(config)
        redriven = topics.redrive_offsets(config, lettered)
        prefix = config.consumer_group("")
        with model.lock:  # a group its coordinator did not describe this time keeps its last description
            model.workers.tracker_group = groups.pop(config.tracker_group, None) or model.workers.tracker_group
            model.workers.groups.update((g[len(prefix):], group) for g, group in groups.items() if g.startswith(prefix))
            model.workers.ends = ends
            for queue, offsets in redriven.items():
                model.letters.set_redriven_up_to(queue, offsets)

    def _refresh(self) -> None:
        """Classifies what was read, a slice at a time: pages read in between (a first round classifies every
        message)."""
        now = self._clock()
        while True:
            with self.model.lock:
                self.model.refresh(now, REFRESH_SLICE)
                if not self.model.live.pending:
                    return

    def _apply(self, records: Iterator[KafkaMessage], apply: Callable[[KafkaMessage], None]) -> int:
        count = unclassified = 0
        for chunk in _chunks(records, CHUNK):
            with self.model.lock:
                for record in chunk:
                    apply(record)
            count += len(chunk)
            unclassified += len(chunk)
            if unclassified >= CLASSIFY_EVERY:
                # A long read (the first round) classifies as it goes: what is acked is then forgotten (kmq.ops.live),
                # so memory holds the messages still moving, not the whole topics. (Its state is final; a round
                # classifies all again at its end.)
                self._refresh()
                unclassified = 0
        return count

    def _marker(self, record: KafkaMessage) -> None:
        self.model.add_markers(record.partition() or 0, record.offset() or 0, _kafka.record_timestamp_ms(record),
                               record.value())

    def _message(self, record: KafkaMessage) -> None:
        self.model.add_record(stats.to_record(record))

    def _dead_letter(self, record: KafkaMessage) -> None:
        dead = stats.to_dead_letter(record)
        self.model.add_dead_letter(Letter(_kafka.message_id(record), dead.queue, dead.first_id, dead.reason,
                                          dead.timestamp_ms), dead)

    def _progress(self, _topic: str, done: int, total: int) -> None:
        with self.model.lock:
            self.model.status.round_done, self.model.status.round_total = done, total

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        self._follow.close()


def _chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield chunk
