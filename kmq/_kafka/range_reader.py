"""Reading one partition back over a span of time: from the first record at or after a timestamp up to an offset.

A consumer that takes a partition over rebuilds its dedup window this way (kmq.client.consumer.deduplicator): it
reads the last window of the partition's log before the first record it must decide. The reader is assigned, never
subscribed, so no group join delays it; what the broker cannot give within the timeout is an error, never a window
silently cut short.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any, Protocol

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka import Message as KafkaMessage

from kmq._kafka.errors import client_error, to_kmq_error
from kmq.errors import KafkaClientError

#: Records asked for per consume call.
BATCH = 5000


class RangeClient(Protocol):
    """The calls a range read makes (a confluent_kafka.Consumer made with ``reader_settings``)."""

    def offsets_for_times(self, partitions: list[Any], timeout: float = ...) -> list[Any]: ...
    def assign(self, partitions: list[Any]) -> None: ...
    def consume(self, num_messages: int = ..., timeout: float = ...) -> list[Any]: ...


def records_since(client: RangeClient, topic: str, partition: int, since_ms: int, until_offset: int,
                  timeout_s: float, stopping: threading.Event | None = None) -> Iterator[KafkaMessage]:
    """Every record of ``topic``/``partition`` from the first whose timestamp is at or after ``since_ms`` up to
    ``until_offset`` (excluded), in offset order. KafkaClientError when no record comes for ``timeout_s`` before the
    range's end, or the partition ends before it; stops early (without error) once ``stopping`` is set."""
    try:
        found = client.offsets_for_times([TopicPartition(topic, partition, max(0, since_ms))], timeout=timeout_s)
    except KafkaException as exc:
        raise to_kmq_error(exc, f"offset of time {since_ms} in {topic}[{partition}]") from exc
    start = found[0].offset if found else -1
    if start < 0 or start >= until_offset:  # no record since then, or none before the end
        return
    client.assign([TopicPartition(topic, partition, start)])
    position = start
    last_progress = time.monotonic()
    while position < until_offset:
        if stopping is not None and stopping.is_set():
            return
        batch = client.consume(BATCH, 0.2)
        if not batch:
            if time.monotonic() - last_progress > timeout_s:
                raise KafkaClientError(f"reading {topic}[{partition}] back from offset {position} to {until_offset}: "
                                       f"no record for {timeout_s:.0f}s", retriable=True)
            continue
        last_progress = time.monotonic()
        for record in batch:
            err = record.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    if (record.offset() or 0) >= until_offset:
                        return  # the range ends at the partition's end
                    raise KafkaClientError(f"{topic}[{partition}] ends at {record.offset()}, before offset "
                                           f"{until_offset} it was asked to read to", retriable=True)
                raise client_error(err, f"reading {topic}[{partition}] back")
            offset = record.offset() or 0
            if offset >= until_offset:
                return
            position = offset + 1
            yield record
