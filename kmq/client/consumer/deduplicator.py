"""Deduplicator: the consumer's part that keeps duplicate sends from handlers (docs/concepts/dedup.md).

The consumer calls it from two places, and nowhere else:
1. ``screen(records)`` where its queue's records become Starts: each record with a dedup key is looked up in its
   partition's window (kmq.client.consumer.dedup); a duplicate gets an End (reason ``deduplicated: duplicate of
   P:O``) instead of a Start and is never handed out. The Ends' deliveries join the batch's Starts: nothing past a
   duplicate is committed before its End is durable, so a crash in between decides it again, the same way.
2. ``dropped(partitions)`` from the rebalance callback: their windows are no longer this consumer's to trust.
A partition's window is rebuilt before its first keyed record is decided (so before anything after it is handed
out), by reading the partition back from one window (plus the producers' clock skew) before that record's
timestamp up to it; a queue that never sends a dedup id never pays for a rebuild.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from operator import methodcaller
from typing import Any, Protocol

import structlog

from kmq import _kafka
from kmq._kafka.factory import ClientFactory
from kmq._kafka.range_reader import records_since
from kmq.client.consumer.dedup import DedupWindow, PartitionWindow, dedup_key
from kmq.client.consumer.intake import Record
from kmq.config import Config
from kmq.delivery import Delivery
from kmq.errors import KmqError
from kmq.wire import MessageId

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

#: How often a failing rebuild is logged.
COMPLAIN_EVERY_S = 10.0

_headers = methodcaller("headers")


class KeyedRecord(Record, Protocol):
    """What the screen reads of a record besides the intake's view (confluent_kafka.Message has it)."""

    def headers(self) -> Any: ...
    def timestamp(self) -> Any: ...


#: Reads ``partition`` back: every record from the first at or after ``since_ms`` up to ``until_offset``
#: (excluded); raises KmqError when it cannot.
ReadBack = Callable[[int, int, int], Iterable[KeyedRecord]]


class EndWriter(Protocol):
    """Writes the Ends of duplicates at once (kmq.client.consumer.marker_writer.MarkerWriter)."""

    def deduplicated(self, duplicates: Sequence[tuple[MessageId, MessageId]]) -> Delivery[MessageId]: ...


def _timestamp_ms(record: KeyedRecord) -> int:
    kind, ts = record.timestamp()
    return ts if kind and ts is not None and ts > 0 else 0


class Deduplicator:
    """Duplicates out of a queue's records before their Starts. Loop thread only (rebalance callbacks included).

    ``writer`` None: an at-most-once queue, which writes no markers; its duplicates are skipped without an End."""

    def __init__(self, key: bytes, window_ms: int, skew_ms: int, read_back: ReadBack, writer: EndWriter | None, *,
                 park: bool = False, queue: str = "") -> None:
        self._key = key
        self._window_ms = window_ms
        self._skew_ms = skew_ms
        self._read_back = read_back
        self._writer = writer
        self.windows = DedupWindow(window_ms, skew_ms, park=park)
        self._log = log.bind(queue=queue)
        self._complained = 0.0
        #: Duplicates screened out since the start (Ends written for them, or skipped at most once).
        self.deduplicated = 0
        #: Windows rebuilt, and the records they read back.
        self.rebuilds = 0
        self.records_read_back = 0

    def screen(self, records: list[Record]) -> tuple[list[Record], list[Delivery[MessageId]]] | None:
        """``records`` (of this queue, in offset order per partition) less the duplicates, and the deliveries of the
        duplicates' Ends (wait for them before committing past them). None when a window could not be rebuilt now:
        the records must be taken again later."""
        if not any(map(_headers, records)):  # none has headers, so none a dedup id (the common case): a pass in C
            return records, []
        keep: list[Record] = []
        duplicates: list[tuple[MessageId, MessageId]] = []
        for record in records:
            raw = record.headers()  # type: ignore[attr-defined]
            key = dedup_key(raw) if raw else None
            if key is None:
                keep.append(record)
                continue
            partition, offset = record.partition() or 0, record.offset() or 0
            ts = _timestamp_ms(record)  # type: ignore[arg-type]  # a KeyedRecord (confluent's Message)
            window = self.windows.window_for(partition, offset) or self._rebuild(partition, offset, ts)
            if window is None:
                return None
            original = window.observe(offset, ts, key)
            if original is None:
                keep.append(record)
            else:
                duplicates.append((MessageId(partition, offset), original))
        if not duplicates:
            return keep, []
        self.deduplicated += len(duplicates)
        if self._writer is None:
            return keep, []
        return keep, [self._writer.deduplicated(duplicates)]

    def dropped(self, partitions: Iterable[int]) -> None:
        """The partitions left this consumer (revoked or lost): another may decide their records now."""
        self.windows.dropped(partitions)

    def _rebuild(self, partition: int, offset: int, timestamp_ms: int) -> PartitionWindow | None:
        """A window for ``partition`` that decides its record at ``offset`` and after: the partition read back from
        a window and the clock skew before ``timestamp_ms`` up to ``offset``. None (logged) when it cannot be now."""
        started = time.monotonic()
        window = self.windows.rebuilding(partition, offset)
        since_ms = timestamp_ms - self._window_ms - self._skew_ms
        read = 0
        own, observe = self._key, window.observe
        try:
            for record in self._read_back(partition, since_ms, offset):
                read += 1
                if record.key() != own:  # other queues' records: most of a shared topic
                    continue
                raw = record.headers()
                key = dedup_key(raw) if raw else None
                if key is not None:
                    observe(record.offset() or 0, _timestamp_ms(record), key)
        except KmqError as err:
            self.windows.forget(partition)
            if time.monotonic() - self._complained > COMPLAIN_EVERY_S:
                self._complained = time.monotonic()
                self._log.warning("dedup_window_rebuild_failed", partition=partition, error=str(err),
                                  note="nothing of the partition is handed out until it is rebuilt")
            return None
        window.next_offset = max(window.next_offset, offset)
        window.valid_from = offset
        self.rebuilds += 1
        self.records_read_back += read
        self._log.info("dedup_window_rebuilt", partition=partition, from_offset=offset, records_read=read,
                       keys=len(window), took_ms=round((time.monotonic() - started) * 1000, 1))
        return window


def reader_read_back(clients: ClientFactory, config: Config, queue: str, stopping: threading.Event) -> ReadBack:
    """The production ReadBack: a reader consumer per rebuild (rebuilds are rare: a partition's first keyed record
    after it was assigned), closed after it; a rebuild cut short because the consumer is closing is a failure."""
    timeout_s = config.connect_timeout_ms / 1000 + 20
    topics = config.topics_for(queue)

    def read_back(partition: int, since_ms: int, until_offset: int) -> Iterator[KeyedRecord]:
        reader = clients.reader(_kafka.reader_settings(config, topics.private_group("dedup"), f"kmq-dedup-{queue}"))
        try:
            yield from records_since(reader, topics.messages, partition, since_ms, until_offset, timeout_s,
                                     stopping)
        finally:
            reader.close()
        if stopping.is_set():
            raise KmqError("the consumer is closing")

    return read_back
