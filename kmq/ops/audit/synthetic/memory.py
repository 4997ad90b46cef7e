"""Synthetic topics kept in memory: what a Sink was given, with the offsets Kafka would have assigned."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import NamedTuple

from kmq.ops import lifecycle
from kmq.ops.audit.synthetic.outcome import Outcome
from kmq.ops.audit.synthetic.sink import Headers
from kmq.wire import MessageId


class RawRecord(NamedTuple):
    """One record of a topic as its reader sees it."""

    partition: int
    offset: int
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int


@dataclass(slots=True)
class MemorySink:
    messages: list[RawRecord] = field(default_factory=list)
    markers: list[RawRecord] = field(default_factory=list)
    dead_letters: list[RawRecord] = field(default_factory=list)
    _next: dict[tuple[str, int], int] = field(default_factory=lambda: defaultdict(int))

    def _append(self, into: list[RawRecord], topic: str, partition: int, key: bytes, value: bytes,
                headers: Headers, timestamp_ms: int) -> MessageId:
        offset = self._next[(topic, partition)]
        self._next[(topic, partition)] = offset + 1
        into.append(RawRecord(partition, offset, key, value, tuple(headers), timestamp_ms))
        return MessageId(partition, offset)

    def message(self, partition: int, key: bytes, value: bytes, headers: Headers, timestamp_ms: int) -> MessageId:
        return self._append(self.messages, "messages", partition, key, value, headers, timestamp_ms)

    def marker(self, partition: int, key: bytes, value: bytes, timestamp_ms: int) -> None:
        self._append(self.markers, "markers", partition, key, value, [], timestamp_ms)

    def dead_letter(self, key: bytes, value: bytes, headers: Headers, timestamp_ms: int) -> None:
        self._append(self.dead_letters, "dead", 0, key, value, headers, timestamp_ms)


def classify(sink: MemorySink, outcome: Outcome, at_most_once: frozenset[str],
             window: lifecycle.Window | None = None) -> dict[lifecycle.Key, lifecycle.MessageLife]:
    """What ``kmq stats`` would say of these topics: the Python classification, fed as stats feeds it."""
    fold = lifecycle.DeliveryFold()
    for r in sink.markers:
        fold.add_record(r.value, r.timestamp_ms, r.offset)
    records = [lifecycle.to_record(MessageId(r.partition, r.offset), r.key, r.timestamp_ms, dict(r.headers), r.value)
               for r in sink.messages]
    letters = [lifecycle.to_dead_letter(r.key, dict(r.headers), r.timestamp_ms) for r in sink.dead_letters]
    context = lifecycle.Context(outcome.now_ms, outcome.committed, outcome.purged_before, at_most_once, window)
    return lifecycle.classify(fold.deliveries, records, letters, context)
