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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka import Message as KafkaMessage

from kmq import _kafka
from kmq._kafka import PolledProducer
from kmq._kafka.commit_policy import CommitPolicy
from kmq._kafka.control import ControlFollower
from kmq.config import MARKER_FORMAT_KMQ, Config
from kmq.errors import KmqError, MarkerDecodeError
from kmq.metrics_http import BrokerProbe
from kmq.redelivery.clock import DeadlineClock, Monotonic
from kmq.redelivery.clock_probe import ClockProbes
from kmq.redelivery.copy_log import CopyLog
from kmq.redelivery.horizon import ReadHorizon
from kmq.redelivery.metrics import TrackerMetrics
from kmq.redelivery.partition_state import PartitionState
from kmq.redelivery.redeliverer import Attempt, Redeliverer
from kmq.wire import CLOCK_PROBE_KEY
from kmq.wire.marker_batch import decode_batch, is_batch
from kmq.wire.markers import decode

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

BATCH = 1000
#: The longest the loop waits for markers; less when a deadline falls due sooner.
POLL_S = 0.05
#: How often the loop looks for a clock probe sent less than PROBE_FAST_S ago (see horizon.py).
PROBE_POLL_S = 0.005
PROBE_FAST_S = 0.2
METRICS_INTERVAL_S = 5.0
#: How often an assigned partition whose committed offset could not be read is tried again, and how often the
#: tracker says it cannot reach the broker.
RETRY_INIT_S = 1.0
COMPLAIN_EVERY_S = 5.0
#: After SIGTERM: time to finish redeliveries under way, write their Ends, commit and leave, even with the broker
#: down (what is unfinished then is redelivered by the next owner).
SHUTDOWN_S = 10.0


@dataclass(slots=True)
class Partition:
    state: PartitionState
    clock: DeadlineClock
    catch_up_to: int
    assigned_at: float
    caught_up: bool = False
    markers_read: int = 0
    horizon: ReadHorizon = field(default_factory=ReadHorizon)


class RedeliveryTracker:
    """One tracker replica. ``run()`` loops until ``stop()``; the loop thread owns all partition state.

    ``consumer_factory`` builds the markers consumer from its settings (a seam for tests that make the broker's
    answers fail)."""

    def __init__(self, config: Config, *, metrics: TrackerMetrics | None = None,
                 monotonic: Monotonic = time.monotonic, client_id: str = "kmq-redelivery-tracker",
                 consumer_factory: Callable[[dict[str, Any]], KafkaConsumer] = KafkaConsumer) -> None:
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
        self._probe = BrokerProbe(self._markers.client, config.marker_topic,
                                  stalled=lambda: max(self._markers.stalled_s(), self._sender.stalled_s()))
        #: Purges (kmq purge): an expired message enqueued before its queue's purge time is Ended, not copied.
        self._control = ControlFollower(config).start()
        self._redeliverer = Redeliverer(config, self._sender, self._markers, monotonic, self._record_redelivery)
        self._copy_log = CopyLog()
        #: Fresh broker time for partitions caught up on (kmq format only: see clock_probe).
        self._clock_probes = (ClockProbes(self._markers, config.marker_topic, client_id, monotonic)
                              if config.marker_format == MARKER_FORMAT_KMQ else None)
        self._eager = config.eager_rebalance
        self._join_watch = _kafka.GroupJoinWatch(config.tracker_group, config.assignment_strategy,
                                                 config.connect_timeout_ms / 1000)
        self._fatal: KmqError | None = None
        #: Assigned partitions whose committed offset is not known yet, with the records read for them meanwhile.
        self._pending: dict[int, list[KafkaMessage]] = {}
        self._last_init_try = 0.0
        self._last_complaint = 0.0
        self._published_queues: set[str] = set()
        self._consumer = consumer_factory({
            **_kafka.consumer_settings(config.replace(client_id=""), config.tracker_group, client_id),
            "fetch.max.bytes": 64 * 1024 * 1024, "max.partition.fetch.bytes": 16 * 1024 * 1024,
            "error_cb": self._on_client_error, "on_commit": _on_commit,
        })
        self._consumer.subscribe([config.marker_topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                 on_lost=self._on_lost)

    # --- the loop -------------------------------------------------------------------------------------

    def run(self) -> None:
        """Tracks and redelivers until ``stop()``, then hands everything back cleanly."""
        log.info("tracker_started", marker_topic=self.config.marker_topic, group=self.config.tracker_group,
                 kafka=self.config.redacted_kafka())
        try:
            while not self._stop.is_set():
                self._poll_iteration()
        finally:
            self._shutdown()
        if self._fatal is not None:
            raise self._fatal

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def _poll_iteration(self) -> None:
        for record in self._consumer.consume(BATCH, self._poll_timeout_s()):
            self._handle(record)
        if self._clock_probes is not None:
            for p, timestamp_ms, seen_at in self._clock_probes.answers():
                if p in self._partitions:
                    self._partitions[p].clock.observe(timestamp_ms, seen_at)
        if self._pending and self._monotonic() - self._last_init_try >= RETRY_INIT_S:
            self._init_pending()
        self._check_caught_up()
        self._fire_expired()
        self._redeliverer.poll(self._partitions.__contains__)
        self._copy_log.flush()
        if self._commits.due():
            self._commit(list(self._partitions))
        self._maybe_publish_metrics()

    def _poll_timeout_s(self) -> float:
        """Wakes for the next deadline of a caught-up partition rather than up to POLL_S after it."""
        timeout_ms = POLL_S * 1000
        for part in self._partitions.values():
            due = part.state.next_deadline_ms()
            if due is not None and part.caught_up:
                wait_ms: float | None
                if self._clock_probes is not None and part.horizon.waiting(due, part.clock.now_ms()):
                    wait_ms = self._probe_wait_ms(part.horizon.probe_sent_at)
                else:
                    wait_ms = part.clock.ms_until(due + 1)  # fires once "now" is past the deadline
                if wait_ms is not None and wait_ms < timeout_ms:
                    timeout_ms = wait_ms
        return timeout_ms / 1000

    def _probe_wait_ms(self, sent_at: float | None) -> float:
        """While a due deadline waits for its probe: a probe is back within milliseconds on a healthy partition,
        so look often at first; a partition that does not take it (a failover) is not spun on."""
        young = sent_at is not None and self._monotonic() - sent_at < PROBE_FAST_S
        return PROBE_POLL_S * 1000 if young else POLL_S * 1000

    def _handle(self, record: KafkaMessage) -> None:
        err = record.error()
        if err is not None:
            if _kafka.is_fatal(err):
                raise _kafka.to_kmq_error(KafkaException(err), "tracker consumer")
            log.warning("markers_consume_error", error=err.str())
            return
        part = self._partitions.get(record.partition() or 0)
        if part is None:
            buffered = self._pending.get(record.partition() or 0)
            if buffered is not None:
                buffered.append(record)  # applied once the partition's start offset is known
            return
        offset = record.offset() or 0
        timestamp_ms = _kafka.record_timestamp_ms(record)
        part.markers_read += 1
        part.clock.observe(timestamp_ms)
        part.horizon.read(timestamp_ms, probe=record.key() == CLOCK_PROBE_KEY, monotonic_s=self._monotonic())
        state = part.state
        value = record.value()
        try:
            if is_batch(value):
                batch = decode_batch(value)  # type: ignore[arg-type]
                state.apply_batch(offset, timestamp_ms, batch)
                if batch.hello:
                    log.info("consumer_restarted", queue=batch.key.decode(errors="replace"), client_id=batch.client_id,
                             instance_id=batch.instance_id, taken_over=state.stats["taken_over"])
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
                if self._clock_probes is not None:
                    self._clock_probes.send(p)

    # --- redelivery -----------------------------------------------------------------------------------

    def _fire_expired(self) -> None:
        for p, part in self._partitions.items():
            if not part.caught_up:
                continue  # the catch-up gate: a half-replayed log would fire messages whose End is just ahead
            now_ms = part.clock.now_ms()
            if now_ms is None:
                continue
            if self._clock_probes is not None:  # only on evidence that the log is read up to the deadline
                now_ms, probe = part.horizon.limit(now_ms, part.state.next_deadline_ms(), self._monotonic())
                if probe:
                    self._clock_probes.send(p)
            purges = self._control.state.purged_before
            for item in part.state.take_expired(now_ms):
                if purges and (item.enqueued_at_ms or item.start_timestamp_ms) < purges.get(item.queue, 0):
                    self._redeliverer.submit(Attempt(p, item, dead_letter=False, purged=True))
                    continue
                dead = 0 < self.config.max_deliveries <= (item.delivery_count or 1) and not item.returned
                self._redeliverer.submit(Attempt(p, item, dead))

    def _record_redelivery(self, attempt: Attempt) -> None:
        item = attempt.item
        lag_s = self._redelivery_lag_s(attempt)
        (self.metrics.dead_letters if attempt.dead_letter else self.metrics.redeliveries).labels(item.queue).inc()
        if lag_s is not None:
            self.metrics.redelivery_lag.observe(lag_s)
        self._copy_log.add("dead_lettered" if attempt.dead_letter else "redelivered", item.queue,
                           str(item.message_id), str(item.first_id), attempt.delivery_count,
                           None if lag_s is None else round(lag_s * 1000))

    def _redelivery_lag_s(self, attempt: Attempt) -> float | None:
        part = self._partitions.get(attempt.partition)
        now_ms = part.clock.now_ms() if part else None
        return None if now_ms is None else max(0.0, (now_ms - attempt.item.deadline_ms) / 1000)

    # --- commits and rebalances -------------------------------------------------------------------------

    def _commit(self, partitions: list[int], *, wait: bool = False) -> None:
        """Commits each partition's oldest in-flight Start. Asynchronous in the loop: with the broker away a
        synchronous commit blocks until it is back, and the loop must go on (the next commit carries the same or
        later offsets; close() waits for the last). Synchronous on revoke, so the next owner starts from it."""
        offsets = [TopicPartition(self.config.marker_topic, p, self._partitions[p].state.commit_offset())
                   for p in partitions if p in self._partitions and self._partitions[p].caught_up]
        self._commits.committed()
        if not offsets:
            return
        try:
            if wait:
                self._consumer.commit(offsets=offsets, asynchronous=False)
            else:
                self._consumer.commit(offsets=offsets, asynchronous=True)
        except Exception as err:  # noqa: BLE001 - the next commit carries the same or later offsets
            log.warning("tracker_commit_failed", error=_describe(err))

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

    # Rebalance callbacks run inside consume(): an exception there would end the tracker, so each one logs its
    # failure and leaves the rest to the loop (a partition whose start is unknown is initialised again later).

    def _on_assign(self, consumer: KafkaConsumer, partitions: list[TopicPartition]) -> None:
        try:
            self._pause_gc()
            _kafka.assign(consumer, partitions, self._eager)
            self._join_watch.assigned()
            for tp in partitions:
                self._pending[tp.partition] = []
            log.info("partitions_assigned", partitions=[tp.partition for tp in partitions])
            self._init_pending()
        except Exception as err:  # noqa: BLE001 - see above
            log.error("rebalance_callback_failed", callback="assign", error=_describe(err))

    def _init_pending(self) -> None:
        """Reads the committed offset and end offset of each pending partition and builds its state; a partition
        whose offsets cannot be read now stays pending (its records are kept) and is tried again."""
        self._last_init_try = self._monotonic()
        topic = self.config.marker_topic
        for p in list(self._pending):
            tp = TopicPartition(topic, p)
            try:
                committed = self._consumer.committed([tp], timeout=5)[0].offset
                low, high = self._consumer.get_watermark_offsets(tp, timeout=5, cached=False)
            except Exception as err:  # noqa: BLE001 - retried
                log.warning("partition_init_failed", partition=p, error=_describe(err), retry_in_s=RETRY_INIT_S)
                continue
            records = self._pending.pop(p)
            state = PartitionState(p, next_offset=committed if committed >= 0 else low)
            clock = DeadlineClock(self.config.use_now_if_no_marker_seen_ms, self._monotonic)
            self._partitions[p] = Partition(state, clock, high, self._monotonic())
            for record in records:
                self._handle(record)

    def _on_revoke(self, consumer: KafkaConsumer, partitions: list[TopicPartition]) -> None:
        try:
            self._commit([tp.partition for tp in partitions], wait=True)
        finally:
            self._drop(consumer, partitions, "partitions_revoked")

    def _on_lost(self, consumer: KafkaConsumer, partitions: list[TopicPartition]) -> None:
        self._drop(consumer, partitions, "partitions_lost")

    def _drop(self, consumer: KafkaConsumer, partitions: list[TopicPartition], event: str) -> None:
        for tp in partitions:
            self._partitions.pop(tp.partition, None)
            self._pending.pop(tp.partition, None)
        try:
            _kafka.unassign(consumer, partitions, self._eager)
        except Exception as err:  # noqa: BLE001 - see above
            log.error("rebalance_callback_failed", callback=event, error=_describe(err))
        log.info(event, partitions=[tp.partition for tp in partitions])

    def _on_client_error(self, err: KafkaError) -> None:
        cannot_join = self._join_watch.check(err, bool(self._partitions or self._pending))
        if cannot_join is not None and self._fatal is None:
            self._fatal = cannot_join
            log.error("tracker_fatal", error=str(cannot_join))
            self.stop()
            return
        # Repeats many times a second while the broker is away: say it every few seconds, with what we wait for.
        if self._monotonic() - self._last_complaint >= COMPLAIN_EVERY_S:
            self._last_complaint = self._monotonic()
            log.warning("tracker_waiting_for_kafka", bootstrap_servers=self.config.bootstrap_servers,
                        error=err.str(), code=err.name(), assigned=sorted(self._partitions))

    def _shutdown(self, timeout_s: float = SHUTDOWN_S) -> None:
        self._resume_gc()
        deadline = self._monotonic() + timeout_s
        # Finish what is under way: copies produced get their End, so the next owner does not resend them.
        redeliverer = self._redeliverer
        while (redeliverer.outstanding or redeliverer.copies_awaiting_end) and self._monotonic() < deadline:
            redeliverer.poll(self._partitions.__contains__)
            time.sleep(0.02)
        self._copy_log.flush()
        self._sender.close(max(0.0, deadline - self._monotonic()))
        self._markers.close(max(0.0, deadline - self._monotonic()))
        self._commit(list(self._partitions))
        self._control.close()
        closer = threading.Thread(target=self._close_consumer, name="kmq-tracker-close", daemon=True)
        closer.start()
        closer.join(max(1.0, deadline - self._monotonic()))  # with the broker down, leaving the group may hang
        log.info("tracker_stopped", unfinished=redeliverer.unfinished)

    def _close_consumer(self) -> None:
        try:
            self._consumer.close()
        except Exception as err:  # noqa: BLE001 - closing: nothing left to save
            log.warning("tracker_close_failed", error=_describe(err))

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
        queues: dict[str, dict[str, int]] = self.snapshot()["queues"]  # type: ignore[assignment]
        for queue in self._published_queues - queues.keys():  # drained, or its partition moved: not stale figures
            self.metrics.in_flight.labels(queue).set(0)
            self.metrics.oldest_age.labels(queue).set(0)
        for queue, figures in queues.items():
            self.metrics.in_flight.labels(queue).set(figures["in_flight"])
            self.metrics.oldest_age.labels(queue).set(max(0, clock_ms - figures["oldest_start_ms"]) / 1000)
        self._published_queues = set(queues)
        self.metrics.consumer_lag.clear()
        for p, part in self._partitions.items():
            try:
                _low, high = self._consumer.get_watermark_offsets(TopicPartition(self.config.marker_topic, p),
                                                                  cached=True) or (0, 0)
            except Exception:  # noqa: BLE001 - a gauge can wait for the next round
                continue
            self.metrics.consumer_lag.labels(str(p)).set(max(0, high - part.state.next_offset))

    def health(self) -> str | None:
        """For /healthz: None when healthy, else why not."""
        if self.stopped:
            return "stopping"
        return self._probe()

    @property
    def partitions(self) -> dict[int, Partition]:
        return self._partitions


def _on_commit(err: KafkaError | None, _partitions: list[TopicPartition]) -> None:
    if err is not None and err.code() != KafkaError._NO_OFFSET:
        log.warning("tracker_commit_failed", error=f"{err.str()} ({err.name()})")


def _describe(err: BaseException) -> str:
    """One line for any error, a bare KafkaError (which formats badly) included."""
    if isinstance(err, KafkaException) and err.args and isinstance(err.args[0], KafkaError):
        return f"{err.args[0].str()} ({err.args[0].name()})"
    return f"{type(err).__name__}: {err}"

