"""Recurring schedules on a real broker: the CLI and library keep them on the control topic, a tracker fires each
tick once with its dedup id, a paused schedule fires nothing, a tick fired twice is handled once, and ticks missed
while no tracker ran follow the schedule's policy. (Failover between two trackers: tests/long.)"""

from __future__ import annotations

import itertools
import json
from datetime import datetime

import pytest

from kmq import Service
from kmq._kafka.control import write_record
from kmq.errors import ScheduleError
from kmq.wire import HEADER_DEDUP_ID, datetime_from_ms, now_ms
from kmq.wire.schedule import Schedule, encode_schedule, fired_record
from tests.helpers import ConfigFactory, receive_expecting, receive_n, run_kmq, tracker_thread

pytestmark = pytest.mark.timeout(120)
DAY_MS = 86_400_000


def test_the_cli_adds_lists_pauses_resumes_runs_and_removes_a_schedule(kmq_config: ConfigFactory) -> None:
    config = kmq_config(partitions=2)
    schedules = Service(config).schedules
    bad = run_kmq(config, "schedule", "add", "x", "--queue", "q", "--cron", "61 * * * *", "p")
    assert bad.returncode == 2 and "schedule cron: '61 * * * *' is not a cron expression" in bad.stderr
    added = run_kmq(config, "schedule", "add", "nightly", "--queue", "reports", "--cron", "0 3 * * *", "--tz",
                    "Europe/Berlin", "--header", "kind=daily", '{"report": 1}')
    assert added.returncode == 0, added.stderr
    assert "added schedule 'nightly'" in added.stdout and "next tick" in added.stdout
    with pytest.raises(ScheduleError, match="'nightly' exists"):
        schedules.add("nightly", "reports", "0 4 * * *", b"x")
    assert run_kmq(config, "schedule", "pause", "nightly").stdout.strip() == "paused schedule 'nightly'"
    [row] = json.loads(run_kmq(config, "schedule", "list", "--json").stdout)
    assert (row["queue"], row["tz"], row["paused"], row["next_tick"]) == ("reports", "Europe/Berlin", True, None)
    schedules.resume("nightly")
    [info] = schedules.list()
    assert not info.schedule.paused and info.next_tick_ms is not None
    assert datetime_from_ms(info.next_tick_ms).hour in (1, 2)  # 03:00 in Berlin, in UTC
    ran = run_kmq(config, "schedule", "run-now", "nightly")
    assert ran.returncode == 0, ran.stderr
    with Service(config).queue("reports").consumer() as consumer:
        [message] = receive_n(consumer, 1)
        message.ack()
    assert message.payload == b'{"report": 1}' and message.headers["kind"] == b"daily"
    assert run_kmq(config, "schedule", "remove", "nightly").returncode == 0
    assert schedules.list() == []
    gone = run_kmq(config, "schedule", "remove", "nightly")
    assert gone.returncode == 2 and "no schedule 'nightly'" in gone.stderr


def test_a_tracker_fires_every_tick_once_with_its_dedup_id(kmq_config: ConfigFactory) -> None:
    config = kmq_config(partitions=3, marker_partitions=2)
    service = Service(config)
    service.schedules.add("tick", "ticks", "* * * * * */1", b"beat")
    with tracker_thread(config), service.queue("ticks").consumer() as consumer:
        got = receive_n(consumer, 4, timeout_s=30)
        for message in got:
            message.ack()
        service.schedules.pause("tick")
    got.sort(key=lambda m: m.headers[HEADER_DEDUP_ID])  # each tick's id has its own partition: any order
    ids = [m.headers[HEADER_DEDUP_ID].decode() for m in got]
    assert all(i.startswith("schedule:tick:") for i in ids)
    ticks = [datetime.fromisoformat(i.split(":", 2)[2].replace("Z", "+00:00")).timestamp() for i in ids]
    assert [b - a for a, b in itertools.pairwise(ticks)] == [1.0, 1.0, 1.0], ids
    # Fired at its time: the record's timestamp is within a second of its tick (the first one may come while the
    # tracker still joins its group: a standby's half second later)
    lateness = [m.enqueued_at_ms / 1000 - t for m, t in zip(got, ticks, strict=True)]
    assert all(-0.05 < x < 1.0 for x in lateness[1:]) and lateness[0] < 2.0, lateness


def test_a_tick_fired_twice_is_handled_once_and_a_paused_schedule_fires_nothing(kmq_config: ConfigFactory) -> None:
    config = kmq_config(partitions=3)
    service = Service(config)
    schedule = Schedule(name="twice", queue="jobs", cron="0 3 * * *", payload=b"p", active_from_ms=now_ms())
    tick = 1_800_000_000_000
    with service.queue("jobs").producer() as producer:  # a slow primary and a standby both send the tick
        producer.send(b"p", dedup_id=schedule.dedup_id(tick))
        producer.send(b"p", dedup_id=schedule.dedup_id(tick))
    with service.queue("jobs").consumer() as consumer:
        got = receive_expecting(consumer, 1)
        assert len(got) == 1 and consumer.deduplicated == 1
        got[0].ack()
    service.schedules.add("paused", "jobs", "* * * * * */1", b"x")
    service.schedules.pause("paused")
    with tracker_thread(config), service.queue("jobs").consumer() as consumer:
        assert receive_n(consumer, 1, timeout_s=3) == []


@pytest.mark.parametrize(("policy", "fired"), [("fire-last", 1), ("skip", 0)])
def test_ticks_missed_while_no_tracker_ran_follow_the_policy(kmq_config: ConfigFactory, policy: str,
                                                             fired: int) -> None:
    config = kmq_config(partitions=2, schedule_misfire_grace_ms=1000)
    service = Service(config)
    # A daily schedule whose tick was two minutes ago, and whose trackers were down since the day before
    tick = (now_ms() - 120_000) // 60_000 * 60_000
    at = datetime_from_ms(tick)
    schedule = Schedule(name="m", queue="jobs", cron=f"{at.minute} {at.hour} * * *", payload=b"late", missed=policy,
                        active_from_ms=tick - 2 * DAY_MS)
    write_record(config, config.topics_for("jobs"), *encode_schedule(schedule))
    write_record(config, config.topics_for("jobs"), *fired_record("m", tick - DAY_MS, tick - DAY_MS, "an old tracker"))
    with tracker_thread(config), service.queue("jobs").consumer() as consumer:
        got = receive_expecting(consumer, fired, timeout_s=15, linger_s=3) if fired else receive_n(consumer, 1, 5)
        for message in got:
            message.ack()
    assert len(got) == fired
    with pytest.raises(ScheduleError, match="no schedule 'other'"):
        service.schedules.pause("other")
