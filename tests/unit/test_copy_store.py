"""CopyStore: deadlines of Starts with a payload; stale heap entries (moved, ended, taken) never fire and never stay
behind as the next deadline once they are past."""

from __future__ import annotations

from kmq.redelivery.copy_store import COMPACT_FACTOR, CopyStore
from kmq.redelivery.in_flight import InFlight
from kmq.wire import MessageId


def _item(offset: int, deadline_ms: int, holder: tuple[str, str] | None = None) -> InFlight:
    return InFlight(MessageId(0, offset), b"q", b"p", (), 1, None, 0, offset, 0, deadline_ms, holder=holder)


def test_a_moved_deadline_fires_once_at_its_new_time_and_an_ended_message_never() -> None:
    store = CopyStore()
    store.add(_item(1, 100))
    store.add(_item(2, 100))
    assert store.keep_alive(300, [MessageId(0, 1), MessageId(0, 9)], returned=False) == (1, 0)
    assert store.end(MessageId(0, 2)) is not None
    assert store.take_expired(200) == []
    assert store.next_deadline_ms() == 300, "the stale entries before 200 were dropped"
    assert [i.message_id.offset for i in store.take_expired(301)] == [1]
    assert store.keep_alive(900, [MessageId(0, 1)], returned=False) == (0, 1), "being redelivered: not re-armed"
    assert store.restart(MessageId(0, 1), 900) == "start_while_redelivering"


def test_a_restart_makes_earlier_instances_messages_due_at_once() -> None:
    store = CopyStore()
    store.add(_item(1, 10_000, ("w", "h:1")))
    store.add(_item(2, 10_000, ("w", "h:2")))
    store.add(_item(3, 10_000, ("other", "h:1")))
    assert store.take_over("w", "h:2", 50) == 1
    assert [i.message_id.offset for i in store.take_expired(51)] == [1]


def test_the_heap_is_rebuilt_when_stale_entries_pile_up() -> None:
    store = CopyStore()
    store.add(_item(1, 10))
    for deadline in range(20, 20 + COMPACT_FACTOR * 1 + 1500):
        store.keep_alive(deadline, [MessageId(0, 1)], returned=False)
    assert len(store._heap) <= COMPACT_FACTOR * len(store.deadlines) + 1000
