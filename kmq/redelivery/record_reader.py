"""RecordReader: reads records back from the messages topic for the redelivery of Starts by reference.

A thread of its own with a consumer of its own (assigned partitions, no group), so the tracker's loop never waits
on it. Each round takes what was asked so far (at most ``max_per_round``), reads each partition's wanted offsets in
ranges (kmq.redelivery.read_plan), hands every record found to ``on_done``
as it comes (memory stays within one fetch, whatever the payloads), and then says what it could not read:
``Missing`` (before the partition's start: deleted by retention; passed over: compacted away; another queue's
record) or ``Failed`` (the broker did not answer in time, or the partition's end was still below the record: ask
again later). The end of a partition proves nothing missing: right after a leader change the new leader's high
watermark can lag records the old one had already served.
"""

from __future__ import annotations

import queue as stdqueue
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

import structlog
from confluent_kafka import KafkaError, TopicPartition

from kmq.redelivery.read_plan import ReadPlan
from kmq.wire import INTERNAL_HEADERS, MessageId
from kmq.wire.markers import Headers

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

#: Wanted records per round: bounds the bookkeeping, never the records held (those go out as they come).
MAX_PER_ROUND = 5_000
#: A round gives up on what it has not read by then (Failed: asked again after a backoff).
ROUND_TIMEOUT_S = 10.0
CONSUME_BATCH = 500
CONSUME_WAIT_S = 0.05


class Found(NamedTuple):
    """The record read back: its key, payload and user headers (kmq's internal ones dropped, as a consumer does)."""

    key: bytes
    value: bytes
    headers: Headers


class Missing(NamedTuple):
    """The record is not on the topic (for good): its message is dead-lettered with this reason."""

    reason: str


class Failed(NamedTuple):
    """The record could not be read now: try again."""

    error: str


Outcome = Found | Missing | Failed


class ReaderClient(Protocol):
    """The calls the reader makes (confluent_kafka.Consumer has them)."""

    def assign(self, partitions: list[Any]) -> None: ...
    def unassign(self) -> None: ...
    def seek(self, partition: Any) -> None: ...
    def consume(self, num_messages: int = ..., timeout: float = ...) -> list[Any]: ...
    def get_watermark_offsets(self, partition: Any, timeout: float = ..., cached: bool = ...) -> Any: ...
    def close(self) -> None: ...


class RecordReader:
    """``request(message_id, key, token)`` from any thread; ``on_done(token, outcome)`` is called on the reader's
    thread, once per request. ``close()`` stops it (unanswered requests are dropped: their Starts stay in flight)."""

    def __init__(self, client: ReaderClient, topic: str, on_done: Callable[[object, Outcome], None], *,
                 max_per_round: int = MAX_PER_ROUND, round_timeout_s: float = ROUND_TIMEOUT_S,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._topic = topic
        self._on_done = on_done
        self._max_per_round = max_per_round
        self._round_timeout_s = round_timeout_s
        self._monotonic = monotonic
        self._requests: stdqueue.SimpleQueue[tuple[MessageId, bytes, object]] = stdqueue.SimpleQueue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kmq-tracker-reader", daemon=True)
        self._thread.start()

    def request(self, message_id: MessageId, key: bytes, token: object) -> None:
        self._requests.put((message_id, key, token))

    def close(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self._client.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                first = self._requests.get(timeout=0.1)
            except stdqueue.Empty:
                continue
            wanted = [first]
            while len(wanted) < self._max_per_round:
                try:
                    wanted.append(self._requests.get_nowait())
                except stdqueue.Empty:
                    break
            self._round(wanted)

    # --- one round -----------------------------------------------------------------------------------------------

    def _round(self, wanted: Sequence[tuple[MessageId, bytes, object]]) -> None:
        asked: dict[int, dict[int, list[tuple[bytes, object]]]] = defaultdict(lambda: defaultdict(list))
        for message_id, key, token in wanted:
            asked[message_id.partition][message_id.offset].append((key, token))
        failure = f"not read within {self._round_timeout_s:.0f} s"
        started = self._monotonic()
        try:
            self._scan({p: ReadPlan(offsets) for p, offsets in asked.items()}, asked)
        except Exception as err:  # noqa: BLE001 - what is unanswered fails and is asked again
            failure = f"{type(err).__name__}: {err}"
            log.warning("read_back_failed", error=failure, records=sum(map(len, asked.values())))
        finally:
            self._client.unassign()
        log.debug("read_back_round", records=len(wanted), partitions=len(asked),
                  seconds=round(self._monotonic() - started, 4))
        for offsets in asked.values():
            for askers in offsets.values():
                self._answer(askers, Failed(failure))

    def _scan(self, plans: dict[int, ReadPlan], asked: dict[int, dict[int, list[tuple[bytes, object]]]]) -> None:
        self._client.assign([TopicPartition(self._topic, p, plan.start() or 0) for p, plan in plans.items()])
        deadline = self._monotonic() + self._round_timeout_s
        ends: dict[int, int] = {}
        while any(not plan.done for plan in plans.values()) and self._monotonic() < deadline:
            for record in self._client.consume(CONSUME_BATCH, CONSUME_WAIT_S):
                p = record.partition() or 0
                plan = plans.get(p)
                if plan is None or plan.done:
                    continue
                err = record.error()
                if err is None:
                    ends.pop(p, None)
                    offset = record.offset() or 0
                    hit, seek_to = plan.seen(offset)
                    if hit:
                        self._deliver(record, asked[p].pop(offset))
                elif err.code() == KafkaError._PARTITION_EOF:
                    # Never proof of absence: a Start's record was read by a consumer, so it is below the
                    # partition's end, unless that end went back (a new leader whose high watermark has not caught
                    # up with the old one's yet). Reading on gets it once the end moves on; a round timeout asks again.
                    ends[p] = -1 if record.offset() is None else record.offset()
                    continue
                else:
                    # Out of range (auto.offset.reset is "error"): what the partition holds now says what is gone.
                    log.info("read_back_out_of_range", partition=p, error=err.str())
                    seek_to = self._out_of_range(p, plan, asked[p])
                self._answer_missing(p, plan, asked[p])
                self._seek(p, seek_to)
        for p, end in ends.items():
            if not plans[p].done and end >= 0:
                reason = (f"{self._topic}[{p}] ended at offset {end} when read, before offset {plans[p].start()} "
                          "(a new leader's high watermark not caught up yet?)")
                for askers in asked[p].values():
                    self._answer(askers, Failed(reason))
                asked[p].clear()

    def _out_of_range(self, partition: int, plan: ReadPlan, asked: dict[int, list[tuple[bytes, object]]]) -> int | None:
        low, high = self._client.get_watermark_offsets(TopicPartition(self._topic, partition), timeout=5,
                                                       cached=False)
        for offset in plan.outside(low, high):
            reason = (f"deleted from {self._topic}[{partition}] (it starts at offset {low} now: retention?)"
                      if offset < low else
                      f"not on {self._topic}[{partition}] (it ends at offset {high}: was the topic recreated?)")
            self._answer(asked.pop(offset), Missing(reason))
        return plan.start()

    def _seek(self, partition: int, offset: int | None) -> None:
        if offset is not None:
            self._client.seek(TopicPartition(self._topic, partition, offset))

    def _deliver(self, record: Any, askers: list[tuple[bytes, object]]) -> None:
        key = record.key() or b""
        headers = tuple((k, v or b"") for k, v in (record.headers() or ()) if k not in INTERNAL_HEADERS)
        found = Found(key, record.value() or b"", headers)
        for asked_key, token in askers:
            if asked_key != key:
                self._on_done(token, Missing(f"the record at {self._topic}[{record.partition()}:{record.offset()}] "
                                             f"belongs to another queue ({key!r}): was the topic recreated?"))
            else:
                self._on_done(token, found)

    def _answer_missing(self, partition: int, plan: ReadPlan, asked: dict[int, list[tuple[bytes, object]]]) -> None:
        for offset in plan.missing:
            self._answer(asked.pop(offset), Missing(f"not on {self._topic}[{partition}] at offset {offset} "
                                                    "(compacted or deleted)"))
        plan.missing.clear()

    def _answer(self, askers: list[tuple[bytes, object]], outcome: Outcome) -> None:
        for _key, token in askers:
            self._on_done(token, outcome)


class LazyReader:
    """A RecordReader made on the first request: a tracker that never meets a Start by reference (kafka-mq-go's
    format) runs no reader thread and holds no reader connection."""

    def __init__(self, make: Callable[[], RecordReader]) -> None:
        self._make = make
        self._reader: RecordReader | None = None

    def request(self, message_id: MessageId, key: bytes, token: object) -> None:
        if self._reader is None:
            self._reader = self._make()
        self._reader.request(message_id, key, token)

    def close(self, timeout_s: float = 5.0) -> None:
        if self._reader is not None:
            self._reader.close(timeout_s)
