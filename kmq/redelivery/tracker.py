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
from typing import Any

import structlog
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka import Message as KafkaMessage

from kmq import _kafka, wire
from kmq._kafka.commit_policy import CommitPolicy
from kmq._kafka.factory import ClientFactory, KafkaClients
from kmq._kafka.group import GroupMembership
from kmq.config import MARKER_FORMAT_KMQ, Config
from kmq.errors import KmqError, MarkerDecodeError
from kmq.metrics_http import BrokerProbe
from kmq.redelivery.clock import Monotonic
from kmq.redelivery.clock_probe import ClockProbes
from kmq.redelivery.copy_log import CopyLog
from kmq.redelivery.metrics import StatePublisher, TrackerMetrics
from kmq.redelivery.partition_state import PartitionState
from kmq.redelivery.partitions import OwnedPartitions, Partition
from kmq.redelivery.record_reader import LazyReader, RecordReader
from kmq.redelivery.redeliverer import Attempt, Redeliverer
from kmq.redelivery.scheduler import Scheduler
from kmq.topic_sets import TopicSet
from kmq.wire import CLOCK_PROBE_KEY
from kmq.wire.marker_batch import decode_batch

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

BATCH = 1000
MIN_COMMIT_INTERVAL_S = 0.1
#: The longest the loop waits for markers; less when a deadline falls due sooner.
POLL_S = 0.05
#: How often the loop looks for a clock probe sent less than PROBE_FAST_S ago (see horizon.py).
PROBE_POLL_S = 0.005
PROBE_FAST_S = 0.2
METRICS_INTERVAL_S = 5.0
#: How often the tracker says it cannot reach the broker.
COMPLAIN_EVERY_S = 5.0
#: After SIGTERM: time to finish redeliveries under way, write their Ends, commit and leave, even with the broker
#: down (what is unfinished then is redelivered by the next owner).
SHUTDOWN_S = 10.0


class RedeliveryTracker:
    """One tracker replica. ``run()`` loops until ``stop()``; the loop thread owns all partition state.

    ``clients`` builds its Kafka clients (kmq._kafka.factory: confluent-kafka by default, fakes in unit tests)."""

    def __init__(self, config: Config, topics: TopicSet | None = None, *, metrics: TrackerMetrics | None = None,
                 monotonic: Monotonic = time.monotonic, client_id: str = wire.TRACKER_CLIENT_ID,
                 clients: ClientFactory | None = None, stop_timeout_s: float = SHUTDOWN_S) -> None:
        clients = clients or KafkaClients()
        self.config = config
        #: The topic set it serves (default: the default set), in that set's tracker group.
        self.topics = topics = topics or config.default_topics
        self._stop_timeout_s = stop_timeout_s
        self.metrics = metrics or TrackerMetrics()
        self._monotonic = monotonic
        self._stop = threading.Event()
        self._fatal: KmqError | None = None
        # At most every MIN_COMMIT_INTERVAL_S however many markers come: a commit holds the loop ~1 ms while
        # librdkafka fetches (measured), and at kafka-mq-go's 1,000 markers a commit that was 50 commits a second.
        self._commits = CommitPolicy(config.num_offsets_per_commit, config.tracker_commit_interval_ms / 1000,
                                     monotonic, min_interval_s=MIN_COMMIT_INTERVAL_S)
        self._gc = RebuildGc()
        self._owned = OwnedPartitions(config.use_now_if_no_marker_seen_ms, monotonic,
                                      lambda p: TopicPartition(topics.markers, p))
        self._sender = clients.producer(_kafka.messages_producer_settings(config, f"{client_id}-sender"), "sender",
                                        topics.messages)
        self._markers = clients.producer(_kafka.markers_producer_settings(config, f"{client_id}-markers"),
                                         "tracker-markers", topics.markers)
        self._probe = BrokerProbe(self._markers.client, topics.markers,
                                  stalled=lambda: max(self._markers.stalled_s(), self._sender.stalled_s()))
        #: Purges (kmq purge): an expired message enqueued before its queue's purge time is Ended, not copied.
        self._control = clients.control(config, topics, None).start()
        #: Recurring schedules (kmq schedule): this replica fires those it is primary for, and stands by for the rest.
        self._scheduler = Scheduler(config, topics, self._control, lambda: self._membership.assigned,
                                    f"{client_id}@{_kafka.instance_id()}", clients)
        #: Reads back the records of Starts by reference when they are redelivered (made on the first).
        self._reader = LazyReader(lambda: RecordReader(
            clients.reader(_kafka.reader_settings(config, topics.private_group("read-back"), f"{client_id}-reader")),
            topics.messages, self._redeliverer.read_done, monotonic=monotonic))
        self._redeliverer = Redeliverer(config, topics, self._sender, self._markers, monotonic, self._record_redelivery,
                                        client_id, self._reader)
        self._copy_log = CopyLog()
        self._counters: dict[tuple[str, str], list[Any]] = {}
        #: Fresh broker time for partitions caught up on (kmq format only: see clock_probe).
        self._clock_probes = (ClockProbes(self._markers, topics.markers, client_id, monotonic)
                              if config.marker_format == MARKER_FORMAT_KMQ else None)
        self._complaints = Throttle(COMPLAIN_EVERY_S, monotonic)
        self._publisher = StatePublisher(self.metrics, monotonic) if config.metrics_port > 0 else None
        self._membership = GroupMembership(
            topics.tracker_group, config.assignment_strategy, eager=config.eager_rebalance,
            join_bound_s=config.connect_timeout_ms / 1000, on_assigned=self._on_assigned,
            on_revoking=lambda partitions: self._commit(partitions, wait=True), on_dropped=self._on_dropped)
        self._consumer = clients.group_consumer({
            **_kafka.consumer_settings(config.replace(client_id=""), topics.tracker_group, client_id),
            "fetch.max.bytes": 64 * 1024 * 1024, "max.partition.fetch.bytes": 16 * 1024 * 1024,
            "error_cb": self._on_client_error, "on_commit": _on_commit,
        })
        self._membership.subscribe(self._consumer, [topics.markers])

    # --- the loop -------------------------------------------------------------------------------------

    def run(self) -> None:
        """Tracks and redelivers until ``stop()``, then hands everything back cleanly."""
        log.info("tracker_started", marker_topic=self.topics.markers, group=self.topics.tracker_group,
                 kafka=self.config.redacted_kafka())
        self._scheduler.start()
        try:
            while not self._stop.is_set():
                self._poll_iteration()
        finally:
            self._shutdown(self._stop_timeout_s)
        if self._fatal is not None:
            raise self._fatal

    def stop(self) -> None:
        """Asks ``run()`` to return (it commits and leaves the group first). Safe from any thread."""
        self._stop.set()

    @property
    def stopped(self) -> bool:
        """True once ``stop()`` was called."""
        return self._stop.is_set()

    def _poll_iteration(self) -> None:
        """1. read markers into the partitions' states; 2. start pending partitions, open the catch-up gates;
        3. fire what expired; 4. move redeliveries on; 5. commit and publish."""
        self._handle_all(self._consumer.consume(BATCH, self._poll_timeout_s()))
        if self._clock_probes is not None:
            for p, timestamp_ms, seen_at in self._clock_probes.answers():
                part = self._owned.get(p)
                if part is not None:
                    part.clock.observe(timestamp_ms, seen_at)
        self._handle_all(self._owned.init_pending(self._consumer))
        self._open_gates()
        self._fire_expired()
        self._redeliverer.poll(self._owned.__contains__)
        self._copy_log.flush()
        if self._commits.due():
            self._commit(list(self._owned))
        if self._publisher is not None:
            self._publisher.maybe_publish(self._owned, self._lag_of)

    def _poll_timeout_s(self) -> float:
        """Wakes for the next deadline of a caught-up partition rather than up to POLL_S after it."""
        timeout_ms = POLL_S * 1000
        for _p, part in self._owned.items():
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

    # 1. read

    def _probe_wait_ms(self, sent_at: float | None) -> float:
        """While a due deadline waits for its probe: a probe is back within milliseconds on a healthy partition,
        so look often at first; a partition that does not take it (a failover) is not spun on."""
        young = sent_at is not None and self._monotonic() - sent_at < PROBE_FAST_S
        return PROBE_POLL_S * 1000 if young else POLL_S * 1000

    # 1. read

    def _handle_all(self, records: list[KafkaMessage]) -> None:
        """Folds a poll's records into their partitions' states, in order. Per record only what must be: each
        partition's clock observes its newest timestamp once per poll, commits count once per poll."""
        if not records:
            return
        newest: dict[int, tuple[Partition, int]] = {}
        route = self._owned.route
        for record in records:
            err = record.error()
            if err is not None:
                self._consume_error(err)
                continue
            part = route(record)
            if part is None:
                continue
            offset = record.offset() or 0
            kind, timestamp_ms = record.timestamp()
            if not kind or timestamp_ms is None or timestamp_ms < 0:
                timestamp_ms = 0
            part.markers_read += 1
            state = part.state
            known = newest.get(state.partition)
            if known is None or timestamp_ms > known[1]:
                newest[state.partition] = (part, timestamp_ms)
            value = record.value()
            try:
                if value and value[0] == 0:  # marker_batch.is_batch
                    self._apply_batch(state, offset, timestamp_ms, value)
                else:
                    state.apply_plain(offset, timestamp_ms, value)
            except MarkerDecodeError as bad:
                self.metrics.malformed.inc()
                log.warning("malformed_marker", partition=state.partition, offset=offset, reason=bad.reason)
            if part.horizon.probe_sent_at is not None and record.key() == CLOCK_PROBE_KEY:
                part.horizon.read(timestamp_ms, probe=True, monotonic_s=self._monotonic())
            if offset >= state.next_offset:
                state.next_offset = offset + 1
        for part, timestamp_ms in newest.values():
            part.clock.observe(timestamp_ms)
            part.horizon.read(timestamp_ms)
        self._commits.note(len(records))

    def _apply_batch(self, state: PartitionState, offset: int, timestamp_ms: int, value: bytes) -> None:
        batch = decode_batch(value)
        if batch.owner_tracked:
            # Message groups (#33): the owner of a grouped message's partition redelivers it in place, in its
            # group's order; a tracker keeps no deadline for it and never copies it (docs/concepts/groups.md).
            return
        state.apply_batch(offset, timestamp_ms, batch)
        if batch.hello:
            log.info("consumer_restarted", queue=batch.key.decode(errors="replace"), client_id=batch.client_id,
                     instance_id=batch.instance_id, taken_over=state.stats["taken_over"])

    def _consume_error(self, err: KafkaError) -> None:
        if _kafka.is_fatal(err):
            raise _kafka.to_kmq_error(KafkaException(err), "tracker consumer")
        log.warning("markers_consume_error", error=err.str())

    # 2. the catch-up gate

    def _open_gates(self) -> None:
        for p, part in self._owned.newly_caught_up():
            seconds = self._monotonic() - part.assigned_at
            self.metrics.rebuild_seconds.observe(seconds)
            log.info("partition_rebuilt", partition=p, markers_read=part.markers_read,
                     in_flight=len(part.state), seconds=round(seconds, 3))
            if self._clock_probes is not None:
                self._clock_probes.send(p)
        if self._gc.paused and self._owned.all_caught_up():
            self._gc.resume()

    # 3. fire, 4. redeliver

    def _fire_expired(self) -> None:
        purges = self._control.state.purged_before
        for p, part in self._owned.items():
            if not part.caught_up:
                continue  # the catch-up gate: a half-replayed log would fire messages whose End is just ahead
            now_ms = part.clock.now_ms()
            if now_ms is None:
                continue
            if self._clock_probes is not None:  # only on evidence that the log is read up to the deadline
                now_ms, probe = part.horizon.limit(now_ms, part.state.next_deadline_ms(), self._monotonic())
                if probe:
                    self._clock_probes.send(p)
            for item in part.state.take_expired(now_ms):
                if purges and (item.enqueued_at_ms or item.start_timestamp_ms) < purges.get(item.queue, 0):
                    self._redeliverer.submit(Attempt(p, item, dead_letter=False, purged=True))
                    continue
                dead = 0 < self.config.max_deliveries <= (item.delivery_count or 1) and not item.returned
                self._redeliverer.submit(Attempt(p, item, dead))

    def _record_redelivery(self, attempt: Attempt) -> None:
        item = attempt.item
        queue = item.queue
        lag_s = self._redelivery_lag_s(attempt)
        event = "unreadable" if attempt.unreadable else "dead_lettered" if attempt.dead_letter else "redelivered"
        counters = self._counters.get((event, queue))
        if counters is None:  # labels() costs more than the copy itself: once per queue, not per message
            metrics = self.metrics
            counters = [(metrics.dead_letters if attempt.dead_letter else metrics.redeliveries).labels(queue)]
            if attempt.unreadable:
                counters.append(metrics.unreadable.labels(queue))
            self._counters[(event, queue)] = counters
        for counter in counters:
            counter.inc()
        if lag_s is not None:
            self.metrics.redelivery_lag.observe(lag_s)
        self._copy_log.add(event, queue, str(item.message_id), str(item.first_id), attempt.delivery_count,
                           None if lag_s is None else round(lag_s * 1000))

    def _redelivery_lag_s(self, attempt: Attempt) -> float | None:
        part = self._owned.get(attempt.partition)
        now_ms = part.clock.now_ms() if part else None
        return None if now_ms is None else max(0.0, (now_ms - attempt.item.deadline_ms) / 1000)

    # 5. commit

    def _commit(self, partitions: list[int], *, wait: bool = False) -> None:
        """Commits each partition's oldest in-flight Start. Asynchronous in the loop: with the broker away a
        synchronous commit blocks until it is back, and the loop must go on (the next commit carries the same or
        later offsets; close() waits for the last). Synchronous on revoke, so the next owner starts from it."""
        offsets = []
        for p in partitions:
            part = self._owned.get(p)
            if part is not None and part.caught_up:
                offsets.append(TopicPartition(self.topics.markers, p, part.state.commit_offset()))
        self._commits.committed()
        if not offsets:
            return
        try:
            self._consumer.commit(offsets=offsets, asynchronous=not wait)
        except Exception as err:  # noqa: BLE001 - the next commit carries the same or later offsets
            log.warning("tracker_commit_failed", error=_describe(err))

    # --- rebalances (GroupMembership calls these inside consume(), on the loop thread) -----------------

    def _on_assigned(self, partitions: list[int]) -> None:
        self._gc.pause()
        self._owned.assigned(partitions)
        self._handle_all(self._owned.init_pending(self._consumer, force=True))

    def _on_dropped(self, partitions: list[int], _lost: bool) -> None:
        self._owned.dropped(partitions)

    def _on_client_error(self, err: KafkaError) -> None:
        _kafka.Credentials.note(self.config.bootstrap_servers, self.config.kafka.get("sasl.username", ""), err)
        cannot_join = self._membership.cannot_join(err)
        if cannot_join is not None and self._fatal is None:
            self._fatal = cannot_join
            log.error("tracker_fatal", error=str(cannot_join))
            self.stop()
            return
        # Repeats many times a second while the broker is away: say it every few seconds, with what we wait for.
        if self._complaints.due():
            log.warning("tracker_waiting_for_kafka", bootstrap_servers=self.config.bootstrap_servers,
                        error=err.str(), code=err.name(), assigned=sorted(self._owned))

    # --- stopping ---------------------------------------------------------------------------------------

    def _shutdown(self, timeout_s: float) -> None:
        self._gc.resume()
        deadline = self._monotonic() + timeout_s
        # Finish what is under way: copies produced get their End, so the next owner does not resend them.
        redeliverer = self._redeliverer
        while (redeliverer.outstanding or redeliverer.copies_awaiting_end) and self._monotonic() < deadline:
            redeliverer.poll(self._owned.__contains__)
            time.sleep(0.02)
        self._copy_log.flush()
        self._reader.close(max(0.5, deadline - self._monotonic()))
        self._sender.close(max(0.0, deadline - self._monotonic()))
        self._markers.close(max(0.0, deadline - self._monotonic()))
        self._commit(list(self._owned))
        self._scheduler.close(max(0.5, deadline - self._monotonic()))
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
        return {
            "partitions": {p: {"in_flight": len(part.state), "caught_up": part.caught_up,
                               "commit_offset": part.state.commit_offset(), "next_offset": part.state.next_offset}
                           for p, part in self._owned.items()},
            "queues": {q: {"in_flight": c, "oldest_start_ms": o} for q, (c, o) in self._owned.per_queue().items()},
        }

    def _lag_of(self, partition: int) -> int | None:
        try:
            _low, high = self._consumer.get_watermark_offsets(TopicPartition(self.topics.markers, partition),
                                                              cached=True) or (0, 0)
        except Exception:  # noqa: BLE001 - a gauge can wait for the next round
            return None
        part = self._owned.get(partition)
        return None if part is None else max(0, int(high) - part.state.next_offset)

    def health(self) -> str | None:
        """For /healthz: None when healthy, else why not."""
        if self.stopped:
            return "stopping"
        return self._probe()

    @property
    def partitions(self) -> dict[int, Partition]:
        """The partitions held now (caught up or rebuilding)."""
        return dict(self._owned.items())


class RebuildGc:
    """A rebuild allocates millions of acyclic objects; the cyclic GC would scan them again and again (~30% of the
    rebuild time), so it pauses while partitions rebuild, then freezes what was built. The trackers of one process
    (one per topic set) share the pause: the GC runs again once none of them rebuilds."""

    _lock = threading.Lock()
    _holders = 0

    def __init__(self) -> None:
        self.paused = False

    def pause(self) -> None:
        with RebuildGc._lock:
            if self.paused or (RebuildGc._holders == 0 and not gc.isenabled()):
                return  # paused already, or the application keeps the GC off itself
            if RebuildGc._holders == 0:
                gc.disable()
            RebuildGc._holders += 1
            self.paused = True

    def resume(self) -> None:
        with RebuildGc._lock:
            if not self.paused:
                return
            self.paused = False
            RebuildGc._holders -= 1
            if RebuildGc._holders == 0:
                gc.freeze()
                gc.enable()


class Throttle:
    """``due()`` at most once every ``every_s``."""

    def __init__(self, every_s: float, monotonic: Monotonic) -> None:
        self._every_s = every_s
        self._monotonic = monotonic
        self._last = -every_s

    def due(self) -> bool:
        now = self._monotonic()
        if now - self._last < self._every_s:
            return False
        self._last = now
        return True


def _on_commit(err: KafkaError | None, _partitions: list[TopicPartition]) -> None:
    if err is not None and err.code() != KafkaError._NO_OFFSET:
        log.warning("tracker_commit_failed", error=f"{err.str()} ({err.name()})")


def _describe(err: BaseException) -> str:
    """One line for any error, a bare KafkaError (which formats badly) included."""
    if isinstance(err, KafkaException) and err.args and isinstance(err.args[0], KafkaError):
        return f"{err.args[0].str()} ({err.args[0].name()})"
    return f"{type(err).__name__}: {err}"
