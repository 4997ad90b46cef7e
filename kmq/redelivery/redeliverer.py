"""Redeliverer: the life of one redelivery, COPY → END → DONE, with retries.

COPY produces the expired message's payload again (to the messages topic, or to the dead-letter topic once it
has had ``max_deliveries``); END writes an End marker for the old id, so no tracker redelivers it again; reading
that End back removes the message from the partition state. A failed step is retried with backoff, never
dropped; a step whose partition is no longer ours is dropped, because the new owner replays the Start. In the
``kmq`` marker format the Ends of one poll are written as one record per queue.
"""

from __future__ import annotations

import enum
import queue as stdqueue
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from kmq import wire
from kmq._kafka.producer import MarkerProducer
from kmq.config import MARKER_FORMAT_KMQ, Config
from kmq.redelivery.partition_state import InFlight
from kmq.wire.marker_batch import encode_settles
from kmq.wire.markers import EndReason, Marker, MarkerType, encode

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

RETRY_BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
TRACKER_CLIENT_ID = "kmq-redelivery-tracker"


class Step(enum.Enum):
    COPY = "copy"
    END = "end"
    DONE = "done"


@dataclass(slots=True)
class Attempt:
    """One redelivery: the message, where it goes, the step it is at, and its failures."""

    partition: int
    item: InFlight
    dead_letter: bool
    #: Purged (``kmq purge``): no copy, just an End.
    purged: bool = False
    step: Step = Step.COPY
    failures: int = 0
    due: float = 0.0

    @property
    def delivery_count(self) -> int:
        """The copy's delivery count: one more than the Start's, unless no handler saw it (given back) or it is a
        dead letter (which keeps the count it was delivered with)."""
        return (self.item.delivery_count or 1) + (0 if self.dead_letter or self.item.returned else 1)


class Redeliverer:
    """Runs attempts through their steps; ``poll()`` from the tracker's loop thread, completions from any."""

    def __init__(self, config: Config, sender: MarkerProducer, markers: MarkerProducer,
                 monotonic: Callable[[], float], on_copied: Callable[[Attempt], None]) -> None:
        self._config = config
        self._sender = sender
        self._markers = markers
        self._monotonic = monotonic
        self._on_copied = on_copied
        self._batched = config.marker_format == MARKER_FORMAT_KMQ
        self._retries: deque[Attempt] = deque()
        self._ends: list[Attempt] = []
        self._completions: stdqueue.SimpleQueue[tuple[list[Attempt], str | None]] = stdqueue.SimpleQueue()
        #: Produce calls whose delivery report has not come back.
        self.outstanding = 0

    @property
    def unfinished(self) -> int:
        return self.outstanding + len(self._retries) + len(self._ends)

    @property
    def copies_awaiting_end(self) -> bool:
        return bool(self._ends) or any(a.step is Step.END for a in self._retries)

    def submit(self, attempt: Attempt) -> None:
        if attempt.purged:
            attempt.step = Step.END
            self._ends.append(attempt)
            return
        self._copy(attempt)

    def poll(self, owned: Callable[[int], bool]) -> None:
        """Moves finished steps on, fires due retries, writes the Ends gathered meanwhile."""
        self._finish_completions()
        self._fire_retries(owned)
        self._write_ends()

    # COPY

    def _copy(self, attempt: Attempt) -> None:
        item = attempt.item
        topic = self._config.dlq_topic if attempt.dead_letter else self._config.message_topic
        producer = self._markers if attempt.dead_letter else self._sender  # DLQ keyed by queue, like markers
        headers = [*item.headers, *self._headers(attempt)]
        self._produce(producer, topic, item.value, item.key, [attempt], headers=headers)

    def _headers(self, attempt: Attempt) -> list[tuple[str, bytes]]:
        item = attempt.item
        headers = wire.DeliveryHeaders(attempt.delivery_count, item.first_id,
                                       item.enqueued_at_ms or item.start_timestamp_ms).encode()
        if attempt.dead_letter:
            reason = f"max deliveries ({self._config.max_deliveries}) reached"
            headers += [(wire.HEADER_DLQ_REASON, reason.encode()), (wire.HEADER_DLQ_QUEUE, item.key)]
        return headers

    # END

    def _end_marker(self, attempt: Attempt) -> Marker:
        if attempt.purged:
            return Marker(MarkerType.END, attempt.item.message_id, end_reason=EndReason.REJECTED,
                          reason=wire.PURGED_REASON, client_id=TRACKER_CLIENT_ID)
        reason = EndReason.DEAD_LETTERED if attempt.dead_letter else EndReason.REDELIVERED
        return Marker(MarkerType.END, attempt.item.message_id, end_reason=reason, client_id=TRACKER_CLIENT_ID)

    def _write_ends(self) -> None:
        ends, self._ends = self._ends, []
        if not self._batched:
            for attempt in ends:
                self._produce(self._markers, self._config.marker_topic, encode(self._end_marker(attempt)),
                              attempt.item.key, [attempt])
            return
        by_key: dict[bytes, list[Attempt]] = defaultdict(list)
        for attempt in ends:
            by_key[attempt.item.key].append(attempt)
        for key, attempts in by_key.items():
            value = encode_settles(key, 0, others=[self._end_marker(a) for a in attempts],
                                   client_id=TRACKER_CLIENT_ID)
            self._produce(self._markers, self._config.marker_topic, value, key, attempts)

    # completions and retries

    def _produce(self, producer: MarkerProducer, topic: str, value: bytes, key: bytes, attempts: list[Attempt],
                 headers: Any = None) -> None:
        self.outstanding += 1
        try:
            producer.produce(topic, value, key, headers,
                             on_done=lambda err, _rec: self._completions.put((attempts, _err_text(err))))
        except Exception as err:  # noqa: BLE001 - retried like a failed delivery
            self.outstanding -= 1
            for attempt in attempts:
                self._retry(attempt, str(err))

    def _finish_completions(self) -> None:
        while True:
            try:
                attempts, error = self._completions.get_nowait()
            except stdqueue.Empty:
                return
            self.outstanding -= 1
            for attempt in attempts:
                if error is not None:
                    self._retry(attempt, error)
                elif attempt.step is Step.COPY:
                    attempt.step = Step.END
                    self._on_copied(attempt)
                    self._ends.append(attempt)
                else:
                    attempt.step = Step.DONE  # reading the End back removes the message from the state

    def _fire_retries(self, owned: Callable[[int], bool]) -> None:
        now = self._monotonic()
        for _ in range(len(self._retries)):
            attempt = self._retries.popleft()
            if not owned(attempt.partition):
                continue  # revoked: the new owner replays the Start and redelivers it
            if attempt.due > now:
                self._retries.append(attempt)
            elif attempt.step is Step.END:
                self._ends.append(attempt)
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
