"""HandOut, a consumer's ready buffer: every message put is taken once or returned at close, never both or
neither, whatever the threads; listeners hear of every put; back-pressure follows the in-flight limit."""

from __future__ import annotations

import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from kmq.client.consumer.hand_out import HandOut
from kmq.client.message import Message
from kmq.wire import MessageId
from tests.markers_io import wait_for


def messages(first: int, n: int) -> list[Message]:
    return [Message(b"", {}, "q", MessageId(0, i), 1, MessageId(0, i), 0, _settler=None)  # type: ignore[arg-type]
            for i in range(first, first + n)]


def test_takes_come_in_order_and_never_more_than_asked() -> None:
    out = HandOut(capacity=100, max_in_flight=100)
    out.put(messages(0, 5))
    assert [m.message_id.offset for m in out.take(3)] == [0, 1, 2]
    assert out.take_one().message_id.offset == 3  # type: ignore[union-attr]
    assert [m.message_id.offset for m in out.take(10)] == [4]
    assert out.take(10) == [] and out.take_one() is None


def test_listeners_hear_each_put_with_its_size_and_a_zero_at_close() -> None:
    out = HandOut(capacity=100, max_in_flight=100)
    heard: list[int] = []
    out.add_listener(heard.append)
    out.put(messages(0, 3))
    out.put(messages(3, 1))
    out.wake_all()
    assert [m.message_id.offset for m in out.close()] == [0, 1, 2, 3]
    assert heard == [3, 1, 0, 0]


def test_a_waiting_receiver_wakes_on_put_and_on_close() -> None:
    out = HandOut(capacity=100, max_in_flight=100)
    woke = threading.Event()

    def receiver() -> None:
        out.wait(30)
        woke.set()

    for wake in (lambda: out.put(messages(0, 1)), out.close):
        woke.clear()
        thread = threading.Thread(target=receiver)
        thread.start()
        wake()
        assert woke.wait(10), "the receiver slept through it"
        thread.join(10)


@settings(max_examples=30, deadline=None)
@given(batches=st.lists(st.integers(1, 40), min_size=1, max_size=20), takers=st.integers(1, 6),
       take_size=st.integers(1, 8))
def test_each_message_is_taken_once_or_returned_at_close(batches: list[int], takers: int, take_size: int) -> None:
    out = HandOut(capacity=10_000, max_in_flight=10_000)
    taken: list[list[Message]] = [[] for _ in range(takers)]
    done = threading.Event()

    def take(mine: list[Message]) -> None:
        while not done.is_set():
            got = out.take(take_size) if take_size > 1 else [m for m in [out.take_one()] if m is not None]
            mine.extend(got)
            if not got:
                out.wait(0.001)

    threads = [threading.Thread(target=take, args=(mine,)) for mine in taken]
    for thread in threads:
        thread.start()
    first = 0
    for n in batches:
        out.put(messages(first, n))
        first += n
    returned = out.close()
    done.set()
    for thread in threads:
        thread.join(10)
    offsets = [m.message_id.offset for m in [*returned, *(m for mine in taken for m in mine)]]
    assert sorted(offsets) == list(range(first))


def test_room_is_bounded_by_the_buffer_and_by_the_in_flight_limit() -> None:
    out = HandOut(capacity=10, max_in_flight=50)
    assert out.room(starting=0, in_flight=0) == 10
    out.put(messages(0, 4))
    assert out.room(starting=2, in_flight=6) == 4  # 10 - (4 buffered + 2 starting)
    assert out.room(starting=0, in_flight=48) == 2  # the in-flight limit
    out.limit = 5
    assert out.room(starting=0, in_flight=4) == 1
    assert out.room(starting=0, in_flight=0) == 1, "4 buffered of 5, however few are in flight (at most once)"


def test_the_limit_stays_between_one_and_max_in_flight() -> None:
    out = HandOut(capacity=10, max_in_flight=50)
    out.limit = 0
    assert out.limit == 1
    out.limit = 1_000
    assert out.limit == 50


def test_with_messages_still_buffered_the_loop_waits_for_a_quarter_of_the_room() -> None:
    out = HandOut(capacity=100, max_in_flight=100)  # a quarter: 25
    out.put(messages(0, 90))
    assert out.usable_room(starting=0, in_flight=90) == 0  # room 10 < 25 while receivers have work
    out.take(90)
    assert out.usable_room(starting=0, in_flight=90) == 10  # nothing buffered: Start what there is room for


def test_the_loop_waiting_for_room_wakes_after_a_quarter_of_it_is_freed() -> None:
    out = HandOut(capacity=100, max_in_flight=16)  # a quarter: 4 receives or settles
    out.put(messages(0, 16))
    in_flight = [16]
    woke = threading.Event()

    def loop() -> None:
        room = lambda: out.room(0, in_flight[0])  # noqa: E731
        out.wait_for_room(room, room, timeout_s=60)
        woke.set()

    thread = threading.Thread(target=loop)
    thread.start()
    assert wait_for(lambda: out._waiting_for_room, timeout_s=10)
    out.take_one()  # a receive (it wakes the loop itself), then its settle
    in_flight[0] -= 1
    out.wake_loop()
    assert not out._room_freed.is_set(), "woken for one message"
    out.take_one()
    in_flight[0] -= 1
    out.wake_loop()
    assert woke.wait(10), "still asleep with a quarter of the room free"
    thread.join(10)


def test_raising_the_limit_wakes_the_loop_waiting_for_room() -> None:
    out = HandOut(capacity=100, max_in_flight=100)
    out.limit = 4
    out.put(messages(0, 4))
    woke = threading.Event()

    def loop() -> None:
        room = lambda: out.room(0, 4)  # noqa: E731
        out.wait_for_room(room, room, timeout_s=60)
        woke.set()

    thread = threading.Thread(target=loop)
    thread.start()
    assert wait_for(lambda: out._waiting_for_room, timeout_s=10)
    out.limit = 50
    assert woke.wait(10)
    thread.join(10)
