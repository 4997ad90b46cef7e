"""DueTimes: nothing is handed out before its due time; short waits are held, long ones go on capped hops."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kmq.client.consumer.due_times import LOCAL_HOLD_MS, MAX_HOP_MS, DueTimes
from kmq.client.message import Message
from kmq.wire import HEADER_DELIVER_AT, HEADER_EXPIRES_AT, MessageId


def _message(offset: int, due_ms: int | None) -> Message:
    headers = {} if due_ms is None else {HEADER_DELIVER_AT: str(due_ms).encode()}
    return Message(b"p", headers, "q", MessageId(0, offset), 1, MessageId(0, offset), 0, None)  # type: ignore[arg-type]


@given(st.lists(st.one_of(st.none(), st.integers(0, 2 * MAX_HOP_MS)), max_size=30), st.integers(0, 10_000))
def test_every_message_is_handed_out_at_or_after_its_due_time_or_hopped_or_held(
    dues: list[int | None], start_ms: int,
) -> None:
    now = [start_ms]
    due_times = DueTimes(lambda: now[0])
    messages = [_message(i, d) for i, d in enumerate(dues)]
    ready, hops, expired = due_times.sort(messages)
    assert expired == []
    assert len(ready) + len(hops) + len(due_times) == len(messages)
    for m in ready:
        # The header's integer ms, not deliver_at's float seconds: 4.017 * 1000 is 4017.0000000000005.
        assert HEADER_DELIVER_AT not in m.record_headers or int(m.record_headers[HEADER_DELIVER_AT]) <= start_ms
    for m, delay_ms in hops:
        due_ms = int(m.record_headers[HEADER_DELIVER_AT])
        assert due_ms - start_ms > LOCAL_HOLD_MS and delay_ms == min(due_ms - start_ms, MAX_HOP_MS)
    handed: list[Message] = []
    while len(due_times):
        now[0] += 100
        for m in due_times.take_due():
            assert int(m.record_headers[HEADER_DELIVER_AT]) <= now[0]
            handed.append(m)
    assert all(int(m.record_headers[HEADER_DELIVER_AT]) - start_ms <= LOCAL_HOLD_MS for m in handed)


def test_the_next_due_time_bounds_the_loops_wait_and_close_takes_what_is_held() -> None:
    now = [1_000]
    due_times = DueTimes(lambda: now[0])
    due_times.sort([_message(1, 1_400), _message(2, 1_200)])
    assert due_times.next_due_in_s() == 0.2
    now[0] = 1_250
    assert [m.message_id.offset for m in due_times.take_due()] == [2]
    assert [m.message_id.offset for m in due_times.take_all()] == [1] and due_times.next_due_in_s() is None


def test_an_expired_message_is_sorted_out_whatever_its_due_time() -> None:
    due_times = DueTimes(lambda: 5_000)
    fresh = _message(1, None)
    fresh.record_headers[HEADER_EXPIRES_AT] = b"6000"
    stale = _message(2, 9_000)
    stale.record_headers[HEADER_EXPIRES_AT] = b"5000"
    assert due_times.sort([fresh, stale]) == ([fresh], [], [stale])
