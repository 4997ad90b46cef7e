"""RedeliveryTracker: reads the markers topic, tracks in-flight messages, redelivers the expired ones.

Replicas share the markers partitions through consumer group ``kafka-mq-redelivery`` (MarkersGroup). Per assigned
partition: a PartitionState and a DeadlineClock, rebuilt by replaying from the committed offset (the oldest in-flight
Start). Nothing is redelivered from a partition until the replay reaches the end offset seen at assignment (catch-up
gate). An expired message is produced again to the messages topic (or the dead-letter topic once it has had
``max_deliveries``), then an End marker for the old id is written; failures are retried, never dropped.

The loop, one turn: 1. read markers into the partitions' states (MarkerFold); 2. start pending partitions, open the
catch-up gates; 3. fire what expired (Expiry); 4. move redeliveries on (Redeliverer, RedeliveryRecorder); 5. commit
and publish. It sleeps in the poll until a marker comes or the next deadline that can fire is due.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import structlog
from confluent_kafka import TopicPartition

from kmq import _kafka, wire
from kmq._kafka.factory import ClientFactory, ControlClient, KafkaClients, ProducerClient
from kmq._kafka.group_view import GroupAdmin, KafkaGroupAdmin
from kmq.config import MARKER_FORMAT_KMQ, Config
from kmq.errors import KafkaClientError, KmqError
from kmq.metrics_http import PROBE_TIMEOUT_S, BrokerProbe
from kmq.redelivery.clock import Monotonic
from kmq.redelivery.clock_probe import ClockProbes
from kmq.redelivery.expiry import POLL_S, Expiry
from kmq.redelivery.health import TrackerHealth
from kmq.redelivery.heap_trim import HeapTrim
from kmq.redelivery.marker_fold import MarkerFold
from kmq.redelivery.markers_group import MarkersGroup
from kmq.redelivery.metrics import StatePublisher, TrackerMetrics
from kmq.redelivery.partitions import OwnedPartitions, Partition
from kmq.redelivery.rebuild_gc import RebuildGc
from kmq.redelivery.record_reader import LazyReader, RecordReader
from kmq.redelivery.recorder import RedeliveryRecorder
from kmq.redelivery.redeliverer import Redeliverer
from kmq.redelivery.scheduler import Scheduler
from kmq.topic_sets import TopicSet

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

#: The longest the loop sleeps when nothing at all is pending (no deadline, no redelivery, no partition rebuilding):
#: an idle tracker wakes twice a second, not twenty times.
IDLE_POLL_S = 0.5
#: How often the loop looks for answers while a read-back or a write of a redelivery is on its way: they come on other
#: threads and only the loop moves them on, so the idle wait would add up to IDLE_POLL_S to a redelivery's lag. Only
#: while answers keep coming (the last one, or the last request, within ANSWER_FAST_S): a broker gone mid-redelivery
#: leaves them unanswered for minutes, and the loop is not spun on them.
ANSWER_POLL_S = 0.005
ANSWER_FAST_S = 0.5
#: After SIGTERM: time to finish redeliveries under way, write their Ends, commit and leave, even with the broker
#: down (what is unfinished then is redelivered by the next owner).
SHUTDOWN_S = 10.0


@dataclass(slots=True)
class TrackerClients:
    """The tracker's Kafka clients beside its group consumer, closed together at the end."""

    #: Copies to the messages (or dead-letter) topic.
    sender: ProducerClient
    #: Ends and clock probes to the markers topic.
    markers: ProducerClient
    #: The control topic (purges).
    control: ControlClient
    #: Reads records back for Starts by reference.
    reader: LazyReader

    def close(self, deadline: float, monotonic: Monotonic) -> None:
        self.reader.close(max(0.5, deadline - monotonic()))
        self.sender.close(max(0.0, deadline - monotonic()))
        self.markers.close(max(0.0, deadline - monotonic()))
        self.control.close()


class RedeliveryTracker:
    """One tracker replica. ``run()`` loops until ``stop()``; the loop thread owns all partition state.

    ``clients`` builds its Kafka clients (kmq._kafka.factory: confluent-kafka by default, fakes in unit tests);
    ``group_admin`` describes its group for health (made from the config by default)."""

    def __init__(self, config: Config, topics: TopicSet | None = None, *, metrics: TrackerMetrics | None = None,
                 monotonic: Monotonic = time.monotonic, client_id: str = wire.TRACKER_CLIENT_ID,
                 clients: ClientFactory | None = None, stop_timeout_s: float = SHUTDOWN_S,
                 group_admin: GroupAdmin | None = None) -> None:
        factory = clients or KafkaClients()
        self.config = config
        #: The topic set it serves (default: the default set), in that set's tracker group.
        self.topics = topics = topics or config.default_topics
        self._stop_timeout_s = stop_timeout_s
        self.metrics = metrics or TrackerMetrics()
        self._monotonic = monotonic
        self._stop = threading.Event()
        self._fatal: KmqError | None = None
        self._gc = RebuildGc()
        self._heap = HeapTrim()
        self._owned = OwnedPartitions(config.use_now_if_no_marker_seen_ms, monotonic,
                                      lambda p: TopicPartition(topics.markers, p),
                                      writing=lambda p: self._redeliverer.writing(p))
        sender = factory.producer(_kafka.messages_producer_settings(config, f"{client_id}-sender"), "sender",
                                  topics.messages)
        markers = factory.producer(_kafka.markers_producer_settings(config, f"{client_id}-markers"),
                                   "tracker-markers", topics.markers)
        #: Purges (kmq purge): an expired message enqueued before its queue's purge time is Ended, not copied.
        control = factory.control(config, topics, None).start()
        #: Reads back the records of Starts by reference when they are redelivered (made on the first).
        reader = LazyReader(lambda: RecordReader(
            factory.reader(_kafka.reader_settings(config, topics.private_group("read-back"), f"{client_id}-reader")),
            topics.messages, self._redeliverer.read_done, monotonic=monotonic))
        self._clients = TrackerClients(sender, markers, control, reader)
        self._recorder = RedeliveryRecorder(self.metrics, self._clock_now_ms)
        self._redeliverer = Redeliverer(config, topics, sender, markers, monotonic, self._recorder.record, client_id,
                                        reader)
        self._fold = MarkerFold(self._owned, self.metrics.malformed, monotonic)
        #: Fresh broker time for partitions caught up on (kmq format only: see clock_probe).
        probes = (ClockProbes(markers, topics.markers, client_id, monotonic)
                  if config.marker_format == MARKER_FORMAT_KMQ else None)
        self._expiry = Expiry(self._owned, probes, monotonic, config.max_deliveries,
                              lambda: control.state.purged_before)
        self._publisher = StatePublisher(self.metrics, monotonic) if config.metrics_port > 0 else None
        self._group = MarkersGroup(config, topics, factory.group_consumer, client_id, self._owned, self._fold.fold,
                                   monotonic, on_assigned=self._gc.pause, on_fatal=self._fail)
        #: Recurring schedules (kmq schedule): this replica fires those it is primary for, and stands by for the rest.
        self._scheduler = Scheduler(config, topics, control, lambda: self._group.membership.assigned,
                                    f"{client_id}@{_kafka.instance_id()}", factory)
        admin = group_admin or KafkaGroupAdmin(config)
        self._health = TrackerHealth(
            config, topics, broker=BrokerProbe(markers.client, topics.markers,
                                               stalled=lambda: max(markers.stalled_s(), sender.stalled_s())),
            held_nothing_for_s=self._group.membership.held_nothing_for_s, member_id=self._group.member_id,
            view=lambda: admin.view(topics.tracker_group, topics.markers, PROBE_TIMEOUT_S),
            stopping=self._stop.is_set, monotonic=monotonic)

    # --- the loop -------------------------------------------------------------------------------------

    def run(self) -> None:
        """Tracks and redelivers until ``stop()``, then hands everything back cleanly. Raises KmqError when it
        stopped because it cannot go on (a group it cannot join, out of its group past ``unassigned_exit_ms``)."""
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
        3. fire what expired; 4. move redeliveries on; 5. commit, publish, and look at the group."""
        read = self._fold.fold(self._group.consume(self._wait_s()))
        self._group.records_read(read)
        self._expiry.read_probe_answers()
        self._heap.folded(read + self._fold.fold(self._owned.init_pending(self._group.consumer)))
        self._open_gates()
        for attempt in self._expiry.fire():
            self._redeliverer.submit(attempt)
        self._redeliverer.poll(self._owned.holds)
        self._recorder.copy_log.flush()
        self._group.commit_if_due()
        if self._publisher is not None:
            self._publisher.maybe_publish(self._owned, self._group.lag_of)
        self._health.pulse.beat()
        self._rejoin_if_out_of_group()
        self._exit_if_out_of_work()

    def _wait_s(self) -> float:
        """ANSWER_POLL_S while a redelivery waits for its record read back or its copy or End written (and answers
        keep coming); else until the next deadline that can fire; POLL_S while other work is under way (unanswered
        reads and writes too); IDLE_POLL_S when nothing is."""
        redeliverer = self._redeliverer
        if ((redeliverer.reading or redeliverer.outstanding)
                and self._monotonic() - redeliverer.moved_at < ANSWER_FAST_S):
            return ANSWER_POLL_S
        wait_s = self._expiry.wait_s()
        if wait_s is not None:
            return wait_s
        busy = (redeliverer.unfinished or self._gc.paused or self._expiry.probing or not self._owned.all_caught_up())
        return POLL_S if busy else IDLE_POLL_S

    # 2. the catch-up gate

    def _open_gates(self) -> None:
        for p, part in self._owned.newly_caught_up():
            seconds = self._monotonic() - part.assigned_at
            self.metrics.rebuild_seconds.observe(seconds)
            log.info("partition_rebuilt", partition=p, markers_read=part.markers_read,
                     in_flight=len(part.state), seconds=round(seconds, 3))
            self._expiry.caught_up(p)
        if self._gc.paused and self._owned.all_caught_up():
            self._gc.resume()

    def _clock_now_ms(self, partition: int) -> int | None:
        part = self._owned.get(partition)
        return part.clock.now_ms() if part else None

    # --- the group --------------------------------------------------------------------------------------

    def _rejoin_if_out_of_group(self) -> None:
        """Kept out of its group by its coordinator past librdkafka's own rejoin: a new group consumer joins."""
        reason = self._health.rejoin_reason()
        if reason is not None:
            self.metrics.rejoins.inc()
            self._group.rejoin(reason)

    def _exit_if_out_of_work(self) -> None:
        """A replica out of its group (or given nothing) while markers partitions have no tracker, for longer than
        ``unassigned_exit_ms``: it stops, and ``run()`` raises, for its supervisor to start it again."""
        reason = self._health.exit_reason()
        if reason is not None:
            self._fail(KafkaClientError(
                f"{reason}: exiting for a restart (unassigned_exit_ms={self.config.unassigned_exit_ms})"))

    def _fail(self, error: KmqError) -> None:
        """Stops for good: ``run()`` raises ``error`` once everything is handed back (the first error wins)."""
        if self._fatal is None:
            self._fatal = error
            log.error("tracker_fatal", error=str(error))
            self.stop()

    # --- stopping ---------------------------------------------------------------------------------------

    def _shutdown(self, timeout_s: float) -> None:
        self._gc.resume()
        deadline = self._monotonic() + timeout_s
        # Finish what is under way: copies produced get their End, so the next owner does not resend them.
        redeliverer = self._redeliverer
        while (redeliverer.outstanding or redeliverer.copies_awaiting_end) and self._monotonic() < deadline:
            redeliverer.poll(self._owned.holds)
            time.sleep(0.02)
        self._recorder.copy_log.flush()
        self._scheduler.close(max(0.5, deadline - self._monotonic()))
        self._clients.close(deadline, self._monotonic)
        self._group.commit(list(self._owned))
        closer = threading.Thread(target=self._group.close, name="kmq-tracker-close", daemon=True)
        closer.start()
        closer.join(max(1.0, deadline - self._monotonic()))  # with the broker down, leaving the group may hang
        log.info("tracker_stopped", unfinished=redeliverer.unfinished)

    # --- observability ------------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, object]:
        """Per-partition and per-queue figures, for metrics and tests (loop thread, or after stop)."""
        return {
            "partitions": {p: {"in_flight": len(part.state), "caught_up": part.caught_up,
                               "commit_offset": part.state.commit_offset(), "next_offset": part.state.next_offset}
                           for p, part in self._owned.items()},
            "queues": {q: {"in_flight": c, "oldest_start_ms": o} for q, (c, o) in self._owned.per_queue().items()},
        }

    def health(self) -> str | None:
        """For /readyz and /healthz: None when healthy, else why not."""
        return self._health.ready()

    def liveness(self) -> str | None:
        """For /livez: None unless a restart is the way back."""
        return self._health.live()

    def stalled(self) -> str | None:
        """Why the loop is stuck (it has not turned for LOOP_STALL_S), or None: for a watchdog thread."""
        return self._health.stalled()

    @property
    def partitions(self) -> dict[int, Partition]:
        """The partitions held now (caught up or rebuilding)."""
        return dict(self._owned.items())
