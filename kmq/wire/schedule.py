"""Recurring schedules: their definition as the control topic holds it, and their ticks (docs/concepts/dedup.md).

A schedule is a compacted control record ``schedule/<name>`` (JSON; a tombstone removes it); the tick a tracker
fired last is ``fired/<name>`` (``{"tick_ms": …}``). Ticks come from croniter in the schedule's IANA time zone:

- a time that does not exist (the hour skipped when clocks go forward) fires when the clocks jump (02:30 → 03:00);
- a schedule at a particular time (no ``*`` in its second, minute or hour field) fires once in an hour that repeats
  when clocks go back (its first occurrence), as cron does; one with a ``*`` there (``*/5 * * * *``, hourly) goes by
  elapsed time and fires in both passes.

A sixth field is seconds (croniter's convention: ``* * * * * */2`` is every 2 s). Pure: no Kafka.
"""

from __future__ import annotations

import base64
import json
import string
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from kmq.errors import ScheduleError
from kmq.wire.conventions import (
    RESERVED_HEADER_PREFIX,
    datetime_from_ms,
    ms_from_datetime,
    validate_dedup_id,
    validate_queue_name,
)

__all__ = ["FIRED", "FIRE_LAST", "MISSED_POLICIES", "SCHEDULE", "SKIP", "Schedule", "ScheduleError",
           "decode_schedule", "encode_schedule", "fired_record", "latest_tick", "ticks_after"]

SCHEDULE, FIRED = "schedule/", "fired/"
#: What a tracker does with ticks missed while none ran: fire the latest of them once, or none.
FIRE_LAST, SKIP = "fire-last", "skip"
MISSED_POLICIES = (FIRE_LAST, SKIP)
#: The dedup id of a tick unless the schedule has a template: the schedule and the tick's time (UTC).
DEFAULT_TEMPLATE = "schedule:{name}:{tick}"
#: What a template may use: the schedule's name, the tick as UTC ISO time, as ms, as ISO time in the zone.
TEMPLATE_FIELDS = frozenset({"name", "tick", "tick_ms", "local"})
_TICK_FIELDS = TEMPLATE_FIELDS - {"name"}
_ALIASES = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
            "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    """A recurring send: ``payload`` (with ``headers``) to ``queue`` at every tick of ``cron`` in zone ``tz``."""

    name: str
    queue: str
    cron: str
    payload: bytes
    tz: str = "UTC"
    headers: Mapping[str, str] = field(default_factory=dict)
    #: The dedup id of each tick (``{name}``, ``{tick}``, ``{tick_ms}``, ``{local}``); "" means ``DEFAULT_TEMPLATE``.
    dedup_id_template: str = ""
    #: Ticks missed while no tracker ran: ``fire-last`` (the latest of them, once) or ``skip``.
    missed: str = FIRE_LAST
    paused: bool = False
    #: Ticks before this time are never fired: the schedule's creation, or its last resume.
    active_from_ms: int = 0

    def __post_init__(self) -> None:
        try:
            validate_queue_name(self.name)
        except ValueError as err:
            raise ScheduleError("name", str(err).replace("queue name", "schedule name")) from None
        try:
            validate_queue_name(self.queue)
        except ValueError as err:
            raise ScheduleError("queue", str(err)) from None
        if not isinstance(self.cron, str) or not croniter.is_valid(_expanded(self.cron)):
            raise ScheduleError("cron", f"{self.cron!r} is not a cron expression (5 fields: minute hour day month "
                                        "weekday, a 6th for seconds, or @hourly, @daily …)")
        try:
            ZoneInfo(self.tz)
        except (ZoneInfoNotFoundError, ValueError):
            raise ScheduleError("tz", f"{self.tz!r} is not an IANA time zone name (e.g. Europe/Berlin, UTC)") from None
        if self.missed not in MISSED_POLICIES:
            raise ScheduleError("missed", f"must be one of {', '.join(MISSED_POLICIES)}, got {self.missed!r}")
        for key in self.headers:
            if not key or key.startswith(RESERVED_HEADER_PREFIX):
                raise ScheduleError("headers", f"header {key!r}: names must be non-empty and not start with "
                                               f"{RESERVED_HEADER_PREFIX!r}")
        if self.dedup_id_template:
            _check_template(self.dedup_id_template)
        object.__setattr__(self, "headers", dict(self.headers))
        try:
            self.dedup_id(self.active_from_ms)
        except ValueError as err:
            raise ScheduleError("dedup_id_template", f"gives a bad dedup id: {err}") from None

    @property
    def particular_time(self) -> bool:
        """At a particular time of day (no ``*`` in its second, minute or hour field): fires once in a repeated
        hour. Otherwise it goes by elapsed time."""
        fields = _expanded(self.cron).split()
        timed = [fields[0], fields[1]] + ([fields[5]] if len(fields) >= 6 else [])
        return not any(f.startswith("*") for f in timed)

    def dedup_id(self, tick_ms: int) -> str:
        """The dedup id of the tick at ``tick_ms``: a tick fired twice (a slow primary and a standby, a tracker that
        crashed after sending) is handed to a handler once."""
        tick = datetime_from_ms(tick_ms)
        utc = tick.isoformat(timespec="milliseconds" if tick_ms % 1000 else "seconds").replace("+00:00", "Z")
        return validate_dedup_id((self.dedup_id_template or DEFAULT_TEMPLATE).format(
            name=self.name, tick=utc, tick_ms=tick_ms, local=tick.astimezone(ZoneInfo(self.tz)).isoformat()))

    def with_changes(self, **changes: Any) -> Schedule:
        return replace(self, **changes)


def _expanded(cron: str) -> str:
    return _ALIASES.get(cron.strip(), cron.strip()) if isinstance(cron, str) else cron


def _check_template(template: str) -> None:
    try:
        names = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as err:
        raise ScheduleError("dedup_id_template", f"{template!r}: {err}") from None
    unknown = names - TEMPLATE_FIELDS
    if unknown:
        raise ScheduleError("dedup_id_template", f"{template!r} uses {', '.join(sorted(unknown))}; it may use "
                                                 f"{{{'}, {'.join(sorted(TEMPLATE_FIELDS))}}}")
    if not names & _TICK_FIELDS:
        raise ScheduleError("dedup_id_template", f"{template!r} must contain {{tick}}, {{tick_ms}} or {{local}}: "
                                                 "without the tick every tick would have one id, and all but the first "
                                                 "of a window would be dropped")


# --- ticks ---------------------------------------------------------------------------------------------------------


def ticks_after(schedule: Schedule, after_ms: int) -> Iterator[int]:
    """The schedule's ticks (ms since the epoch) strictly after ``after_ms``, in order, for ever."""
    zone = ZoneInfo(schedule.tz)
    start = datetime_from_ms(after_ms).astimezone(zone)
    it = croniter(_expanded(schedule.cron), start)
    particular = schedule.particular_time
    floor = start.replace(tzinfo=None)
    while True:
        tick: datetime = it.get_next(datetime)
        tick_ms = ms_from_datetime(tick)
        if tick_ms <= after_ms:
            continue
        if particular:
            wall = tick.replace(tzinfo=None)
            if wall <= floor:  # a wall time again (clocks went back): a particular time fires once
                continue
            floor = wall
        yield tick_ms


def latest_tick(schedule: Schedule, after_ms: int, now_ms: int) -> int | None:
    """The latest tick in (``after_ms``, ``now_ms``], or None. Jumps near ``now_ms`` first (two ticks back: croniter's
    backward walk may step over a tick that DST moved, the forward walk from there does not), so a long outage of an
    every-second schedule costs no walk through every tick it missed."""
    back = croniter(_expanded(schedule.cron), datetime_from_ms(now_ms).astimezone(ZoneInfo(schedule.tz)))
    back.get_prev(datetime)
    two_back = ms_from_datetime(back.get_prev(datetime))
    latest = None
    for tick_ms in ticks_after(schedule, max(after_ms, two_back - 1)):
        if tick_ms > now_ms:
            break
        latest = tick_ms
    return latest


# --- records ------------------------------------------------------------------------------------------------------


def encode_schedule(schedule: Schedule) -> tuple[bytes, bytes]:
    """The control record (key, value) of ``schedule``."""
    value = {"v": 1, "queue": schedule.queue, "cron": schedule.cron, "tz": schedule.tz,
             "payload": base64.b64encode(schedule.payload).decode(), "headers": dict(schedule.headers),
             "dedup_id_template": schedule.dedup_id_template, "missed": schedule.missed, "paused": schedule.paused,
             "active_from_ms": schedule.active_from_ms}
    return (SCHEDULE + schedule.name).encode(), json.dumps(value).encode()


def decode_schedule(name: str, data: Mapping[str, Any]) -> Schedule:
    """A schedule from its record's JSON; ScheduleError or KeyError/ValueError if malformed."""
    return Schedule(name=name, queue=str(data["queue"]), cron=str(data["cron"]), tz=str(data.get("tz", "UTC")),
                    payload=base64.b64decode(data["payload"]), headers=dict(data.get("headers") or {}),
                    dedup_id_template=str(data.get("dedup_id_template") or ""),
                    missed=str(data.get("missed", FIRE_LAST)), paused=bool(data.get("paused", False)),
                    active_from_ms=int(data.get("active_from_ms", 0)))


def fired_record(name: str, tick_ms: int, at_ms: int, by: str) -> tuple[bytes, bytes]:
    """The control record saying a tracker fired ``name``'s tick at ``tick_ms`` (sent at ``at_ms``)."""
    return (FIRED + name).encode(), json.dumps({"tick_ms": tick_ms, "at_ms": at_ms, "by": by}).encode()
