"""Test helpers that read a whole topic back, decoded, within a time bound."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition

from kmq.wire.marker_batch import decode_record
from kmq.wire.markers import Marker


def read_topic(bootstrap: str, topic: str, *, until: Callable[[list[Message]], bool] | None = None,
               timeout_s: float = 20.0, idle_s: float = 2.0) -> list[Message]:
    """Every record of ``topic`` from the start; stops when ``until`` holds or after ``idle_s`` of silence.
    Partitions are assigned, not subscribed: a broker's group join delay would pass for silence."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    records: list[Message] = []
    deadline = time.monotonic() + timeout_s
    last = time.monotonic()
    try:
        while time.monotonic() < deadline:
            batch = consumer.consume(500, 0.2)
            good = [r for r in batch if r.error() is None]
            records.extend(good)
            if good:
                last = time.monotonic()
            if until is not None and until(records):
                break
            if until is None and records and time.monotonic() - last > idle_s:
                break
    finally:
        consumer.close()
    return records


def read_markers(bootstrap: str, topic: str, *, until: Callable[[list[Marker]], bool] | None = None,
                 timeout_s: float = 20.0) -> list[Marker]:
    """Every marker on ``topic`` in log order, batch records (kmq format) unpacked."""
    cond = None if until is None else (lambda recs: until(_unpack(recs)))
    return _unpack(read_topic(bootstrap, topic, until=cond, timeout_s=timeout_s))


def _unpack(records: list[Message]) -> list[Marker]:
    return [m for r in records for m in decode_record(r.value())]


def wait_for(condition: Callable[[], bool], timeout_s: float = 20.0, interval_s: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval_s)
    return condition()
