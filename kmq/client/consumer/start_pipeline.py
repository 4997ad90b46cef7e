"""The Start pipeline: records → messages → Start batch → commit → hand-out, or rewind.

Step by step, for each batch taken from the intake:
1. ``start``: this queue's records become Messages, registered as in flight (so they get keep-alives from now
   on), and their Starts are written; the loop goes on reading while they travel.
2. ``advance``: once the oldest batch's Starts are durable, its offsets enter the offset book and are committed;
3. only then are its messages handed out. Up to ``depth`` batches are on their way at once: batch k+1's Starts
   are on the wire while batch k is committed and the workers run batch k-1. When the oldest batch is durable,
   the batches after it whose Starts are durable too are committed with it, in one commit (of the newest one's
   offsets), and handed out in order.
A failed Start or commit rewinds that batch and every later one: their records go back to the front of the
backlog (no seek; a second Start is a fresh deadline for the tracker), and nothing past them is committed.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

import structlog

from kmq._kafka.offsets import CommitOutcome
from kmq.client.consumer.intake import Intake, Record, offsets_and_own
from kmq.client.consumer.marker_writer import MarkerWriter
from kmq.client.consumer.offset_book import OffsetBook, TopicPartitionKey
from kmq.client.message import Message
from kmq.delivery import Delivery
from kmq.wire import MessageId

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)


class Screen(Protocol):
    """Takes duplicate sends out before their Starts (kmq.client.consumer.deduplicator.Deduplicator)."""

    deduplicated: int

    def screen(self, records: list[Record]) -> tuple[list[Record], list[Delivery[MessageId]]] | None: ...


class InFlightTable(Protocol):
    """Where Started messages are kept alive until settled (kmq.client.consumer.in_flight.InFlightMessages)."""

    def add(self, message: Message) -> None: ...
    def add_many(self, messages: list[Message]) -> None: ...
    def discard(self, message_id: MessageId) -> None: ...


@dataclass(slots=True)
class StartBatch:
    records: list[Record]
    messages: list[Message]
    #: Per partition, the offset after this batch's last record.
    offsets: dict[TopicPartitionKey, int]
    deliveries: list[Delivery[MessageId]]


class StartPipeline:
    """Batches between "taken from the intake" and "handed out". Loop thread only."""

    def __init__(self, *, key: bytes, intake: Intake, writer: MarkerWriter, book: OffsetBook,
                 in_flight: InFlightTable, to_message: Callable[[Record], Message],
                 to_messages: Callable[[list[Record]], list[Message]] | None = None,
                 commit: Callable[[Mapping[TopicPartitionKey, int]], CommitOutcome],
                 hand_out: Callable[[list[Message]], None], start_timeout_s: float,
                 stopping: threading.Event | None = None, write_starts: bool = True,
                 dedup: Screen | None = None, divert: Callable[[list[Record]], list[Record]] | None = None,
                 depth: int) -> None:
        self._key = key
        #: Batches Started and not yet handed out (Config.start_pipeline_depth): the oldest is handed out before
        #: one more is Started.
        self.depth = depth
        self._intake = intake
        self._writer = writer
        self._book = book
        self._in_flight = in_flight
        self._to_message = to_message
        #: ``to_message`` of a whole batch (one call, one clock reading for all).
        self._to_messages = to_messages or (lambda records: [to_message(r) for r in records])
        self._commit = commit
        self._hand_out = hand_out
        self.start_timeout_s = start_timeout_s
        #: False for an at-most-once queue: messages are committed and handed out with no Start and no keep-alives.
        self._write_starts = write_starts
        self._dedup = dedup
        self._stopping = stopping or threading.Event()
        #: Message groups: takes this queue's records that are the groups' concern (their offsets still count) and
        #: returns the others.
        self._divert = divert
        self._batches: deque[StartBatch] = deque()
        #: Messages Started and not yet handed out.
        self.waiting = 0

    def __len__(self) -> int:
        return len(self._batches)

    @property
    def deduplicated(self) -> int:
        """Duplicate sends kept from handlers (Ended as deduplicated) since the start."""
        return 0 if self._dedup is None else self._dedup.deduplicated

    def full(self) -> bool:
        return len(self._batches) >= self.depth

    # 1. Start

    def start(self, records: list[Record]) -> None:
        offsets, own = offsets_and_own(records, self._key)
        ends: list[Delivery[MessageId]] = []
        if own and self._dedup is not None:
            screened = self._dedup.screen(own)  # duplicates are Ended (deduplicated) instead of Started
            if screened is None:  # a dedup window could not be rebuilt now: these records are taken again
                self._intake.put_back(records)
                return
            own, ends = screened
        if own and self._divert is not None:  # the message groups' records go to their ledger (offsets still count)
            own = self._divert(own)
        if not own and not ends and not self._batches:
            self._book.advance(offsets, len(records))  # nothing to Start, nothing before it: safe to skip
            return
        messages = self._to_messages(own) if own else []
        deliveries = ends
        if self._write_starts:
            self._in_flight.add_many(messages)
            deliveries += self._writer.start(messages) if messages else []
        self._batches.append(StartBatch(records, messages, offsets, deliveries))
        self.waiting += len(messages)

    # 2. commit, 3. hand out

    def advance(self, block: bool, timeout_s: float | None = None) -> None:
        """Commits and hands out the oldest batches whose Starts are durable; with ``block``, waits for the
        oldest one's Starts first (up to ``timeout_s``, default the start timeout; on the loop thread, only until
        the consumer stops)."""
        while self._batches:
            head = self._batches[0]
            if not head.messages and not head.deliveries:
                self._batches.popleft()
                self._book.advance(head.offsets, len(head.records))
                continue
            if not block and not all(d.done() for d in head.deliveries):
                return
            stopping = None if timeout_s is not None else self._stopping
            if not _wait_done(head.deliveries, self.start_timeout_s if timeout_s is None else timeout_s, stopping):
                if stopping is not None and stopping.is_set():
                    return  # the consumer is closing: close() finishes this batch within its own timeout
                error: BaseException | None = TimeoutError(f"Start markers not acknowledged within "
                                                           f"{self.start_timeout_s} s")
            else:
                error = next((e for e in (d.exception(0) for d in head.deliveries) if e is not None), None)
            if error is not None:
                log.warning("start_markers_failed", error=str(error), batch=len(head.messages))
                self.rewind()
                return
            durable = self._durable_after_head()
            for batch in durable:
                self._book.advance(batch.offsets, len(batch.records))
            outcome = self._commit(self._book.pending())
            if outcome is not CommitOutcome.COMMITTED:
                # Not handed out. Still ours: read again. Not ours: the new owner reads them from the last commit.
                self.rewind()
                return
            for batch in durable:
                self._batches.popleft()
                self.waiting -= len(batch.messages)
                self._hand_out(batch.messages)
            block = False

    def _durable_after_head(self) -> list[StartBatch]:
        """The oldest batch (durable) and the ones after it whose Starts are durable too, up to the first that is
        not (still on its way, or failed: it and every later one wait for the next round, or its rewind)."""
        durable = [self._batches[0]]
        for batch in itertools.islice(self._batches, 1, None):
            if not all(d.done() and d.exception(0) is None for d in batch.deliveries):
                break
            durable.append(batch)
        return durable

    def rewind(self) -> None:
        """Every batch not handed out goes back to the intake's front; nothing past it is committed."""
        if not self._batches:
            return
        records = [r for batch in self._batches for r in batch.records]
        ids = [message.message_id for batch in self._batches for message in batch.messages]
        for message_id in ids:
            self._in_flight.discard(message_id)
        if ids:
            # Their Starts may be durable, or land late (a broker frozen): the tracker then redelivers any of them
            # its next reader has not Started again within the redelivery timeout. Named, so a duplicate is explained.
            log.info("starts_rewound", messages=len(ids), message_ids=id_ranges(ids))
        self._batches.clear()
        self.waiting = 0
        self._book.rewind(_first_offsets(records))
        self._intake.put_back(records)


def _wait_done(deliveries: Iterable[Delivery[MessageId]], timeout_s: float, stopping: threading.Event | None) -> bool:
    """True once every delivery has its report; False after ``timeout_s`` or once ``stopping`` is set."""
    deadline = time.monotonic() + timeout_s
    for delivery in deliveries:
        while not delivery.done():
            left = deadline - time.monotonic()
            if left <= 0 or (stopping is not None and stopping.is_set()):
                return False
            # In slices while the consumer runs: close() must not wait a whole start timeout for the loop thread.
            with contextlib.suppress(TimeoutError):
                delivery.exception(min(left, 0.1) if stopping is not None else left)
    return True


def id_ranges(ids: Iterable[MessageId]) -> str:
    """Message ids as runs per partition, ``3:38-40,2:7``: a batch's ids, short enough for one log line."""
    by_partition: dict[int, list[int]] = {}
    for message_id in ids:
        by_partition.setdefault(message_id.partition, []).append(message_id.offset)
    runs: list[str] = []
    for partition, offsets in by_partition.items():
        offsets.sort()
        first = last = offsets[0]
        for offset in [*offsets[1:], None]:
            if offset is not None and offset <= last + 1:
                last = offset
                continue
            runs.append(f"{partition}:{first}" if first == last else f"{partition}:{first}-{last}")
            if offset is not None:
                first = last = offset
    return ",".join(runs)


def _first_offsets(records: Iterable[Record]) -> dict[TopicPartitionKey, int]:
    first: dict[TopicPartitionKey, int] = {}
    for record in records:
        tp = (record.topic() or "", record.partition() or 0)
        offset = record.offset() or 0
        if offset < first.get(tp, offset + 1):
            first[tp] = offset
    return first
