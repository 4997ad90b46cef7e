"""A fake ClientFactory (kmq._kafka.factory) for unit tests of the Consumer and RedeliveryTracker facades.

FakeGroupClient behaves like librdkafka where the facades depend on it: rebalance callbacks run inside
``poll``/``consume``; an eager rebalance assigns the whole set, a cooperative one a delta; a partition's paused flag
survives its unassignment; ``close`` may hang (a broker gone). FakeProducerClient delivers at once, or never (a
broker gone): then ``flush`` reports what is left.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kmq._kafka.group_view import GroupView
from kmq.config import Config
from kmq.delivery import Delivery
from kmq.topic_sets import TopicSet
from kmq.wire import MessageId, now_ms
from kmq.wire.control import ControlState
from tests.unit.fakes import FakeRecord

#: A fetched record (confluent_kafka.Message as kmq reads it).
Record = FakeRecord


def _parts(partitions: Sequence[int], topic: str) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in partitions]


@dataclass
class FakeGroupClient:
    """One group member's client. Script it with ``rebalance(...)`` and ``feed(...)``; read what was committed."""

    topic: str
    partitions: int = 3
    eager: bool = False
    callbacks: dict[str, Callable[..., None]] = field(default_factory=dict)
    events: deque[tuple[str, list[int]]] = field(default_factory=deque)
    records: deque[Record] = field(default_factory=deque)
    #: Records fetched before the next rebalance event and returned after its callback, whatever is held then
    #: (librdkafka can, within one poll: the purge of a lost partition's fetched records lands later).
    stale: deque[Record] = field(default_factory=deque)
    held: list[int] = field(default_factory=list)
    paused: set[int] = field(default_factory=set)
    commits: list[dict[int, int]] = field(default_factory=list)
    committed_offsets: dict[int, int] = field(default_factory=dict)
    end_offsets: dict[int, int] = field(default_factory=dict)
    #: Calls that raise KafkaException (a fenced client, a broker gone): method name → times left.
    failing: dict[str, int] = field(default_factory=dict)
    hang_on_close: bool = False
    closed: bool = False
    #: The member id the group coordinator gave this member (None: not in the group).
    member_id: str | None = "member-1"
    lock: threading.Lock = field(default_factory=threading.Lock)

    # --- scripting ---------------------------------------------------------------------------------------

    def rebalance(self, kind: str, partitions: list[int]) -> None:
        """``kind``: assign, revoke or lost; delivered inside the next poll/consume, as librdkafka does."""
        with self.lock:
            self.events.append((kind, partitions))

    def feed(self, records: Sequence[Record]) -> None:
        with self.lock:
            self.records.extend(records)

    def _maybe_fail(self, name: str) -> None:
        left = self.failing.get(name, 0)
        if left:
            self.failing[name] = left - 1
            raise KafkaException(KafkaError(KafkaError._STATE, f"fake {name} failed"))

    # --- the client's calls ------------------------------------------------------------------------------

    def subscribe(self, topics: list[str], on_assign: Callable[..., None] | None = None,
                  on_revoke: Callable[..., None] | None = None, on_lost: Callable[..., None] | None = None) -> None:
        self.callbacks = {"assign": on_assign or (lambda *a: None), "revoke": on_revoke or (lambda *a: None),
                          "lost": on_lost or (lambda *a: None)}

    def _run_events(self) -> None:
        while True:
            with self.lock:
                if not self.events:
                    return
                kind, partitions = self.events.popleft()
            self.callbacks[kind](self, _parts(partitions, self.topic))

    def poll(self, timeout: float = -1) -> Record | None:
        got = self.consume(1, timeout)
        return got[0] if got else None

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Record]:
        self._run_events()
        with self.lock:
            ready = [r for r in self.records if r.partition_ in self.held and r.partition_ not in self.paused]
            ready = [*self.stale, *ready][:num_messages]
            for record in ready:
                if record in self.stale:
                    self.stale.remove(record)
                else:
                    self.records.remove(record)
        if not ready:
            time.sleep(min(max(timeout, 0), 0.01))
        return ready

    def assign(self, partitions: list[TopicPartition]) -> None:
        self._maybe_fail("assign")
        self.held = [tp.partition for tp in partitions]

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self._maybe_fail("incremental_assign")
        self.held += [tp.partition for tp in partitions if tp.partition not in self.held]

    def unassign(self) -> None:
        self._maybe_fail("unassign")
        self.held = []

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        self._maybe_fail("incremental_unassign")
        gone = {tp.partition for tp in partitions}
        self.held = [p for p in self.held if p not in gone]

    def assignment(self) -> list[TopicPartition]:
        self._maybe_fail("assignment")
        return _parts(self.held, self.topic)

    def pause(self, partitions: list[TopicPartition]) -> None:
        self._maybe_fail("pause")
        self.paused |= {tp.partition for tp in partitions}

    def resume(self, partitions: list[TopicPartition]) -> None:
        self._maybe_fail("resume")
        self.paused -= {tp.partition for tp in partitions}

    def commit(self, message: Any = None, offsets: list[TopicPartition] | None = None,
               asynchronous: bool = True) -> list[TopicPartition]:
        self._maybe_fail("commit")
        given = offsets or []
        self.commits.append({tp.partition: tp.offset for tp in given})
        self.committed_offsets.update({tp.partition: tp.offset for tp in given})
        return given

    def committed(self, partitions: list[TopicPartition], timeout: float = -1) -> list[TopicPartition]:
        self._maybe_fail("committed")
        return [TopicPartition(tp.topic, tp.partition, self.committed_offsets.get(tp.partition, -1001))
                for tp in partitions]

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float = -1,
                              cached: bool = False) -> tuple[int, int]:
        self._maybe_fail("get_watermark_offsets")
        return 0, self.end_offsets.get(partition.partition, 0)

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        return _metadata(topic or self.topic, self.partitions)

    def memberid(self) -> str | None:
        return self.member_id

    def close(self) -> None:
        self.closed = True
        while self.hang_on_close:
            time.sleep(0.05)


def _metadata(topic: str, partitions: int) -> Any:
    return SimpleNamespace(topics={topic: SimpleNamespace(error=None, partitions=dict.fromkeys(range(partitions)))})


@dataclass
class Produced:
    topic: str
    value: bytes
    key: bytes | None
    headers: list[tuple[str, bytes]]
    partition: int | None


@dataclass
class FakeProducerClient:
    """Delivers every record at once with offsets counting up per topic, or (``broker_gone``) never."""

    broker_gone: bool = False
    records: list[Produced] = field(default_factory=list)
    undelivered: int = 0
    closed: bool = False
    _offsets: dict[str, int] = field(default_factory=dict)
    #: Called with each delivered record (FakeClients feeds those of the group's topic back to the group client).
    loopback: Callable[[Record], None] | None = None

    def produce(self, topic: str, value: bytes, key: bytes | None, headers: Sequence[tuple[str, bytes]] | None = None,
                on_done: Callable[[Any, Any], None] | None = None, partition: int | None = None) -> None:
        self.records.append(Produced(topic, value, key, list(headers or []), partition))
        if self.broker_gone:
            self.undelivered += 1
            return
        offset = self._offsets.get(topic, 0)
        self._offsets[topic] = offset + 1
        record = Record(topic, partition or 0, offset, key, value, headers_=list(headers or []) or None,
                        timestamp_ms=now_ms())
        if self.loopback is not None:
            self.loopback(record)
        if on_done is not None:
            on_done(None, record)

    def produce_future(self, topic: str, value: bytes, key: bytes | None,
                       headers: Sequence[tuple[str, bytes]] | None = None,
                       on_record: Callable[[Any], None] | None = None) -> Delivery[MessageId]:
        delivery: Delivery[MessageId] = Delivery()

        def done(err: Any, record: Record) -> None:
            if on_record is not None:
                on_record(record)
            delivery._set(MessageId(record.partition(), record.offset()), None)

        self.produce(topic, value, key, headers, done)
        return delivery

    def produce_many(self, topic: str, values: Sequence[bytes], key: bytes | None,
                     on_done: Callable[[Any, Any], None]) -> None:
        for value in values:
            self.produce(topic, value, key, on_done=on_done)

    def flush(self, timeout_s: float) -> int:
        return self.undelivered

    def close(self, timeout_s: float = 10.0) -> int:
        self.closed = True
        return self.undelivered

    def stalled_s(self) -> float:
        return 0.0

    @property
    def client(self) -> Any:
        return SimpleNamespace(list_topics=lambda topic=None, timeout=-1: _metadata(topic or "", 1))

    def to(self, topic: str) -> list[Produced]:
        return [r for r in self.records if r.topic == topic]


@dataclass
class FakeControl:
    state: ControlState = field(default_factory=ControlState)
    available: bool = False
    topic: str = "m.control"

    def start(self) -> FakeControl:
        return self

    def close(self) -> None:
        pass


@dataclass
class FakeReaderClient:
    """A messages topic to read back from (the tracker's RecordReader): ``records[partition]`` in offset order,
    the first ``low[partition]`` offsets deleted; reading up to a partition's end says EOF once, as librdkafka's
    ``enable.partition.eof`` does, and reading goes on there (records added later come), reading outside [low, end]
    an auto-offset-reset error. ``served_end[partition]``: the high watermark a new leader serves before it catches
    up (reads stop and say EOF there, while the log goes on). ``fail`` makes every watermark query and read fail (a
    broker gone)."""

    records: dict[int, list[Record]] = field(default_factory=dict)
    low: dict[int, int] = field(default_factory=dict)
    served_end: dict[int, int] = field(default_factory=dict)
    eof_at: dict[int, int] = field(default_factory=dict)
    fail: bool = False
    closed: bool = False
    positions: dict[int, int] = field(default_factory=dict)
    seeks: list[tuple[int, int]] = field(default_factory=list)

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float = -1,
                              cached: bool = False) -> tuple[int, int]:
        if self.fail:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        held = self.records.get(partition.partition, [])
        return self.low.get(partition.partition, 0), (held[-1].offset() + 1) if held else 0

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.positions = {tp.partition: tp.offset for tp in partitions}
        self.eof_at = {}

    def seek(self, partition: TopicPartition) -> None:
        self.seeks.append((partition.partition, partition.offset))
        self.positions[partition.partition] = partition.offset
        self.eof_at.pop(partition.partition, None)

    def unassign(self) -> None:
        self.positions = {}

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Record]:
        if self.fail:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        out: list[Record] = []
        for p, at in list(self.positions.items()):
            if at < 0:
                continue
            low, end = self.get_watermark_offsets(TopicPartition("", p))
            if at < low or at > end:  # librdkafka with auto.offset.reset=error
                out.append(Record("", p, -1, error_=KafkaError(KafkaError._AUTO_OFFSET_RESET, "out of range")))
                self.positions[p] = -1
                continue
            served = self.served_end.get(p, end)
            ahead = [r for r in self.records.get(p, []) if at <= r.offset() < served][:num_messages]
            out += ahead
            if ahead:
                self.positions[p] = at = ahead[-1].offset() + 1
            if len(ahead) < num_messages and self.eof_at.get(p) != at:
                out.append(Record(self.records[p][0].topic() if self.records.get(p) else "", p, served,
                                  error_=KafkaError(KafkaError._PARTITION_EOF)))
                self.eof_at[p] = at
        return out

    def close(self) -> None:
        self.closed = True


#: Where records a member wrote to its own group's topic start (above any offset a test feeds).
LOOPBACK_OFFSET = 1_000_000


class FakeGroupAdmin:
    """What the group coordinator says about a group (kmq._kafka.group_view.GroupAdmin); None: it cannot say."""

    def __init__(self, view: GroupView | None = None) -> None:
        self.answer = view
        self.asked = 0

    def view(self, group: str, topic: str, timeout_s: float) -> GroupView | None:
        self.asked += 1
        return self.answer

    def waiting(self, group: str, topic: str, timeout_s: float) -> int | None:
        return None


@dataclass
class FakeClients:
    """The ClientFactory: hands out the given group client, and one FakeProducerClient per producer asked for."""

    group: FakeGroupClient
    broker_gone: bool = False
    producers: list[FakeProducerClient] = field(default_factory=list)
    control_state: ControlState = field(default_factory=ControlState)
    #: What ``retention`` answers: None (Starts copy their payloads) or a kmq._kafka.retention.Retention.
    retention_answer: Any = None
    reading: FakeReaderClient = field(default_factory=FakeReaderClient)
    admin: FakeGroupAdmin = field(default_factory=FakeGroupAdmin)

    def group_consumer(self, settings: dict[str, Any]) -> FakeGroupClient:
        self.settings = settings
        return self.group

    def producer(self, settings: dict[str, Any], name: str, warm_topic: str | None = None) -> FakeProducerClient:
        self.producers.append(FakeProducerClient(broker_gone=self.broker_gone, loopback=self._loop_back))
        return self.producers[-1]

    def _loop_back(self, record: Record) -> None:
        """What a member writes to its group's topic it reads back (a tracker's clock probes and Ends), after the
        records the test fed (offsets from LOOPBACK_OFFSET on, so they never collide)."""
        if record.topic_ == self.group.topic:
            self.group.feed([replace(record, offset_=record.offset_ + LOOPBACK_OFFSET)])

    def control(self, config: Config, topics: TopicSet,
                on_change: Callable[[ControlState], None] | None) -> FakeControl:
        return FakeControl(self.control_state)

    def retention(self, config: Config, topics: TopicSet) -> Any:
        return self.retention_answer

    def reader(self, settings: dict[str, Any]) -> FakeReaderClient:
        return self.reading

    def group_admin(self, config: Config) -> FakeGroupAdmin:
        return self.admin

    def produced(self, topic: str) -> list[Produced]:
        return [r for p in self.producers for r in p.to(topic)]


class RejoinClients(FakeClients):
    """Hands out a new group client each time one is asked for (a member replacing its consumer)."""

    def __init__(self, *groups: FakeGroupClient) -> None:
        super().__init__(groups[0])
        self.handed: list[FakeGroupClient] = []
        self._next = list(groups)

    def group_consumer(self, settings: dict[str, Any]) -> FakeGroupClient:
        self.settings = settings
        self.handed.append(self._next.pop(0))
        return self.handed[-1]


def receive(consumer: Any, n: int, timeout_s: float = 5.0) -> list[Any]:
    """Up to ``n`` messages from a Consumer on fake clients, within ``timeout_s``."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        got += consumer.receive_many(n - len(got), timeout=0.1)
    return got


@contextmanager
def running(tracker: Any) -> Iterator[Any]:
    """A RedeliveryTracker's ``run()`` on a thread for the body of the ``with``; stopped (and joined) after it."""
    thread = threading.Thread(target=tracker.run, daemon=True)
    thread.start()
    try:
        yield tracker
    finally:
        tracker.stop()
        thread.join(10)
        assert not thread.is_alive(), "the tracker did not stop"
