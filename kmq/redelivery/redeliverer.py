"""Redeliverer: the life of one redelivery, (READ →) COPY → END → DONE, with retries.

READ (a Start by reference only) reads the payload and headers back from the messages topic (RecordReader); a
record that is not there any more makes the copy a dead letter with UNREADABLE_REASON and no payload. COPY
produces the expired message's payload again (to the messages topic, or to the dead-letter topic once it
has had ``max_deliveries``); END writes an End marker for the old id, so no tracker redelivers it again; reading
that End back removes the message from the partition state. A failed step is retried with backoff, never
dropped. A READ or COPY whose partition is no longer held under the holding that fired it is dropped, because the
next holder (another replica, or this one after a loss) replays the Start and redelivers it; a copy already made
still gets its End, whoever holds the partition now, so the next holder reads it instead of copying again (and
OwnedPartitions holds a partition given back while such writes are in flight). In the ``kmq`` marker format the Ends
of one poll are written as one record per queue.
"""

from __future__ import annotations

import enum
import queue as stdqueue
from collections import Counter, defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from kmq import otel, wire
from kmq._kafka.producer import MarkerProducer
from kmq.config import MARKER_FORMAT_KMQ, Config
from kmq.redelivery.in_flight import InFlight
from kmq.redelivery.record_reader import Failed, Found, Outcome
from kmq.topic_sets import TopicSet
from kmq.wire import MessageId
from kmq.wire.marker_batch import EndEntry, encode_ends
from kmq.wire.markers import EndReason, Marker, MarkerType, encode

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

RETRY_BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class Step(enum.Enum):
    READ = "read"
    COPY = "copy"
    END = "end"
    DONE = "done"


@dataclass(slots=True)
class Attempt:
    """One redelivery: the message, where it goes, the step it is at, and its failures."""

    partition: int
    item: InFlight
    dead_letter: bool
    #: The holding of the partition that fired it (kmq.redelivery.partitions).
    holding: int = 0
    #: Purged (``kmq purge``): no copy, just an End.
    purged: bool = False
    #: Why its record could not be read back (a Start by reference): dead-lettered without a payload.
    unreadable: str = ""
    step: Step = Step.COPY
    failures: int = 0
    due: float = 0.0

    @property
    def delivery_count(self) -> int:
        """The copy's delivery count: one more than the Start's, unless no handler saw it (given back) or it is a
        dead letter (which keeps the count it was delivered with)."""
        return (self.item.delivery_count or 1) + (0 if self.dead_letter or self.item.returned else 1)


class Reader(Protocol):
    """Reads records back for Starts by reference (RecordReader): answers through ``Redeliverer.read_done``."""

    def request(self, message_id: MessageId, key: bytes, token: object) -> None: ...


class Redeliverer:
    """Runs attempts through their steps; ``poll()`` from the tracker's loop thread, completions from any."""

    def __init__(self, config: Config, topics: TopicSet, sender: MarkerProducer, markers: MarkerProducer,
                 monotonic: Callable[[], float], on_copied: Callable[[Attempt], None],
                 client_id: str = wire.TRACKER_CLIENT_ID, reader: Reader | None = None) -> None:
        self._config = config
        self._topics = topics
        #: Written into the tracker's Ends: the same id as its clients and clock probes.
        self._client_id = client_id
        self._sender = sender
        self._markers = markers
        self._monotonic = monotonic
        self._on_copied = on_copied
        self._batched = config.marker_format == MARKER_FORMAT_KMQ
        self._retries: deque[Attempt] = deque()
        self._ends: list[Attempt] = []
        self._completions: stdqueue.SimpleQueue[tuple[list[Attempt], str | None]] = stdqueue.SimpleQueue()
        self._reader = reader
        self._reads: stdqueue.SimpleQueue[tuple[Attempt, Outcome]] = stdqueue.SimpleQueue()
        #: Produce calls whose delivery report has not come back.
        self.outstanding = 0
        #: Partition → attempts with a copy or an End produced and not answered.
        self._writes: Counter[int] = Counter()
        #: Records asked of the reader and not answered.
        self.reading = 0
        #: When a read or a write was last asked for or answered (monotonic seconds).
        self.moved_at = 0.0

    @property
    def unfinished(self) -> int:
        return self.outstanding + self.reading + len(self._retries) + len(self._ends)

    @property
    def copies_awaiting_end(self) -> bool:
        return bool(self._ends) or any(a.step is Step.END for a in self._retries)

    def writing(self, partition: int) -> bool:
        """Whether a copy or an End fired from ``partition`` is on its way or waits to be written."""
        return (self._writes[partition] > 0 or any(a.partition == partition for a in self._ends)
                or any(a.partition == partition and a.step is Step.END for a in self._retries))

    def submit(self, attempt: Attempt) -> None:
        if attempt.purged:
            attempt.step = Step.END
            self._ends.append(attempt)
        elif attempt.item.value is None:
            attempt.step = Step.READ
            self._read(attempt)
        else:
            self._copy(attempt)

    def poll(self, owned: Callable[[int, int], bool]) -> None:
        """Moves finished steps on, fires due retries, writes the Ends gathered meanwhile. ``owned(partition,
        holding)``: whether that partition is still held under that holding."""
        self._finish_reads(owned)
        self._finish_completions()
        self._fire_retries(owned)
        self._write_ends()

    # READ

    def _read(self, attempt: Attempt) -> None:
        if self._reader is None:
            self._retry(attempt, "no reader for Starts by reference")
            return
        self.reading += 1
        self.moved_at = self._monotonic()
        self._reader.request(attempt.item.message_id, attempt.item.key, attempt)

    def read_done(self, token: object, outcome: Outcome) -> None:
        """The reader's answer (any thread)."""
        self._reads.put((token, outcome))  # type: ignore[arg-type]

    def _finish_reads(self, owned: Callable[[int, int], bool]) -> None:
        while True:
            try:
                attempt, outcome = self._reads.get_nowait()
            except stdqueue.Empty:
                return
            self.reading -= 1
            self.moved_at = self._monotonic()
            if not owned(attempt.partition, attempt.holding):
                continue  # revoked or lost: its next holder replays the Start and redelivers it
            if isinstance(outcome, Failed):
                self._retry(attempt, outcome.error)
                continue
            attempt.step = Step.COPY
            if isinstance(outcome, Found):
                attempt.item.value, attempt.item.headers = outcome.value, outcome.headers
            else:
                attempt.unreadable, attempt.dead_letter = outcome.reason, True
                attempt.item.value = b""
                log.error("record_unreadable", queue=attempt.item.queue, message_id=str(attempt.item.message_id),
                          reason=outcome.reason, note="dead-lettered without its payload")
            self._copy(attempt)

    # COPY

    def _copy(self, attempt: Attempt) -> None:
        item = attempt.item
        topic = self._topics.dead_letters if attempt.dead_letter else self._topics.messages
        producer = self._markers if attempt.dead_letter else self._sender  # DLQ keyed by queue, like markers
        delivery = wire.DeliveryHeaders(attempt.delivery_count, item.first_id,
                                        item.enqueued_at_ms or item.start_timestamp_ms)
        if attempt.dead_letter:
            reason = (wire.UNREADABLE_REASON if attempt.unreadable
                      else wire.max_deliveries_reason(self._config.max_deliveries))
            headers = wire.DeadLetterHeaders(reason, item.key, delivery).encode(item.headers)
        else:
            headers = [*item.headers, *delivery.encode()]
        assert item.value is not None  # read back before the copy
        self._produce(producer, topic, item.value, item.key, [attempt], headers=headers)
        if item.headers and attempt.failures == 0:  # the producer's trace shows the copy (kmq.otel), once
            otel.redelivered(item.headers, item.queue, topic, item.message_id, attempt.delivery_count,
                             attempt.dead_letter)

    # END

    def _end(self, attempt: Attempt) -> EndEntry:
        if attempt.purged:
            return attempt.item.message_id, EndReason.REJECTED, wire.PURGED_REASON
        reason = EndReason.DEAD_LETTERED if attempt.dead_letter else EndReason.REDELIVERED
        return attempt.item.message_id, reason, wire.UNREADABLE_REASON if attempt.unreadable else ""

    def _write_ends(self) -> None:
        ends, self._ends = self._ends, []
        if not self._batched:
            for attempt in ends:
                message_id, end_reason, reason = self._end(attempt)
                end = Marker(MarkerType.END, message_id, end_reason=end_reason, reason=reason,
                             client_id=self._client_id)
                self._produce(self._markers, self._topics.markers, encode(end), attempt.item.key, [attempt])
            return
        by_key: dict[bytes, list[Attempt]] = defaultdict(list)
        for attempt in ends:
            by_key[attempt.item.key].append(attempt)
        for key, attempts in by_key.items():
            value = encode_ends(key, [self._end(a) for a in attempts], client_id=self._client_id)
            self._produce(self._markers, self._topics.markers, value, key, attempts)

    # completions and retries

    def _produce(self, producer: MarkerProducer, topic: str, value: bytes, key: bytes, attempts: list[Attempt],
                 headers: Any = None) -> None:
        self.outstanding += 1
        self.moved_at = self._monotonic()
        writes = self._writes
        for attempt in attempts:  # (Counter.update/subtract check for a Mapping first: a third of _produce's time)
            writes[attempt.partition] += 1
        try:
            producer.produce(topic, value, key, headers,
                             on_done=lambda err, _rec: self._completions.put((attempts, _err_text(err))))
        except Exception as err:  # noqa: BLE001 - retried like a failed delivery
            self.outstanding -= 1
            for attempt in attempts:
                writes[attempt.partition] -= 1
                self._retry(attempt, str(err))

    def _finish_completions(self) -> None:
        while True:
            try:
                attempts, error = self._completions.get_nowait()
            except stdqueue.Empty:
                return
            self.outstanding -= 1
            self.moved_at = self._monotonic()
            for attempt in attempts:
                self._writes[attempt.partition] -= 1
                if error is not None:
                    self._retry(attempt, error)
                elif attempt.step is Step.COPY:
                    attempt.step = Step.END
                    self._on_copied(attempt)
                    self._ends.append(attempt)
                else:
                    attempt.step = Step.DONE  # reading the End back removes the message from the state

    def _fire_retries(self, owned: Callable[[int, int], bool]) -> None:
        now = self._monotonic()
        for _ in range(len(self._retries)):
            attempt = self._retries.popleft()
            if attempt.step is not Step.END and not owned(attempt.partition, attempt.holding):
                continue  # revoked or lost: its next holder replays the Start and redelivers it
            if attempt.due > now:
                self._retries.append(attempt)
            elif attempt.step is Step.END:
                self._ends.append(attempt)
            elif attempt.step is Step.READ:
                self._read(attempt)
            else:
                self._copy(attempt)

    def _retry(self, attempt: Attempt, error: str) -> None:
        attempt.failures += 1
        attempt.due = self._monotonic() + RETRY_BACKOFF_S[min(attempt.failures, len(RETRY_BACKOFF_S)) - 1]
        self._retries.append(attempt)
        log.warning("redelivery_retry", queue=attempt.item.queue, message_id=str(attempt.item.message_id),
                    step=attempt.step.value, failures=attempt.failures, error=error)


def _err_text(err: Any) -> str | None:
    return None if err is None else str(err.str())
