"""The live classification's parts (kmq.ops.live_index, kmq.ops.live_members) by themselves."""

from __future__ import annotations

from kmq.ops.lifecycle import MessageLife, Record
from kmq.ops.live_index import QueueIndex
from kmq.ops.live_members import MessageMembers
from kmq.wire import MessageId
from kmq.wire import vocabulary as v

A, B = ("jobs", MessageId(0, 1)), ("jobs", MessageId(0, 2))


def life(key: tuple[str, MessageId], state: str, since: int | None = None) -> MessageLife:
    m = MessageLife(queue=key[0], first_id=key[1], state=state)
    if state == v.WAITING:
        m.waiting_since_ms = since
    elif state == v.IN_FLIGHT:
        m.in_flight_since_ms = since
    return m


def test_the_index_moves_a_message_between_states_and_keeps_its_queues_figures() -> None:
    index = QueueIndex()
    a_waiting, b_waiting = life(A, v.WAITING, 100), life(B, v.WAITING, 200)
    index.replace(A, None, a_waiting)
    index.replace(B, None, b_waiting)
    assert index.count("jobs", v.WAITING) == 2 and list(index.keys("jobs", v.WAITING)) == [B, A]
    lives = {A: a_waiting, B: b_waiting}
    assert index.summary("jobs", lives).oldest_waiting_ms == 100
    a_flying = life(A, v.IN_FLIGHT, 300)
    index.replace(A, a_waiting, a_flying)
    lives[A] = a_flying
    summary = index.summary("jobs", lives)
    assert summary.states == {v.WAITING: 1, v.IN_FLIGHT: 1}
    assert (summary.oldest_waiting_ms, summary.oldest_in_flight_ms) == (200, 300)  # A's old entry no longer holds
    index.replace(B, b_waiting, None)
    del lives[B]
    assert index.count("jobs", v.WAITING) == 0 and index.summary("jobs", lives).oldest_waiting_ms == 0
    assert index.queues() == ["jobs"]


def test_members_move_a_delivery_to_its_records_message_and_forget_everything_of_one() -> None:
    members = MessageMembers()
    record = Record(MessageId(0, 2), "jobs", 1, None, 0)
    members.add_record(B, record)
    start = MessageId(0, 2)
    assert members.place_delivery(start, A) is None  # first said by its Start to be A's
    assert members.place_delivery(start, B) == A  # its record says B's
    assert members.get(A) is not None and not members.get(A).deliveries  # type: ignore[union-attr]
    assert members.delivery_key(start) == B and members.records_of(B) == [record]
    assert members.of_queue("jobs") == {A, B}
    assert members.forget(B) == {start}
    assert B not in members and members.record(record.message_id) is None and members.delivery_key(start) is None
    assert members.of_queue("jobs") == {A}
