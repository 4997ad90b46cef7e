"""Scheduler: a tracker replica's thread that fires recurring schedules (kmq schedule, docs/concepts/dedup.md).

It reads the schedules and the ticks fired last from the tracker's control follower, asks kmq.redelivery.firing
what to do with each, and fires a tick by sending the schedule's payload with the tick's dedup id (partitioned by
it, as every deduplicated send is), then writing ``fired/<name>`` to the control topic so standbys stand down. A
send that fails is tried again at the next decision (the tick is still due); a crash between the send and the
"fired" record makes a standby send the tick again, and the dedup id makes that copy a duplicate.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection

import structlog

from kmq import _kafka, wire
from kmq._kafka.factory import ClientFactory, ControlClient, ProducerClient
from kmq.client.producer import Producer
from kmq.config import Config
from kmq.errors import KmqError
from kmq.redelivery.firing import Decision, decide, primary_partition
from kmq.topic_sets import TopicSet
from kmq.wire.schedule import Schedule, fired_record

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

#: The longest the thread sleeps: it looks at the control state (new schedules, "fired" records) at least this often.
MAX_SLEEP_S = 0.2
#: How long one tick's send may take before it is tried again.
SEND_TIMEOUT_S = 10.0


class Scheduler:
    """Fires the schedules this replica is primary or standby for; ``start()`` then ``close()``."""

    def __init__(self, config: Config, topics: TopicSet, control: ControlClient, owned: Callable[[], Collection[int]],
                 by: str, clients: ClientFactory, now_ms: Callable[[], int] = wire.now_ms) -> None:
        self._config = config
        #: The topic set this tracker serves: its schedules are on its control topic, their primaries by its markers.
        self._topics = topics
        self._control = control
        self._owned = owned
        self._by = by
        self._clients = clients
        self._now_ms = now_ms
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kmq-scheduler", daemon=True)
        self._producers: dict[str, Producer] = {}
        self._control_producer: ProducerClient | None = None
        self._partitions = 0
        #: name → the latest tick this replica fired or let go (the control topic may not have said so yet).
        self._done: dict[str, int] = {}
        #: name → (when to decide again, the facts the decision was taken on): decided again sooner only if they change.
        self._asleep: dict[str, tuple[int, tuple[Schedule, int, bool]]] = {}
        self._since_ms = 0
        #: Ticks fired by this replica, and of those, fired late (missed, under fire-last).
        self.fired = 0
        self.fired_late = 0

    def start(self) -> Scheduler:
        self._since_ms = self._now_ms()
        self._thread.start()
        return self

    def close(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        for producer in self._producers.values():
            producer.close(timeout_s)
        if self._control_producer is not None:
            self._control_producer.close(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                wake_ms = self._round()
            except KmqError as err:  # the broker away: every due tick is still due next round
                log.warning("schedule_round_failed", error=str(err))
                wake_ms = self._now_ms() + 1000
            except Exception as err:  # noqa: BLE001 - this thread must outlive any one schedule's failure
                log.error("schedule_round_failed", error=f"{type(err).__name__}: {err}")
                wake_ms = self._now_ms() + 1000
            self._stop.wait(min(MAX_SLEEP_S, max(0.0, (wake_ms - self._now_ms()) / 1000)))

    def _round(self) -> int:
        """Decides (and fires) every schedule once; returns when to look again."""
        state = self._control.state
        schedules = dict(state.schedules)  # a copy: the follower's thread adds to it
        fired = dict(state.fired)
        wake_ms = self._now_ms() + 1000
        if not schedules:
            return wake_ms
        for gone in [name for name in self._asleep if name not in schedules]:  # removed: forget what was kept
            del self._asleep[gone]
            self._done.pop(gone, None)
        owned = self._owned()
        partitions = self._marker_partitions()
        for name, schedule in schedules.items():
            self._producer_for(schedule.queue)  # before its first tick, not at it
            while not self._stop.is_set():
                done = max(fired.get(name, 0), self._done.get(name, 0))
                primary = primary_partition(name, partitions) in owned
                facts = (schedule, done, primary)
                asleep = self._asleep.get(name)
                if asleep is not None and asleep[1] == facts and self._now_ms() < asleep[0]:
                    wake_ms = min(wake_ms, asleep[0])  # nothing changed and nothing due: no cron arithmetic
                    break
                decision = decide(schedule, done_ms=done, now_ms=self._now_ms(), primary=primary,
                                  standby_since_ms=self._since_ms,
                                  standby_delay_ms=self._config.schedule_standby_delay_ms,
                                  grace_ms=self._config.schedule_misfire_grace_ms)
                if not self._act(schedule, decision):
                    self._asleep[name] = (decision.wake_ms, facts)
                    wake_ms = min(wake_ms, decision.wake_ms)
                    break
                fired[name] = max(fired.get(name, 0), self._control.state.fired.get(name, 0))
        return wake_ms

    def _act(self, schedule: Schedule, decision: Decision) -> bool:
        """Fires or lets go what ``decision`` says; True when there was something (decide again at once)."""
        if decision.skipped is not None:
            log.info("schedule_tick_skipped", schedule=schedule.name, tick=_iso(decision.skipped),
                     note="missed while no tracker ran; the schedule's policy is skip")
            self._done[schedule.name] = decision.skipped
            return True
        if decision.fire is None:
            return False
        self._fire(schedule, decision.fire, decision.late)
        return True

    def _producer_for(self, queue: str) -> Producer:
        """The queue's producer, made (and its partition count looked up) when a schedule of it is first seen: a
        tick is then one round trip, not a client's start-up."""
        producer = self._producers.get(queue)
        if producer is None:
            producer = self._producers[queue] = Producer(self._config, queue)
            producer._partitions()
        return producer

    def _fire(self, schedule: Schedule, tick_ms: int, late: bool) -> None:
        producer = self._producer_for(schedule.queue)
        sent = producer.send(schedule.payload, schedule.headers or None, SEND_TIMEOUT_S,
                             dedup_id=schedule.dedup_id(tick_ms))
        now_ms = self._now_ms()
        self._done[schedule.name] = tick_ms
        self.fired += 1
        self.fired_late += late
        key, value = fired_record(schedule.name, tick_ms, now_ms, self._by)
        self._producer().produce(self._topics.control, value, key)
        log.info("schedule_tick_fired", schedule=schedule.name, queue=schedule.queue, tick=_iso(tick_ms),
                 message_id=str(sent), lateness_ms=now_ms - tick_ms, missed=late)

    def _producer(self) -> ProducerClient:
        if self._control_producer is None:
            self._control_producer = self._clients.producer(
                _kafka.messages_producer_settings(self._config, f"{self._by}-scheduler"), "scheduler",
                self._topics.control)
        return self._control_producer

    def _marker_partitions(self) -> int:
        if not self._partitions:
            self._partitions = len(_kafka.topic_partitions(self._producer().client, self._config,
                                                           self._topics.markers, "markers"))
        return self._partitions


def _iso(ms: int) -> str:
    return wire.datetime_from_ms(ms).isoformat(timespec="milliseconds")
