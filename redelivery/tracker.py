"""RedeliveryTracker: reads the markers topic, tracks in-flight messages, redelivers the expired ones.

Replicas share the markers partitions through consumer group ``kafka-mq-redelivery``. Per assigned partition:
a PartitionState and a DeadlineClock, rebuilt by replaying from the committed offset (the oldest in-flight Start).
Nothing is redelivered from a partition until the replay reaches the end offset seen at assignment (catch-up
gate). An expired message is produced again to the messages topic (or the dead-letter topic once it has had
``max_deliveries``), then an End marker for the old id is written; failures are retried, never dropped.
"""

from __future__ import annotations

import gc
import threading
import time
from dataclasses import dataclass

import structlog
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka import Message as KafkaMessage

from kmq import _kafka
from kmq._kafka import PolledProducer
from kmq.commit_policy import CommitPolicy
from kmq.config import Config
from kmq.errors import MarkerDecodeError
from kmq.marker_batch import decode_batch, is_batch
from kmq.markers import decode
from redelivery.clock import DeadlineClock, Monotonic
from redelivery.metrics import TrackerMetrics
from redelivery.partition_state import PartitionState
from redelivery.redeliverer import Attempt, Redeliverer

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

BATCH = 1000
POLL_S = 0.05
METRICS_INTERVAL_S = 5.0


@dataclass(slots=True)
class Partition:
    state: PartitionState
    clock: DeadlineClock
    catch_up_to: int
    assigned_at: float
    caught_up: bool = False
    markers_read: int = 0


class RedeliveryTracker:
    """One tracker replica. ``run()`` loops until ``stop()``; the loop thread owns all partition state."""

    def __init__(self, config: Config, *, metrics: TrackerMetrics | None = None,
                 monotonic: Monotonic = time.monotonic, client_id: str = "kmq-redelivery-tracker") -> None:
        self.config = config
        self.metrics = metrics or TrackerMetrics()
        self._monotonic = monotonic
        self._partitions: dict[int, Partition] = {}
        self._stop = threading.Event()
        self._commits = CommitPolicy(config.num_offsets_per_commit, config.tracker_commit_interval_ms / 1000,
                                     monotonic)
        self._last_publish = 0.0
        self._gc_paused = False
        #: Scanning the state for per-queue gauges costs time: only when someone scrapes them.
        self.publish_metrics = config.metrics_port > 0
        self._sender = PolledProducer(_kafka.messages_producer_settings(config, f"{client_id}-sender"), "sender")
        self._markers = PolledProducer(_kafka.markers_producer_settings(config, f"{client_id}-markers"),
                                       "tracker-markers")
        self._redeliverer = Redeliverer(config, self._sender, self._markers, monotonic, self._record_redelivery)
        self._consumer = KafkaConsumer({
            **_kafka.consumer_settings(config.replace(client_id=""), _kafka.TRACKER_GROUP, client_id),
            "fetch.max.bytes": 64 * 1024 * 1024, "max.partition.fetch.bytes": 16 * 1024 * 1024,
        })
        self._consumer.subscribe([config.marker_topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                 on_lost=self._on_lost)

    # --- the loop -------------------------------------------------------------------------------------

    def run(self) -> None:
        """Tracks and redelivers until ``stop()``, then hands everything back cleanly."""
        log.info("tracker_started", marker_topic=self.config.marker_topic, kafka=self.config.redacted_kafka())
        try:
            while not self._stop.is_set():
                self._poll_iteration()
        finally:
            self._shutdown()

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def _poll_iteration(self) -> None:
        for record in self._consumer.consume(BATCH, POLL_S):
            self._handle(record)
        self._check_caught_up()
        self._fire_expired()
        self._redeliverer.poll(self._partitions.__contains__)
        if self._commits.due():
            self._commit(list(self._partitions))
        self._maybe_publish_metrics()

    def _handle(self, record: KafkaMessage) -> None:
        err = record.error()
        if err is not None:
            if _kafka.is_fatal(err):
                raise _kafka.raise_from(KafkaException(err), "tracker consumer")
            log.warning("markers_consume_error", error=err.str())
            return
        part = self._partitions.get(record.partition() or 0)
        if part is None:
            return
        offset = record.offset() or 0
        timestamp_ms = _kafka.record_timestamp_ms(record)
        part.markers_read += 1
        part.clock.observe(timestamp_ms)
        state = part.state
        value = record.value()
        try:
            if is_batch(value):
                state.apply_batch(offset, timestamp_ms, decode_batch(value))  # type: ignore[arg-type]
            else:
                state.apply(offset, timestamp_ms, decode(value))
        except MarkerDecodeError as bad:
            self.metrics.malformed.inc()
            log.warning("malformed_marker", partition=state.partition, offset=offset, reason=bad.reason)
        state.next_offset = max(state.next_offset, offset + 1)
        self._commits.note(1)

    def _check_caught_up(self) -> None:
        if self._gc_paused and all(part.caught_up for part in self._partitions.values()):
            self._resume_gc()
        for p, part in self._partitions.items():
            if part.caught_up:
                continue
            if part.state.next_offset >= part.catch_up_to:
                part.caught_up = True
                seconds = self._monotonic() - part.assigned_at
                self.metrics.rebuild_seconds.observe(seconds)
                log.info("partition_rebuilt", partition=p, markers_read=part.markers_read,
                         in_flight=len(part.state), seconds=round(seconds, 3))

    # --- redelivery -----------------------------------------------------------------------------------

    def _fire_expired(self) -> None:
        for p, part in self._partitions.items():
            if not part.caught_up:
                continue  # the catch-up gate: a half-replayed log would fire messages whose End is just ahead
            now_ms = part.clock.now_ms()
            if now_ms is None:
                continue
            for item in part.state.take_expired(now_ms):
                dead = 0 < self.config.max_deliveries <= (item.delivery_count or 1)
                self._redeliverer.submit(Attempt(p, item, dead))

    def _record_redelivery(self, attempt: Attempt) -> None:
        item = attempt.item
        lag_s = self._redelivery_lag_s(attempt)
        (self.metrics.dead_letters if attempt.dead_letter else self.metrics.redeliveries).labels(item.queue).inc()
        if lag_s is not None:
            self.metrics.redelivery_lag.observe(lag_s)
        log.info("dead_lettered" if attempt.dead_letter else "redelivered", queue=item.queue,
                 message_id=str(item.message_id), first_message_id=str(item.origin_id),
                 delivery_count=attempt.delivery_count, lag_ms=None if lag_s is None else round(lag_s * 1000))

    def _redelivery_lag_s(self, attempt: Attempt) -> float | None:
        part = self._partitions.get(attempt.partition)
        now_ms = part.clock.now_ms() if part else None
        return None if now_ms is None else max(0.0, (now_ms - attempt.item.deadline_ms) / 1000)

    # --- commits and rebalances -------------------------------------------------------------------------

    def _commit(self, partitions: list[int]) -> None:
        offsets = [TopicPartition(self.config.marker_topic, p, self._partitions[p].state.commit_offset())
                   for p in partitions if p in self._partitions and self._partitions[p].caught_up]
        self._commits.committed()
        if not offsets:
            return
        try:
            self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            log.warning("tracker_commit_failed", error=str(exc))

    def _pause_gc(self) -> None:
        """A rebuild allocates millions of acyclic objects; the cyclic GC would scan them again and again (~30% of
        the rebuild time), so it pauses until every partition has caught up, then freezes what was built."""
        if not self._gc_paused and gc.isenabled():
            gc.disable()
            self._gc_paused = True

    def _resume_gc(self) -> None:
        if self._gc_paused:
            gc.freeze()
            gc.enable()
            self._gc_paused = False

    def _on_assign(self, consumer: KafkaConsumer, partitions: list[TopicPartition]) -> None:
        self._pause_gc()
        consumer.incremental_assign(partitions)
        now = self._monotonic()
        committed = {tp.partition: tp.offset for tp in consumer.committed(partitions, timeout=10)}
        for tp in partitions:
            low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
            start = committed.get(tp.partition, -1)
            start = start if start >= 0 else low
            state = PartitionState(tp.partition, next_offset=start)
            clock = DeadlineClock(self.config.use_now_if_no_marker_seen_ms, self._monotonic)
            self._partitions[tp.partition] = Partition(state, clock, high, now)
        log.info("partitions_assigned", partitions=[tp.partition for tp in partitions])

    def _on_revoke(self, consumer: KafkaConsumer, partitions: list[TopicPartition]) -> None:
        self._commit([tp.partition for tp in partitions])
        self._drop(consumer, partitions, "partitions_revoked")

    def _on_lost(self, consumer: KafkaConsumer, partitions: list[TopicPartition]) -> None:
        self._drop(consumer, partitions, "partitions_lost")

    def _drop(self, consumer: KafkaConsumer, partitions: list[TopicPartition], event: str) -> None:
        for tp in partitions:
            self._partitions.pop(tp.partition, None)
        consumer.incremental_unassign(partitions)
        log.info(event, partitions=[tp.partition for tp in partitions])

    def _shutdown(self, timeout_s: float = 20.0) -> None:
        self._resume_gc()
        deadline = self._monotonic() + timeout_s
        # Finish what is under way: copies produced get their End, so the next owner does not resend them.
        redeliverer = self._redeliverer
        while (redeliverer.outstanding or redeliverer.copies_awaiting_end) and self._monotonic() < deadline:
            redeliverer.poll(self._partitions.__contains__)
            time.sleep(0.02)
        self._sender.close(max(0.0, deadline - self._monotonic()))
        self._markers.close(max(0.0, deadline - self._monotonic()))
        self._commit(list(self._partitions))
        self._consumer.close()
        log.info("tracker_stopped", unfinished=redeliverer.unfinished)

    # --- observability ------------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, object]:
        """Per-partition and per-queue figures, for metrics and tests (loop thread, or after stop)."""
        queues: dict[str, list[int]] = {}
        for part in self._partitions.values():
            for queue, (count, oldest) in part.state.per_queue().items():
                entry = queues.setdefault(queue, [0, oldest])
                entry[0] += count
                entry[1] = min(entry[1], oldest)
        return {
            "partitions": {p: {"in_flight": len(part.state), "caught_up": part.caught_up,
                               "commit_offset": part.state.commit_offset(), "next_offset": part.state.next_offset}
                           for p, part in self._partitions.items()},
            "queues": {q: {"in_flight": c, "oldest_start_ms": o} for q, (c, o) in queues.items()},
        }

    def _maybe_publish_metrics(self) -> None:
        now = self._monotonic()
        if not self.publish_metrics or now - self._last_publish < METRICS_INTERVAL_S:
            return
        self._last_publish = now
        clock_ms = max((p.clock.now_ms() or 0 for p in self._partitions.values()), default=0)
        for queue, figures in self.snapshot()["queues"].items():  # type: ignore[attr-defined]
            self.metrics.in_flight.labels(queue).set(figures["in_flight"])
            self.metrics.oldest_age.labels(queue).set(max(0, clock_ms - figures["oldest_start_ms"]) / 1000)
        for p, part in self._partitions.items():
            _low, high = self._consumer.get_watermark_offsets(TopicPartition(self.config.marker_topic, p),
                                                              cached=True) or (0, 0)
            self.metrics.consumer_lag.labels(str(p)).set(max(0, high - part.state.next_offset))

    @property
    def partitions(self) -> dict[int, Partition]:
        return self._partitions

