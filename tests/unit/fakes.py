"""Fakes behind the consumer's seams (fetch client, marker producer): pure Python, no broker."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME

from kmq.delivery import Delivery
from kmq.wire import MessageId


@dataclass
class FakeRecord:
    """A fetched record as the intake, the Start pipeline and the tracker read a confluent Message."""

    topic_: str
    partition_: int
    offset_: int
    key_: bytes = b"q"
    value_: bytes = b"v"
    error_: object = None
    headers_: list[tuple[str, bytes]] | None = None
    timestamp_ms: int = 1_700_000_000_000

    def topic(self) -> str:
        return self.topic_

    def partition(self) -> int:
        return self.partition_

    def offset(self) -> int:
        return self.offset_

    def key(self) -> bytes:
        return self.key_

    def value(self) -> bytes:
        return self.value_

    def error(self) -> object:
        return self.error_

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self.headers_

    def timestamp(self) -> tuple[int, int]:
        return TIMESTAMP_LOG_APPEND_TIME, self.timestamp_ms


@dataclass(frozen=True)
class FakeStart:
    """What a Message gives a Start entry (a marker_batch.Startable), for codec, writer and tracker tests."""

    message_id: MessageId
    payload: bytes
    record_headers: dict[str, bytes] = field(default_factory=dict)
    delivery_count: int = 1
    first: MessageId | None = None
    enqueued_at_ms: int = 0

    @property
    def first_message_id(self) -> MessageId:
        return self.first or self.message_id


@dataclass(frozen=True)
class Part:
    topic: str
    partition: int


@dataclass
class FakeFetchClient:
    """Like librdkafka: a partition's paused flag is kept when it is unassigned and still set when it comes back."""

    assigned: list[Part] = field(default_factory=list)
    paused: set[Part] = field(default_factory=set)
    pending: list[FakeRecord] = field(default_factory=list)
    on_poll: Callable[[], None] | None = None

    def assign(self, parts: list[Part]) -> None:
        self.assigned += parts

    def unassign(self, parts: list[Part]) -> None:
        self.assigned = [p for p in self.assigned if p not in parts]

    def fetchable(self) -> set[int]:
        return {p.partition for p in self.assigned if p not in self.paused}

    def poll(self, timeout: float) -> FakeRecord | None:
        if self.on_poll is not None:
            self.on_poll()
        got = self.consume(1, 0)
        return got[0] if got else None

    def consume(self, num_messages: int, timeout: float) -> Sequence[FakeRecord]:
        ready = [r for r in self.pending if r.partition_ in self.fetchable()][:num_messages]
        self.pending = [r for r in self.pending if r not in ready]
        return ready

    def pause(self, partitions: list[Any]) -> None:
        self.paused |= set(partitions)

    def resume(self, partitions: list[Any]) -> None:
        self.paused -= set(partitions)

    def assignment(self) -> list[Any]:
        return list(self.assigned)


@dataclass
class Produced:
    topic: str
    value: bytes
    key: bytes | None
    on_done: Callable[[Any, Any], None] | None = None
    delivery: Delivery[MessageId] | None = None
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    on_record: Callable[[Any], None] | None = None


@dataclass
class FakeProducer:
    """Records what is produced; deliveries complete when the test says (``deliver``)."""

    records: list[Produced] = field(default_factory=list)

    def produce(self, topic: str, value: bytes, key: bytes | None, headers: Any = None,
                on_done: Callable[[Any, Any], None] | None = None) -> None:
        self.records.append(Produced(topic, value, key, on_done, headers=list(headers or [])))

    def produce_future(self, topic: str, value: bytes, key: bytes | None, headers: Any = None,
                       on_record: Callable[[Any], None] | None = None) -> Delivery[MessageId]:
        delivery: Delivery[MessageId] = Delivery()
        self.records.append(Produced(topic, value, key, delivery=delivery, on_record=on_record))
        return delivery

    def produce_many(self, topic: str, values: Sequence[bytes], key: bytes | None,
                     on_done: Callable[[Any, Any], None]) -> None:
        for value in values:
            self.produce(topic, value, key, on_done=on_done)

    def deliver(self, error: BaseException | None = None, report: Any = None) -> None:
        """Completes every pending delivery; ``report`` is the delivered record ``on_record`` sees."""
        for record in self.records:
            if record.delivery is not None and not record.delivery.done():
                if error is None and record.on_record is not None:
                    record.on_record(report)
                record.delivery._set(None if error else MessageId(0, 0), error)

    def flush(self, timeout_s: float) -> int:
        return 0
