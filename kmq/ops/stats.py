"""Queue statistics read straight from Kafka (no tracker endpoint needed), in the vocabulary of
kmq.wire.vocabulary: how many messages are in each state, and the counters.

What is read, in this order (each source is read after what it depends on, so nothing is caught half-way): the
queues' committed offsets and purge times, then the markers topic, then the messages topic (a tracker's copy is
written before its End, so every End read has its copy read too), then the dead-letter topic. Each topic is read to
the end offsets seen when its replay starts, never cut short; a long replay reports progress, and one that stops
making progress is an error, never a silently partial answer. kmq.ops.lifecycle then classifies every message.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import structlog
from confluent_kafka import KafkaException
from confluent_kafka import Message as KafkaMessage
from confluent_kafka.admin import AdminClient

from kmq import _kafka, wire
from kmq._kafka.offsets import committed_of_groups, offsets_only
from kmq._kafka.topic_replay import Progress, TopicReplay
from kmq.config import Config
from kmq.errors import KafkaClientError, TopicError
from kmq.ops import lifecycle
from kmq.ops.lifecycle import Context, DeadLetter, DeliveryFold, QueueSummary, Record, classify, summarise
from kmq.topic_sets import DEFAULT_SET, TopicSet
from kmq.wire import vocabulary as v
from kmq.wire.control import ControlState

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

def committed_offsets(config: Config, topics: TopicSet, queues: list[str] | None = None) -> dict[str, dict[int, int]]:
    """Queue → partition → committed offset on the set's messages topic, for every queue's consumer group in the set
    (or these queues')."""
    timeout_s = config.connect_timeout_ms / 1000
    prefix = topics.consumer_group("")  # a queue's group is the prefix and the queue
    if queues is None:
        admin = AdminClient(_kafka.base_settings(config, "kmq-stats-admin"))
        try:
            listed = admin.list_consumer_groups(request_timeout=timeout_s).result(timeout_s)
        except TimeoutError:  # the future's own timeout: a bare TimeoutError (a traceback and no word of Kafka)
            raise KafkaClientError(f"cannot reach Kafka at {config.bootstrap_servers} within {timeout_s:g}s "
                                   "(asking for the queues' consumer groups)", retriable=True) from None
        except KafkaException as exc:
            raise _kafka.to_kmq_error(exc, "the queues' consumer groups") from exc
        groups = [g.group_id for g in listed.valid if g.group_id.startswith(prefix)]
    else:
        groups = [topics.consumer_group(q) for q in queues]
    committed = committed_of_groups(config, "kmq-stats-offsets", groups, topics.messages)
    return {group[len(prefix):]: offsets_only(offsets) for group, offsets in committed.items() if offsets}


def control_state(config: Config, topics: TopicSet) -> ControlState:
    """The queues' pauses and purge times, from the control topic (empty without one)."""
    state = ControlState()
    try:
        with TopicReplay(config, topics, topics.control) as replay:
            for record in replay.records():
                state.apply(record.key() or b"", record.value())
    except TopicError:
        pass  # a deployment without a control topic: nothing was ever paused or purged
    return state


def purge_times(config: Config, topics: TopicSet) -> dict[str, int]:
    """Queue → its purge time (messages enqueued before it are purged), from the control topic."""
    return control_state(config, topics).purged_before


def fold_markers(fold: DeliveryFold, records: Iterable[KafkaMessage]) -> None:
    for record in records:
        fold.add_record(record.value(), _kafka.record_timestamp_ms(record), record.offset() or 0)


def to_record(record: KafkaMessage) -> Record:
    return lifecycle.to_record(_kafka.message_id(record), record.key(), _kafka.record_timestamp_ms(record),
                               _kafka.header_dict(record), record.value())


def to_dead_letter(record: KafkaMessage) -> DeadLetter:
    return lifecycle.to_dead_letter(record.key(), _kafka.header_dict(record), _kafka.record_timestamp_ms(record))


class Scanner:
    """The topics read into message lifecycles; ``read()`` catches up with what was written since the last call and
    classifies every message again (``kmq stats``, the demo)."""

    def __init__(self, config: Config, topics: TopicSet, progress: Progress | None = None) -> None:
        self._config = config
        self._topics = topics
        self.fold = DeliveryFold()
        self.records: list[Record] = []
        self.dead_letters: list[DeadLetter] = []
        self._replays = [TopicReplay(config, topics, topic, progress)
                         for topic in (topics.markers, topics.messages, topics.dead_letters)]
        #: The control topic as last read (pauses and purges).
        self.control = ControlState()

    def read(self, now_ms: int | None = None, keep_ids: bool = False) -> dict[str, QueueSummary]:
        config = self._config
        committed = committed_offsets(config, self._topics)
        self.control = control_state(config, self._topics)
        purges = self.control.purged_before
        markers, messages, dead = self._replays
        fold_markers(self.fold, markers.records())
        self.records.extend(map(to_record, messages.records()))
        self.dead_letters.extend(map(to_dead_letter, dead.records()))
        context = Context(wire.now_ms() if now_ms is None else now_ms, committed, purges,
                          frozenset(config.at_most_once_queues))
        return summarise(classify(self.fold.deliveries, self.records, self.dead_letters, context).values(), keep_ids)

    def close(self) -> None:
        for replay in self._replays:
            replay.close()

    def __enter__(self) -> Scanner:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class QueueStats:
    """One queue's row of ``kmq stats``: messages per state, then counters (kmq.wire.vocabulary defines each)."""

    queue: str
    #: "yes" (until resumed), "until <ISO time>", or "" when the queue takes messages (kmq pause/resume).
    paused: str
    waiting: int
    oldest_waiting_age_s: float
    in_flight: int
    oldest_in_flight_age_s: float
    delayed: int
    overdue: int
    acked: int
    dead_lettered: int
    rejected: int
    expired: int
    purged: int
    consumed: int
    ended_by_go: int
    vanished: int
    produced: int
    delivered: int
    released: int
    returned: int
    redelivered: int
    recovered: int
    go_redelivered: int
    #: Duplicate sends never handed out (docs/concepts/dedup.md).
    deduplicated: int = 0
    #: The topic set these messages are in (a queue moving between sets has a row in each).
    topic_set: str = DEFAULT_SET


def collect(config: Config, queues: list[str] | None = None, progress: Progress | None = None,
            now_ms: int | None = None, *, topic_sets: list[str] | None = None) -> list[QueueStats]:
    """One row per queue and topic set: every queue seen on any topic of each set (``topic_sets``, default every
    set), or each of ``queues`` in every set its messages may be in (its own, and the one it moves from), or in
    each of ``topic_sets`` when both are given."""
    now_ms = wire.now_ms() if now_ms is None else now_ms
    rows: list[QueueStats] = []
    for topics in sets_to_read(config, queues, topic_sets):
        with Scanner(config, topics, progress) as scanner:
            summaries = scanner.read(now_ms)
            control = scanner.control
        if queues:
            names = [q for q in queues if topic_sets or topics in config.reading_sets(q)]
        else:
            names = sorted({*summaries, *(q for q in control.paused_until if control.paused(q, now_ms))})
        rows += [row(name, summaries.get(name) or QueueSummary(), now_ms, _paused(control, name, now_ms),
                     topics.name) for name in names]
    order = {s.name: i for i, s in enumerate(config.all_topic_sets)}
    return sorted(rows, key=lambda r: (r.queue, order[r.topic_set]))


def sets_to_read(config: Config, queues: list[str] | None, topic_sets: list[str] | None) -> list[TopicSet]:
    """The sets ``collect`` reads."""
    if topic_sets:
        return [config.topic_set(name) for name in topic_sets]
    if queues:
        return list(dict.fromkeys(s for q in queues for s in config.reading_sets(q)))
    return list(config.all_topic_sets)


def _paused(control: ControlState, queue: str, now_ms: int) -> str:
    if not control.paused(queue, now_ms):
        return ""
    until = control.paused_until.get(queue)
    return "yes" if until is None else f"until {wire.datetime_from_ms(until).isoformat(timespec='seconds')}"


def row(queue: str, summary: QueueSummary, now_ms: int, paused: str = "", topic_set: str = DEFAULT_SET) -> QueueStats:
    def age(oldest_ms: int) -> float:
        return round(max(0.0, (now_ms - oldest_ms) / 1000), 1) if oldest_ms else 0.0

    s, c = summary.states, summary.counters
    return QueueStats(queue, paused, s[v.WAITING], age(summary.oldest_waiting_ms), s[v.IN_FLIGHT],
                      age(summary.oldest_in_flight_ms), s[v.DELAYED], s[v.OVERDUE], s[v.ACKED], s[v.DEAD_LETTERED],
                      c[v.REJECTED], s[v.EXPIRED], s[v.PURGED], s[v.CONSUMED], s[v.ENDED_BY_GO], s[v.VANISHED],
                      c[v.PRODUCED], c[v.DELIVERED], c[v.RELEASED], c[v.RETURNED], c[v.REDELIVERED], c[v.RECOVERED],
                      c[v.GO_REDELIVERED], deduplicated=s[v.DEDUPLICATED], topic_set=topic_set)
