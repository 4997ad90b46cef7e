"""Queue operations on the real broker: delayed delivery (more in issue #14)."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from kmq import KmqError, Service, wire
from kmq.ops.dlq import list_dead_letters, redrive
from kmq.ops.stats import collect
from tests.helpers import ConfigFactory, receive_expecting, receive_n, tracker_thread, write_transaction
from tests.markers_io import read_markers, wait_for

pytestmark = pytest.mark.timeout(120)


def test_delayed_messages_reach_no_handler_before_their_time_and_keep_their_delivery_count(
    kmq_config: ConfigFactory, marker_format: str,
) -> None:
    config = kmq_config(marker_format=marker_format)
    queue = Service(config).queue("later")
    with tracker_thread(config), queue.consumer() as consumer, queue.producer() as producer:
        assert wait_for(lambda: bool(consumer.assignment), timeout_s=30)  # times are measured from a joined group
        sent: dict[bytes, float] = {}
        for payload, delay in ((b"later", 3.0), (b"soon", 0.5), (b"now", None)):
            # 3 s: past the local hold, a hop through the tracker; 0.5 s: held by the consumer
            sent[payload] = time.time()
            producer.send(payload, delay=delay)
        arrived: dict[bytes, tuple[float, int]] = {}
        deadline = time.monotonic() + 30
        while len(arrived) < 3 and time.monotonic() < deadline:
            msg = consumer.receive(0.1)
            if msg is not None:
                now = time.time()
                assert msg.deliver_at is None or now >= msg.deliver_at.timestamp(), "handed out before its time"
                arrived[msg.payload] = (now - sent[msg.payload], msg.delivery_count)
                msg.ack()
        assert consumer.flush(10) == 0
    assert set(arrived) == {b"now", b"soon", b"later"}
    # Never early; the upper bounds only tell "when due" from "at the 60 s redelivery timeout", with room for a
    # loaded machine (the accuracy itself is benched: tests/bench).
    assert arrived[b"now"][0] < 5.0, arrived
    assert 0.5 <= arrived[b"soon"][0] < 0.5 + 5, arrived
    assert 3.0 <= arrived[b"later"][0] < 3.0 + 10, arrived
    assert {count for _, count in arrived.values()} == {1}


def test_a_delayed_message_waits_through_a_tracker_restart_and_stats_show_it_as_delayed(
    kmq_config: ConfigFactory,
) -> None:
    config = kmq_config()
    queue = Service(config).queue("patient")
    with queue.consumer() as consumer:
        with queue.producer() as producer:
            sent = time.time()
            producer.send(b"job", delay=6)
        with tracker_thread(config):
            assert wait_for(lambda: collect(config, ["patient"])[0].delayed == 1, timeout_s=20)
            [row] = collect(config, ["patient"])
            assert (row.in_flight, row.delivered, row.waiting) == (0, 0, 0)
        with tracker_thread(config):  # a new tracker rebuilds the hop from the markers
            [msg] = receive_n(consumer, 1, timeout_s=30)
            assert time.time() - sent >= 6.0
            assert (msg.payload, msg.delivery_count) == (b"job", 1)
            msg.ack()
            assert consumer.flush(10) == 0
    [row] = collect(config, ["patient"])
    assert (row.acked, row.delayed, row.in_flight, row.delivered, row.redelivered) == (1, 0, 0, 1, 0)


def test_an_at_most_once_queue_writes_no_markers_never_redelivers_and_hands_unreceived_messages_on(
    kmq_config: ConfigFactory,
) -> None:
    config = kmq_config(redelivery_timeout_ms=1000, at_most_once_queues=("amo",), receive_buffer_capacity=50)
    queue = Service(config).queue("amo")
    with queue.producer() as producer:
        for i in range(6):
            producer.send(b"%d" % i)
    with tracker_thread(config):
        with queue.consumer() as first:
            # Given the consumer has read all six: one acked, one received and dropped (its worker "crashed")
            assert wait_for(lambda: first.records_read >= 6, timeout_s=30)
            acked, dropped = receive_n(first, 2)
            acked.ack()
            with pytest.raises(KmqError, match="at-most-once"):
                dropped.release()
        # Then the four never received go to the next consumer, and the dropped one never comes back
        with queue.consumer() as second:
            rest = receive_expecting(second, 4)  # and a bounded wait for a fifth that must not come
        assert sorted(m.payload for m in rest) == sorted({b"%d" % i for i in range(6)} - {acked.payload,
                                                                                           dropped.payload})
    assert read_markers(config.bootstrap_servers, config.marker_topic, timeout_s=2) == []


@pytest.mark.parametrize("action", ["dead-letter", "drop"])
def test_expired_messages_reach_no_handler_and_are_dead_lettered_or_dropped_and_counted(
    kmq_config: ConfigFactory, action: str,
) -> None:
    config = kmq_config(queue_ttl_ms={"short": 1}, expired_messages=action)
    queue = Service(config).queue("short")
    with queue.producer() as producer:
        producer.send(b"stale")           # the queue's default time to live: 1 ms
        producer.send(b"fresh", ttl=600)  # its own
    with queue.consumer() as consumer:
        got = receive_expecting(consumer, 1)  # and a bounded wait for a second that must not come
        assert [m.payload for m in got] == [b"fresh"]
        got[0].ack()
        assert consumer.flush(10) == 0
    [row] = collect(config, ["short"])
    assert (row.expired, row.acked, row.delivered, row.dead_lettered, row.in_flight) == (1, 1, 1, 0, 0)
    letters = list_dead_letters(config, "short")
    assert [(d.payload, d.reason) for d in letters] == ([(b"stale", "expired")] if action == "dead-letter" else [])


def test_a_redriven_expired_dead_letter_is_delivered_instead_of_expiring_again(kmq_config: ConfigFactory) -> None:
    config = kmq_config()
    queue = Service(config).queue("brief")
    with queue.producer() as producer:
        producer.send(b"late", {"trace": "t1"}, ttl=0.001, time_limit=30)
    with queue.consumer() as consumer:
        assert receive_expecting(consumer, 0, linger_s=1) == []  # expired at read: dead-lettered
        assert consumer.flush(10) == 0
    assert [d.reason for d in list_dead_letters(config, "brief")] == ["expired"]
    assert redrive(config, "brief") == 1
    with queue.consumer() as consumer:
        [again] = receive_n(consumer, 1)
        assert (again.payload, again.headers, again.expires_at, again.time_limit) == (b"late", {"trace": b"t1"},
                                                                                       None, 30.0)
        again.ack()
        assert consumer.flush(10) == 0


def test_the_send_options_are_message_attributes_and_not_among_its_headers(kmq_config: ConfigFactory) -> None:
    config = kmq_config()
    queue = Service(config).queue("options")
    before = datetime.now(UTC)
    with queue.producer() as producer:
        producer.send(b"job", {"tenant": "t1"}, time_limit=12.5, delay=0.2, ttl=600)
    with queue.consumer() as consumer:
        [message] = receive_n(consumer, 1)
        assert message.headers == {"tenant": b"t1"}
        assert message.time_limit == 12.5
        assert message.deliver_at is not None and before < message.deliver_at <= datetime.now(UTC)
        assert message.expires_at is not None and message.expires_at > before + timedelta(seconds=590)
        message.ack()


def test_inspect_tells_a_messages_life_across_copies_and_who_holds_it(kmq_config: ConfigFactory) -> None:
    from tests.functional.test_cli import kmq

    config = kmq_config(redelivery_timeout_ms=5000, client_id="worker-a")
    name = f"life-{uuid.uuid4().hex[:8]}"  # a static member's group outlives the test: never reuse it
    queue = Service(config).queue(name)
    with queue.producer() as producer:
        first = producer.send(b"job-1")
        second = producer.send(b"job-2")
    with tracker_thread(config), queue.consumer() as consumer:
        got = {m.payload: m for m in receive_n(consumer, 2)}
        got[b"job-1"].release()
        [again] = receive_n(consumer, 1, timeout_s=20)
        again.reject("bad input")
        assert consumer.flush(10) == 0
        # job-2 stays with this consumer while we look
        held = kmq(config, "inspect", name, str(second), "--json")
        assert held.returncode == 0, held.stderr
        life = json.loads(held.stdout)
        assert life["state"] == "in_flight" and life["holder"].startswith("worker-a ")
    done = kmq(config, "inspect", name, str(again.message_id))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"message {first} of queue '{name}': 5 bytes, headers none"
    # The story in causal order: the tracker's End for the original is told as the reason of the copy it made, the
    # dead letter and the reject's End as one act.
    assert [line.split()[1] for line in lines[1:-1]] == [
        "enqueued", "delivered", "released", "copy", "delivered", "dead_lettered"], done.stdout
    assert "because=released" in done.stdout and "reason=bad input" in done.stdout
    assert "delivery_count=2" in done.stdout
    assert lines[-1] == "state: dead_lettered: dead-lettered after 2 deliveries: bad input"
    missing = kmq(config, "inspect", name, "0:999999")
    assert missing.returncode == 1 and "no record at" in missing.stderr
    other = Service(config).queue(f"{name}-other")
    with other.producer() as producer:
        elsewhere = producer.send(b"not yours")
    wrong = kmq(config, "inspect", name, str(elsewhere))
    assert wrong.returncode == 1
    assert f"message {elsewhere} belongs to queue '{name}-other', not '{name}'" in wrong.stderr


def test_a_paused_queue_hands_out_nothing_even_to_a_consumer_started_later_until_resumed(
    kmq_config: ConfigFactory,
) -> None:
    config = kmq_config()
    queue = Service(config).queue("held")
    with queue.consumer() as running:
        queue.pause()
        assert wait_for(lambda: running.paused, timeout_s=10)  # the control record reaches it within ~0.1 s
        with queue.producer() as producer:
            for i in range(3):
                producer.send(b"%d" % i)
        assert receive_n(running, 1, timeout_s=3) == []  # bounded: nothing may come while paused
        assert [(r.paused, r.waiting) for r in collect(config, ["held"])] == [("yes", 3)], "stats shows the pause"
        running.close()
        with queue.consumer() as later:
            assert receive_n(later, 1, timeout_s=3) == []
            queue.resume()
            got = receive_n(later, 3, timeout_s=20)
            assert sorted(m.payload for m in got) == [b"0", b"1", b"2"]
            for m in got:
                m.ack()


def test_a_pause_with_an_end_time_lifts_by_itself(kmq_config: ConfigFactory) -> None:
    from datetime import UTC, datetime, timedelta

    config = kmq_config()
    queue = Service(config).queue("nap")
    until = datetime.now(UTC) + timedelta(seconds=3)
    queue.pause(until=until)
    shown = wire.datetime_from_ms(wire.ms_from_datetime(until)).isoformat(timespec="seconds")
    assert collect(config, ["nap"])[0].paused == f"until {shown}"
    with queue.producer() as producer:
        producer.send(b"x")
    with queue.consumer() as consumer:
        [msg] = receive_n(consumer, 1, timeout_s=20)
        assert time.time() >= until.timestamp()
        msg.ack()


def test_purge_settles_waiting_in_flight_and_tracker_held_messages_and_spares_later_ones(
    kmq_config: ConfigFactory,
) -> None:
    from tests.helpers import FAST_GROUP, WorkerProcess

    # One message at a time, so the crashed worker holds exactly one; its deadline (10 s) comes after the purge.
    config = kmq_config(redelivery_timeout_ms=10_000, consumer_kafka=FAST_GROUP, receive_buffer_capacity=1,
                        max_in_flight=2)
    queue = Service(config).queue("old")
    with queue.producer() as producer:
        for i in range(6):
            producer.send(b"old-%d" % i)
    with tracker_thread(config):
        crashed = WorkerProcess(config, "old", hold=1)  # takes one, then dies: only the tracker holds it
        crashed.wait_holding()
        crashed.kill()
        with queue.consumer() as consumer:
            held = receive_n(consumer, 2)  # in flight here when the purge comes
            queue.purge()
            assert wait_for(lambda: all(m.settled for m in held), timeout_s=10)
            with pytest.raises(KmqError):
                held[0].ack()
            with queue.producer() as producer:
                producer.send(b"new")
            rest = receive_expecting(consumer, 1)  # only the new one may come
            assert [m.payload for m in rest] == [b"new"]
            rest[0].ack()
            assert consumer.flush(10) == 0
        assert wait_for(lambda: collect(config, ["old"])[0].purged == 6, timeout_s=20), collect(config, ["old"])
    [row] = collect(config, ["old"])
    assert (row.acked, row.redelivered, row.in_flight) == (1, 0, 0)


def test_a_crashed_consumer_restarting_with_its_client_id_gets_its_messages_back_in_seconds_not_the_timeout(
    kmq_config: ConfigFactory,
) -> None:
    from tests.helpers import WorkerProcess

    config = kmq_config(redelivery_timeout_ms=60_000, client_id=f"w-{uuid.uuid4().hex[:8]}")
    queue = Service(config).queue(f"takeover-{uuid.uuid4().hex[:8]}")
    with queue.producer() as producer:
        for i in range(3):
            producer.send(b"%d" % i)
    with tracker_thread(config):
        crashed = WorkerProcess(config, queue.name, hold=3)
        crashed.wait_holding()
        crashed.kill()
        restarted = time.monotonic()
        with queue.consumer() as consumer:  # the same client_id: a restart of the crashed worker
            got = receive_n(consumer, 3, timeout_s=30)
            took = time.monotonic() - restarted
            assert sorted(m.payload for m in got) == [b"0", b"1", b"2"]
            assert {m.delivery_count for m in got} == {2}
            for m in got:
                m.ack()
    print(f"fast takeover: {took:.2f} s")
    # The target is < 5 s (benched); the bound here only tells takeover from the 60 s timeout on a loaded machine.
    assert took < 20.0, f"took {took:.1f} s with a 60 s redelivery timeout"


def test_a_consumer_started_after_a_purge_honours_it(kmq_config: ConfigFactory) -> None:
    config = kmq_config()
    queue = Service(config).queue("gone")
    with queue.producer() as producer:
        for i in range(3):
            producer.send(b"old-%d" % i)
        queue.purge()
        producer.send(b"new")
    with queue.consumer() as consumer:
        got = receive_expecting(consumer, 1)  # only the new one may come
        assert [m.payload for m in got] == [b"new"]
        got[0].ack()
        assert consumer.flush(10) == 0
    assert collect(config, ["gone"])[0].purged == 3


def test_a_control_topic_whose_last_offset_holds_no_record_is_read_to_its_end(kmq_config: ConfigFactory) -> None:
    """A transaction's commit marker (or a tombstone compacted away) leaves the end offset's predecessor empty."""
    from kmq._kafka.control import ControlFollower
    from kmq.wire.control import PAUSE, control_topic

    config = kmq_config()
    write_transaction(config.bootstrap_servers, control_topic(config.message_topic),
                      [((PAUSE + "q").encode(), json.dumps({"until_ms": None}).encode())])
    follower = ControlFollower(config, config.default_topics).start()
    try:
        assert follower.state.paused("q", int(time.time() * 1000))
    finally:
        follower.close()
