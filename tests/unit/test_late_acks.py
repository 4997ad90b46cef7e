"""LateAcks: acks after their deadline on the broker's clock are counted, and said at most every few seconds."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from kmq.client.consumer.late_acks import LOG_EVERY_S, LateAcks


def test_only_acks_past_their_deadline_count_and_a_burst_is_said_once() -> None:
    clock = [100.0]
    broker_ms: list[int | None] = [10_000]
    late = LateAcks("jobs", lambda: broker_ms[0], lambda: clock[0])
    with capture_logs() as logs:
        late.check([9_000, 11_000, 9_999])
        late.check([5_000])
        assert late.count == 3
        clock[0] += LOG_EVERY_S
        late.check([1])
    assert late.count == 4
    assert [(e["event"], e["count"], e["total"]) for e in logs] == [("late_acks", 2, 2), ("late_acks", 2, 4)]


@pytest.mark.parametrize("broker_ms", [None, 0])
def test_nothing_is_late_while_the_broker_clock_is_unknown_or_behind(broker_ms: int | None) -> None:
    late = LateAcks("jobs", lambda: broker_ms)
    late.check([1_000])
    late.check([])
    assert late.count == 0


def test_one_ack_at_a_time_reuses_a_clock_reading_for_ten_milliseconds() -> None:
    clock, reads = [0.0], []
    late = LateAcks("jobs", lambda: reads.append(1) or 10_000, lambda: clock[0])
    late.check_one(9_999)
    late.check_one(10_001)
    clock[0] += 0.005
    late.check_one(1)
    assert (late.count, len(reads)) == (2, 1)
    clock[0] += 0.01
    late.check_one(1)
    assert (late.count, len(reads)) == (3, 2)
