"""MarkersFollower: reads one queue's markers partition for a new owner of grouped messages, from the commit's ``m=``
on (docs/concepts/groups.md, "A new owner").

It never blocks the consumer's loop for long: ``read`` takes what has been fetched (a few ms at most), decodes this
queue's batch records, and says how far it got. A new partition's replay is done once the reader
passed the markers partition's end offset as it was when the partition was assigned; after that the follower goes on
reading while any grouped message is held by another instance (its End, keep-alives, release or lease). The reader
is made on first need: a queue whose commits never named ``m=`` never has one. Its broker clock is the newest marker
time read, extrapolated with the local clock (as a tracker's).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import structlog
from confluent_kafka import TopicPartition

from kmq._kafka.factory import ClientFactory, GroupClient
from kmq._kafka.offsets import watermarks
from kmq._kafka.records import log_append_time_ms
from kmq._kafka.settings import reader_settings
from kmq.config import Config
from kmq.errors import KmqError, MarkerDecodeError
from kmq.topic_sets import TopicSet
from kmq.wire import partitioning
from kmq.wire.marker_batch import DecodedBatch, decode_batch, is_batch

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

#: Records one ``read`` takes at most, and how long it waits for the first.
READ_BATCH = 2_000
READ_WAIT_S = 0.005


@dataclass(frozen=True, slots=True)
class MarkerRecord:
    """One of the queue's marker records, decoded."""

    offset: int
    appended_ms: int
    batch: DecodedBatch


class MarkersFollower:
    """Loop thread only."""

    def __init__(self, config: Config, topics: TopicSet, queue: str, clients: ClientFactory) -> None:
        self._config = config
        self._topics = topics
        self._key = queue.encode()
        self._clients = clients
        self._reader: GroupClient | None = None
        self._partition = -1
        #: The next markers offset to read (-1: not reading).
        self.position = -1
        self._newest_ms = 0
        self._newest_at = 0.0

    @property
    def reading(self) -> bool:
        return self.position >= 0

    def end_offset(self) -> int:
        """The queue's markers partition's end offset now: every marker written from now on is at or after it."""
        reader = self._open()
        tp = TopicPartition(self._topics.markers, self._partition)
        return watermarks(reader, tp, self._config.connect_timeout_ms / 1000,  # type: ignore[arg-type]
                          f"end offsets of {self._topics.markers!r}")[1]

    def replay_from(self, offset: int) -> int:
        """Reads from ``offset`` (or keeps reading, if already there or before); returns the markers partition's end
        offset now: the replay of a partition assigned now is done once ``position`` reached it."""
        end = self.end_offset()
        reader = self._open()
        if not self.reading or offset < self.position:
            reader.assign([TopicPartition(self._topics.markers, self._partition, offset)])
            self.position = offset
        return end

    def read(self) -> list[MarkerRecord]:
        """What has arrived since the last read (this queue's records), without blocking."""
        if self._reader is None or not self.reading:
            return []
        got: list[MarkerRecord] = []
        for record in self._reader.consume(READ_BATCH, READ_WAIT_S):
            if record.error() is not None:
                continue  # partition EOF, or a transient error: the reader goes on by itself
            offset = record.offset()
            self.position = max(self.position, offset + 1)
            appended_ms = log_append_time_ms(record)
            if appended_ms > self._newest_ms:
                self._newest_ms, self._newest_at = appended_ms, time.monotonic()
            value = record.value()
            if record.key() != self._key or not is_batch(value):
                continue
            try:
                batch = decode_batch(value)
            except MarkerDecodeError as err:
                log.warning("malformed_marker_skipped", topic=self._topics.markers, offset=offset,
                            error=str(err))
                continue
            # This instance's own markers too: a partition revoked and assigned back to it replays what it wrote.
            got.append(MarkerRecord(offset, appended_ms, batch))
        return got

    def broker_now_ms(self) -> int:
        """The newest marker time read, extrapolated with the local clock; 0 before any was read."""
        if not self._newest_ms:
            return 0
        return self._newest_ms + int((time.monotonic() - self._newest_at) * 1000)

    def stop(self) -> None:
        """Nothing to follow for now: stops fetching (the reader stays, for the next replay)."""
        if self._reader is not None and self.reading:
            self._reader.unassign()
            self.position = -1

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def _open(self) -> GroupClient:
        if self._reader is None:
            settings: dict[str, Any] = {
                **reader_settings(self._config, self._topics.private_group("groups-follower"), "kmq-markers-follower"),
                "enable.partition.eof": False,
            }
            reader = self._clients.reader(settings)
            try:
                metadata = reader.list_topics(self._topics.markers, timeout=self._config.connect_timeout_ms / 1000)
                partitions = len(metadata.topics[self._topics.markers].partitions)
            except Exception as err:
                reader.close()
                raise KmqError(f"cannot read the partitions of {self._topics.markers!r}: {err}") from err
            self._partition = (partitioning.murmur2(self._key) & 0x7FFFFFFF) % partitions
            self._reader = reader
        return self._reader
