"""DeadlineClock: log time, extrapolated by an injected monotonic clock."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from redelivery.clock import DeadlineClock


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


@given(st.lists(st.tuples(st.integers(1, 10**12), st.floats(0, 100)), min_size=1))
def test_the_clock_never_runs_backwards(steps: list[tuple[int, float]]) -> None:
    mono = FakeMonotonic()
    clock = DeadlineClock(0, mono)
    last = 0
    for ts, advance in steps:
        clock.observe(ts)
        mono.now += advance
        now = clock.now_ms()
        assert now is not None and now >= last
        last = now
