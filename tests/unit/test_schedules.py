"""Recurring schedules without a broker: ticks across DST changes in two time zones (a skipped hour, a repeated
hour), the dedup id of a tick, the control records, and which replica fires which tick when (kmq.redelivery.firing)."""

from __future__ import annotations

import itertools
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kmq.errors import ScheduleError
from kmq.redelivery.firing import decide, primary_partition
from kmq.wire import datetime_from_ms, ms_from_datetime
from kmq.wire.control import ControlState
from kmq.wire.schedule import Schedule, encode_schedule, fired_record, latest_tick, ticks_after

BERLIN, NEW_YORK = "Europe/Berlin", "America/New_York"


def schedule(cron: str, tz: str = "UTC", **changes: object) -> Schedule:
    return Schedule(name="nightly", queue="reports", cron=cron, payload=b"run", tz=tz, **changes)  # type: ignore[arg-type]


def local_ticks(cron: str, tz: str, start: datetime, n: int) -> list[str]:
    """The first ``n`` ticks after ``start`` (local time in ``tz``) as local ISO times with their UTC offsets."""
    zone = ZoneInfo(tz)
    ticks = ticks_after(schedule(cron, tz), ms_from_datetime(start.replace(tzinfo=zone)))
    return [datetime_from_ms(t).astimezone(zone).isoformat(timespec="minutes") for t in itertools.islice(ticks, n)]


# --- a skipped hour (clocks go forward) --------------------------------------------------------------------------


@pytest.mark.parametrize(("tz", "day", "next_day"), [(BERLIN, "2026-03-29", "2026-03-30"),
                                                     (NEW_YORK, "2026-03-08", "2026-03-09")])
def test_a_daily_time_in_the_skipped_hour_fires_when_the_clocks_jump_then_at_its_time(
    tz: str, day: str, next_day: str,
) -> None:
    offset_after = "+02:00" if tz == BERLIN else "-04:00"
    assert local_ticks("30 2 * * *", tz, datetime.fromisoformat(f"{day}T00:00"), 2) == [
        f"{day}T03:00{offset_after}", f"{next_day}T02:30{offset_after}"]


@pytest.mark.parametrize("tz", [BERLIN, NEW_YORK])
def test_an_every_30_minutes_schedule_goes_by_elapsed_time_across_the_skipped_hour(tz: str) -> None:
    day = "2026-03-29" if tz == BERLIN else "2026-03-08"
    before, after = ("+01:00", "+02:00") if tz == BERLIN else ("-05:00", "-04:00")
    assert local_ticks("*/30 * * * *", tz, datetime.fromisoformat(f"{day}T01:00"), 3) == [
        f"{day}T01:30{before}", f"{day}T03:00{after}", f"{day}T03:30{after}"]


# --- a repeated hour (clocks go back) ----------------------------------------------------------------------------


@pytest.mark.parametrize(("tz", "day", "cron", "first"), [(BERLIN, "2026-10-25", "30 2 * * *", "02:30+02:00"),
                                                          (NEW_YORK, "2026-11-01", "30 1 * * *", "01:30-04:00")])
def test_a_daily_time_in_the_repeated_hour_fires_once_at_its_first_occurrence(
    tz: str, day: str, cron: str, first: str,
) -> None:
    got = local_ticks(cron, tz, datetime.fromisoformat(f"{day}T00:00"), 2)
    assert got[0] == f"{day}T{first}"
    assert not got[1].startswith(day), "not again in the repeated hour"


@pytest.mark.parametrize(("tz", "day", "hour"), [(BERLIN, "2026-10-25", "02"), (NEW_YORK, "2026-11-01", "01")])
def test_a_tracker_starting_inside_the_repeated_hour_does_not_fire_its_time_again(tz: str, day: str,
                                                                                   hour: str) -> None:
    zone = ZoneInfo(tz)
    # The second pass of the hour, after the first occurrence fired: the next tick is tomorrow
    second_pass = datetime.fromisoformat(f"{day}T{hour}:45").replace(tzinfo=zone, fold=1)
    nxt = next(ticks_after(schedule(f"30 {int(hour)} * * *", tz), ms_from_datetime(second_pass)))
    assert datetime_from_ms(nxt).astimezone(zone).date().isoformat() > day


@pytest.mark.parametrize(("tz", "day", "offsets"), [(BERLIN, "2026-10-25", ("+02:00", "+01:00")),
                                                    (NEW_YORK, "2026-11-01", ("-04:00", "-05:00"))])
def test_an_hourly_schedule_fires_in_both_passes_of_the_repeated_hour(tz: str, day: str,
                                                                       offsets: tuple[str, str]) -> None:
    hour = "02" if tz == BERLIN else "01"
    start = datetime.fromisoformat(f"{day}T{int(hour) - 1:02d}:30")
    got = local_ticks("0 * * * *", tz, start, 3)
    assert got == [f"{day}T{hour}:00{offsets[0]}", f"{day}T{hour}:00{offsets[1]}",
                   f"{day}T{int(hour) + 1:02d}:00{offsets[1]}"]


@given(st.sampled_from(["*/7 * * * *", "15 2 * * *", "0 */3 * * *", "* * * * * */2", "@daily", "0 9 * * mon-fri"]),
       st.sampled_from([BERLIN, NEW_YORK, "UTC", "Australia/Sydney"]),
       st.integers(1_767_225_600_000, 1_830_297_600_000))
def test_ticks_rise_strictly_and_the_latest_tick_is_the_last_one_walked_to(cron: str, tz: str, start: int) -> None:
    s = schedule(cron, tz)
    ticks = list(itertools.islice(ticks_after(s, start), 12))
    assert all(a < b for a, b in itertools.pairwise([start, *ticks]))
    now = ticks[-1] + 1
    assert latest_tick(s, start, now) == ticks[-1]
    assert latest_tick(s, ticks[-1], now) is None


# --- definitions, records, dedup ids -----------------------------------------------------------------------------


def test_a_tick_has_a_dedup_id_of_the_schedule_and_its_utc_time() -> None:
    s = schedule("0 3 * * *", BERLIN)
    tick = ms_from_datetime(datetime.fromisoformat("2026-07-01T03:00+02:00"))
    assert s.dedup_id(tick) == "schedule:nightly:2026-07-01T01:00:00Z"
    custom = schedule("0 3 * * *", BERLIN, dedup_id_template="report-{local}")
    assert custom.dedup_id(tick) == "report-2026-07-01T03:00:00+02:00"


@pytest.mark.parametrize(("changes", "field"), [
    ({"cron": "61 * * * *"}, "cron"), ({"cron": "every day"}, "cron"), ({"tz": "Mars/Olympus"}, "tz"),
    ({"missed": "catch-up"}, "missed"), ({"dedup_id_template": "fixed"}, "dedup_id_template"),
    ({"dedup_id_template": "{tick}-{user}"}, "dedup_id_template"), ({"name": ""}, "name"),
    ({"headers": {"kmq-x": "1"}}, "headers"),
])
def test_a_bad_definition_is_refused_naming_what_is_wrong(changes: dict[str, object], field: str) -> None:
    fields: dict[str, object] = {"name": "n", "queue": "q", "cron": "* * * * *", "payload": b"", **changes}
    with pytest.raises(ScheduleError, match=f"^schedule {field}: "):
        Schedule(**fields)  # type: ignore[arg-type]


def test_the_control_state_folds_schedules_and_keeps_the_newest_fired_tick() -> None:
    state = ControlState()
    s = schedule("*/5 * * * *", BERLIN, headers={"kind": "report"}, missed="skip")
    state.apply(*encode_schedule(s))
    state.apply(*fired_record("nightly", 2000, 2001, "t1"))
    state.apply(*fired_record("nightly", 1000, 2002, "t2"))  # a slow replica's older tick
    assert state.schedules == {"nightly": s} and state.fired == {"nightly": 2000}
    state.apply(b"schedule/nightly", None)
    state.apply(b"schedule/broken", b'{"queue": "q", "cron": "nope", "payload": ""}')  # logged and skipped
    assert state.schedules == {}


# --- who fires what, when -----------------------------------------------------------------------------------------

T = 1_800_000_000_000  # a tick of every schedule below: a whole minute
EVERY_2S = schedule("* * * * * */2")


def at(now_ms: int, *, done_ms: int = T - 2000, primary: bool = True, since_ms: int = 0,
       s: Schedule = EVERY_2S, grace_ms: int = 60_000) -> tuple[int | None, int | None, int]:
    d = decide(s, done_ms=done_ms, now_ms=now_ms, primary=primary, standby_since_ms=since_ms,
               standby_delay_ms=500, grace_ms=grace_ms)
    return d.fire, d.skipped, d.wake_ms


def test_the_primary_fires_a_tick_at_its_time_and_sleeps_until_the_next() -> None:
    assert at(T - 300) == (None, None, T)
    assert at(T) == (T, None, T)
    assert at(T + 5, done_ms=T) == (None, None, T + 2000)


def test_a_standby_fires_half_a_second_late_unless_the_tick_was_fired() -> None:
    assert at(T + 100, primary=False) == (None, None, T + 500)
    assert at(T + 500, primary=False) == (T, None, T + 500)
    assert at(T + 500, primary=False, done_ms=T)[0] is None


def test_a_standby_started_after_a_tick_waits_its_delay_from_its_start() -> None:
    assert at(T + 1000, primary=False, since_ms=T + 900) == (None, None, T + 1400)


def test_due_ticks_within_the_grace_fire_in_order() -> None:
    assert at(T + 4100, done_ms=T - 2000)[0] == T
    assert at(T + 4100, done_ms=T)[0] == T + 2000


def test_missed_ticks_fire_the_latest_once_or_none() -> None:
    daily = schedule("0 3 * * *", "UTC")
    tick = ms_from_datetime(datetime.fromisoformat("2026-07-01T03:00+00:00"))
    later = tick + 3_600_000  # an hour after: past the minute's grace
    assert at(later, done_ms=tick - 3 * 86_400_000, s=daily)[0] == tick  # fire-last: the latest, once
    assert at(later, done_ms=tick, s=daily)[0] is None
    skipping = daily.with_changes(missed="skip")
    assert at(later, done_ms=tick - 86_400_000, s=skipping)[:2] == (None, tick)


def test_a_paused_schedule_fires_nothing_and_a_resumed_one_nothing_from_before_its_resume() -> None:
    assert at(T, s=EVERY_2S.with_changes(paused=True))[0] is None
    resumed = EVERY_2S.with_changes(active_from_ms=T + 1)
    assert at(T + 100, done_ms=0, s=resumed)[0] is None


def test_each_name_has_one_primary_partition() -> None:
    assert {primary_partition("nightly", 3) for _ in range(5)} == {primary_partition("nightly", 3)}
    assert {primary_partition(f"s{i}", 3) for i in range(50)} == {0, 1, 2}
