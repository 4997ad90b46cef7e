"""DeadlineClock: log time, extrapolated by an injected monotonic clock."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kmq.redelivery.clock import DeadlineClock


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_no_marker_seen_means_no_time() -> None:
    assert DeadlineClock(0, FakeMonotonic()).now_ms() is None


def test_with_use_now_zero_the_clock_extrapolates_from_the_last_marker() -> None:
    mono = FakeMonotonic()
    clock = DeadlineClock(0, mono)
    clock.observe(5_000)
    mono.now += 2.5
    assert clock.now_ms() == 7_500


def test_kafka_mq_go_rule_holds_the_clock_until_use_now_passes() -> None:
    mono = FakeMonotonic()
    clock = DeadlineClock(1000, mono)
    clock.observe(5_000)
    mono.now += 0.5
    assert clock.now_ms() == 5_000
    mono.now += 1.5
    assert clock.now_ms() == 7_000


def test_an_older_timestamp_never_moves_the_clock_back() -> None:
    mono = FakeMonotonic()
    clock = DeadlineClock(0, mono)
    clock.observe(5_000)
    mono.now += 1
    clock.observe(4_000)
    clock.observe(0)
    assert clock.now_ms() == 6_000


def test_a_broker_time_learnt_earlier_counts_from_when_it_was_learnt() -> None:
    mono = FakeMonotonic()
    clock = DeadlineClock(0, mono)
    clock.observe(5_000)  # a marker read 60 s after it was written: the clock trails the broker by 60 s
    learnt_at = mono.now
    mono.now += 0.5
    clock.observe(65_000, seen_at=learnt_at)  # the broker's time, from a delivery report 500 ms ago
    assert clock.now_ms() == 65_500
    clock.observe(64_000, seen_at=mono.now)  # older: never backwards
    assert clock.now_ms() == 65_500


@given(st.lists(st.tuples(st.integers(1, 10**12), st.floats(0, 100), st.none() | st.floats(0, 100)), min_size=1))
def test_the_clock_never_runs_backwards(steps: list[tuple[int, float, float | None]]) -> None:
    mono = FakeMonotonic()
    clock = DeadlineClock(0, mono)
    last = 0
    for ts, advance, learnt_ago in steps:
        clock.observe(ts, None if learnt_ago is None else mono.now - learnt_ago)
        mono.now += advance
        now = clock.now_ms()
        assert now is not None and now >= last
        last = now


def test_ms_until_counts_down_to_a_time_extrapolated_from_the_last_marker() -> None:
    mono = FakeMonotonic()
    clock = DeadlineClock(0, mono)
    assert clock.ms_until(5_000) is None
    clock.observe(5_000)
    assert clock.ms_until(4_000) == 0 and clock.ms_until(5_000) == 0
    mono.now += 0.25
    assert clock.ms_until(5_400) == 150
    mono.now += 1
    assert clock.ms_until(5_400) == 0


def test_ms_until_waits_out_use_now_while_the_clock_stands_still() -> None:
    mono = FakeMonotonic()
    clock = DeadlineClock(1000, mono)
    clock.observe(5_000)
    mono.now += 0.2
    assert clock.ms_until(5_001) == 800  # the clock stays at 5,000 until 1 s has passed, then jumps to 6,000
    assert clock.ms_until(7_000) == 1_800


@given(st.integers(0, 10**6), st.integers(1, 10**6), st.floats(0, 10))
def test_ms_until_is_exactly_when_the_clock_reaches_the_time(use_now: int, ahead: int, waited: float) -> None:
    mono = FakeMonotonic()
    clock = DeadlineClock(use_now, mono)
    clock.observe(10**9)
    mono.now += waited
    target = 10**9 + ahead
    wait = clock.ms_until(target)
    assert wait is not None
    mono.now += wait / 1000 + 1e-6
    now = clock.now_ms()
    assert now is not None and now >= target
    if wait > 0:
        mono.now -= 0.002
        assert (clock.now_ms() or 0) < target
