"""Deadlines across a failover, without a broker: the consumer's bound on broker time and its hand-out rule, and the
tracker's read horizon (fire only on evidence that the log is read up to the deadline)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kmq.client.consumer.broker_time import WINDOW_S, BrokerTime
from kmq.client.consumer.in_flight import InFlightMessages
from kmq.client.consumer.marker_writer import MarkerWriter
from kmq.client.message import Message
from kmq.config import Config
from kmq.redelivery.horizon import GRACE_MS, PROBE_RETRY_S, STALL_S, ReadHorizon
from kmq.wire import RETURN_REASON, MessageId
from kmq.wire.marker_batch import decode_record
from kmq.wire.markers import MarkerType
from tests.unit.fakes import FakeProducer


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# --- BrokerTime -------------------------------------------------------------------------------------------


@given(st.lists(st.tuples(st.floats(0, 50), st.integers(0, 5_000)), min_size=1, max_size=30))
def test_broker_time_never_runs_behind_the_broker(records: list[tuple[float, int]]) -> None:
    # Given a broker whose clock reads monotonic * 1000 + 7_000_000, and records appended some ms after being sent
    mono = FakeMonotonic()
    clock = BrokerTime(mono)
    for sent_offset_s, append_delay_ms in sorted(records):
        sent_at = 1000.0 + sent_offset_s
        clock.observe(sent_at, int(sent_at * 1000) + 7_000_000 + append_delay_ms)
    # Then the bound is never before the broker's true time
    mono.now = 1000.0 + max(s for s, _ in records) + 1
    assert (clock.now_ms() or 0) >= int(mono.now * 1000) + 7_000_000


@given(st.lists(st.tuples(st.floats(0, 5), st.integers(1, 10_000)), min_size=1, max_size=60))
def test_the_bound_is_the_smallest_offset_of_the_window_and_the_newest_sample(steps: list[tuple[float, int]]) -> None:
    clock = FakeMonotonic()
    time_ = BrokerTime(clock)
    sent, seen = 0.0, []
    for gap, appended_ms in steps:  # records reported in the order they were sent
        sent += gap * WINDOW_S / 5
        time_.observe(sent, appended_ms)
        seen.append((sent, appended_ms - sent * 1000))
        window = [o for at, o in seen if at >= sent - WINDOW_S] or [seen[-1][1]]
        clock.now = sent
        assert time_.now_ms() == int(min(window) + sent * 1000) + 1


def test_a_record_stalled_in_a_failover_does_not_loosen_a_prompt_ones_bound() -> None:
    mono = FakeMonotonic()
    clock = BrokerTime(mono)
    clock.observe(1000.0, 5_000_000 + 1_000_000 + 2)        # appended 2 ms after being sent
    clock.observe(1001.0, 5_000_000 + 1_001_000 + 9_000)    # held 9 s by a dead leader
    mono.now = 1002.0
    assert clock.now_ms() == 5_000_000 + 1_002_000 + 3


def test_old_samples_stop_bounding_but_the_newest_always_does() -> None:
    mono = FakeMonotonic()
    clock = BrokerTime(mono)
    clock.observe(1000.0, 1_000_000)
    clock.observe(1000.0 + WINDOW_S + 1, int((1000.0 + WINDOW_S + 1) * 1000) + 50)
    mono.now = 1000.0 + WINDOW_S + 1
    assert clock.now_ms() == int(mono.now * 1000) + 51
    assert BrokerTime(mono).now_ms() is None


# --- the consumer's hand-out rule ------------------------------------------------------------------------


def rig(redelivery_timeout_ms: int = 6000) -> tuple[InFlightMessages, MarkerWriter, FakeProducer, FakeMonotonic]:
    config = Config(bootstrap_servers="x", redelivery_timeout_ms=redelivery_timeout_ms)
    producer = FakeProducer()
    writer = MarkerWriter(config, config.marker_topic, b"q", producer)
    mono = FakeMonotonic()
    writer.broker_time = BrokerTime(mono)
    table = InFlightMessages(config, config.default_topics, "q", writer, producer, lambda: None)
    return table, writer, producer, mono


def message(table: InFlightMessages, offset: int) -> Message:
    msg = Message(b"p", {}, "q", MessageId(0, offset), 1, MessageId(0, offset), 0, table)
    table.add(msg)
    return msg


def given_back(producer: FakeProducer, writer: MarkerWriter) -> list[MessageId]:
    """The ids the writer gave back (RETURNED settles in its records)."""
    writer.flush(0)
    return [m.message_id for r in producer.records for m in decode_record(r.value)
            if m.type is MarkerType.KEEPALIVE and m.reason == RETURN_REASON]


def test_a_message_whose_deadline_passed_while_it_waited_is_given_back_not_handed_out() -> None:
    # Given a message Started at broker time 1,000,000 (deadline 1,006,000) that waited 7 s for its commit
    table, writer, producer, mono = rig()
    msg, fresh = message(table, 1), message(table, 2)
    table.durable([msg.message_id], 1_000_000)
    table.durable([fresh.message_id], 1_006_500)
    writer.broker_time.observe(mono.now, 1_000_000)
    mono.now += 7.0
    # When both are about to be handed out
    out = table.hand_out([msg, fresh])
    # Then only the fresh one is; the other is given back (redelivered at once, count unchanged)
    assert out == [fresh]
    assert msg.settled and table.given_back_late == 1
    assert given_back(producer, writer) == [msg.message_id]
    table.close()


def test_a_keep_alive_that_landed_in_time_moves_the_deadline_and_a_late_one_does_not() -> None:
    table, _writer, _producer, _mono = rig()
    msg = message(table, 1)
    table.durable([msg.message_id], 1_000_000)          # Start: deadline 1,006,000
    table.durable([msg.message_id], 1_003_000)          # keep-alive in time: 1,009,000
    assert msg._deadline_ms == 1_009_000
    table.durable([msg.message_id], 1_009_500)          # appended after the deadline: the tracker may have fired
    assert msg._deadline_ms == 1_009_000
    table.close()


def test_a_message_close_to_its_deadline_is_handed_out_with_a_keep_alive_due_at_once() -> None:
    table, writer, _producer, mono = rig()
    msg = message(table, 1)
    msg._next_keep_alive = mono.now + 3
    table.durable([msg.message_id], 1_000_000)
    writer.broker_time.observe(mono.now, 1_000_000)
    mono.now += 3.5  # 2.5 s left: more than the guard (1.5 s), less than a keep-alive interval (3 s)
    assert table.hand_out([msg]) == [msg]
    assert msg._next_keep_alive == 0.0
    table.close()


def test_without_a_reported_start_or_broker_time_nothing_is_held_back() -> None:
    table, writer, _producer, mono = rig()
    msg = message(table, 1)
    assert table.hand_out([msg]) == [msg]
    writer.broker_time.observe(mono.now, 1_000_000)
    mono.now += 100
    assert table.hand_out([msg]) == [msg]  # no Start reported (at most once, or a fake): deadline unknown
    table.close()


def test_the_writer_reports_a_durable_start_batch_with_its_append_time() -> None:
    table, writer, producer, _mono = rig()
    msg = message(table, 5)

    class Report:
        def timestamp(self) -> tuple[int, int]:
            return 2, 2_000_000  # TIMESTAMP_LOG_APPEND_TIME

        def partition(self) -> int:
            return 0

        def offset(self) -> int:
            return 0

    writer.start([msg])
    report: Any = Report()
    producer.deliver(report=report)
    assert msg._deadline_ms == 2_006_000
    table.close()


# --- the tracker's read horizon --------------------------------------------------------------------------


def test_deadlines_fire_up_to_what_was_read_and_a_probe_is_asked_for_the_rest() -> None:
    horizon = ReadHorizon()
    horizon.read(10_000)
    # A deadline at 10,500 is due by the clock (11,000) but nothing appended after it has been read
    assert horizon.limit(11_000, 10_500, 5.0) == (10_000, True)
    # No second probe while the first is on its way, one more once it is overdue
    assert horizon.limit(11_100, 10_500, 5.5) == (10_000, False)
    assert horizon.limit(11_600, 10_500, 5.0 + PROBE_RETRY_S) == (10_000, True)
    # The probe comes back (appended at 11,700): the deadline may fire
    horizon.read(11_700, probe=True)
    assert horizon.limit(11_800, 10_500, 7.0) == (11_700, False)
    assert horizon.probe_sent_at is None


@given(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6))
def test_the_horizon_never_passes_the_clock_or_what_was_read(read: int, now: int, due: int) -> None:
    horizon = ReadHorizon()
    horizon.read(read)
    limit, _probe = horizon.limit(now, due, 0.0)
    assert limit <= now and limit <= read
    assert horizon.waiting(due, now) == (read <= due < now)


def test_after_a_stall_what_fell_due_waits_until_the_other_producers_had_time_to_resend() -> None:
    # Given a partition whose leader died: the probe sent at 5.0 s comes back 6 s later, appended at 20,000
    horizon = ReadHorizon()
    horizon.read(10_000)
    assert horizon.limit(11_000, 10_500, 5.0) == (10_000, True)
    horizon.read(20_000, probe=True, monotonic_s=5.0 + STALL_S + 5)
    # Then nothing past what was fireable before the stall fires, and no probe goes out during the grace
    assert horizon.limit(20_100, 10_500, 11.1) == (10_000, False)
    assert horizon.waiting(10_500, 20_100)
    # Once the grace has passed a probe is sent; a record appended after the grace ends the hold
    assert horizon.limit(22_100, 10_500, 11.0 + GRACE_MS / 1000 + 0.1) == (10_000, True)
    horizon.read(22_200, probe=True, monotonic_s=13.2)
    assert horizon.limit(22_300, 10_500, 13.3) == (22_200, False)
    assert horizon.hold is None
