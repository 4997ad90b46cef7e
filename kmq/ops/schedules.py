"""Recurring schedules, the library API behind ``kmq schedule``: add, list, pause, resume, remove, run now.

A schedule lives on the control topic (kmq.wire.schedule); the tracker group fires it (kmq.redelivery.scheduler),
so nothing here runs the schedule: it writes and reads its record.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kmq import wire
from kmq._kafka import control
from kmq.client.producer import Producer
from kmq.config import Config
from kmq.errors import PayloadTooLargeError, ScheduleError
from kmq.ops.stats import control_state
from kmq.wire import MessageId
from kmq.wire.control import ControlState
from kmq.wire.schedule import FIRE_LAST, SCHEDULE, Schedule, encode_schedule, ticks_after


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """A schedule as ``list`` shows it: its definition, the tick fired last and the next one."""

    schedule: Schedule
    #: The newest tick a tracker fired (ms since the epoch), None if none yet.
    last_fired_ms: int | None
    #: The next tick after now or the last fired (ms), None while paused.
    next_tick_ms: int | None


class Schedules:
    """The recurring schedules of one deployment; each lives on the control topic of its queue's topic set."""

    def __init__(self, config: Config) -> None:
        self.config = config

    def add(self, name: str, queue: str, cron: str, payload: bytes, *, tz: str = "UTC",
            headers: Mapping[str, str] | None = None, dedup_id_template: str = "", missed: str = FIRE_LAST,
            replace: bool = False) -> Schedule:
        """Adds a schedule (ScheduleError for a bad definition, or a name taken unless ``replace``); its first tick
        is the first after now."""
        if len(payload) > self.config.max_payload_bytes:
            raise PayloadTooLargeError(len(payload), self.config.max_payload_bytes)
        schedule = Schedule(name=name, queue=queue, cron=cron, payload=bytes(payload), tz=tz,
                            headers=dict(headers or {}), dedup_id_template=dedup_id_template, missed=missed,
                            active_from_ms=wire.now_ms())
        if not replace and name in self._state().schedules:
            raise ScheduleError("name", f"{name!r} exists: remove it first, or replace it")
        control.write_record(self.config, self.config.topics_for(queue), *encode_schedule(schedule))
        return schedule

    def list(self) -> list[ScheduleInfo]:
        """Every schedule, by name, with the tick fired last and the next one."""
        state = self._state()
        now_ms = wire.now_ms()
        out = []
        for name in sorted(state.schedules):
            schedule = state.schedules[name]
            fired = state.fired.get(name)
            after = max(now_ms, fired or 0, schedule.active_from_ms - 1)
            out.append(ScheduleInfo(schedule, fired, None if schedule.paused else next(ticks_after(schedule, after),
                                                                                       None)))
        return out

    def get(self, name: str) -> Schedule:
        """The schedule called ``name``; ScheduleError if there is none."""
        found = self._state().schedules.get(name)
        if found is None:
            raise ScheduleError("name", f"no schedule {name!r} (kmq schedule list shows them)")
        return found

    def pause(self, name: str) -> Schedule:
        """No tick fires until ``resume``."""
        return self._put(self.get(name).with_changes(paused=True))

    def resume(self, name: str) -> Schedule:
        """Ticks fire again from now on; those that fell while it was paused are not fired."""
        return self._put(self.get(name).with_changes(paused=False, active_from_ms=wire.now_ms()))

    def remove(self, name: str) -> None:
        """Removes the schedule (a tombstone: the compacted control topic forgets it)."""
        schedule = self.get(name)
        control.write_record(self.config, self.config.topics_for(schedule.queue), (SCHEDULE + name).encode(), None)

    def run_now(self, name: str) -> MessageId:
        """Sends the schedule's payload once now, besides its ticks (its own dedup id: a tick is not dropped for
        it); returns the message's id."""
        schedule = self.get(name)
        with Producer(self.config, schedule.queue) as producer:
            now = wire.now_ms()
            return producer.send(schedule.payload, schedule.headers or None,
                                 dedup_id=f"schedule:{name}:run-now:{now}")

    def _put(self, schedule: Schedule) -> Schedule:
        control.write_record(self.config, self.config.topics_for(schedule.queue), *encode_schedule(schedule))
        return schedule

    def _state(self) -> ControlState:
        """Every topic set's schedules: a schedule lives on the control topic of its queue's set, where that set's
        trackers fire it."""
        states = [control_state(self.config, topics) for topics in self.config.all_topic_sets]
        merged = states[0]
        for other in states[1:]:
            merged.schedules.update(other.schedules)
            merged.fired.update(other.fired)
        return merged
