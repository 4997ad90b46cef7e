"""Message groups' pure parts one by one: the marker floor behind a commit's ``m=``, the ready ring's turns, the
ledger's FIFO and lowest unfinished record, the commit metadata, and a tracker that skips owner-tracked records."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kmq import wire
from kmq.client.consumer.groups.dispatch import GroupRules
from kmq.client.consumer.groups.ledger import PartitionLedger
from kmq.client.consumer.groups.marker_floor import MarkerFloor
from kmq.client.consumer.groups.ready_ring import ReadyRing
from kmq.wire import MessageId
from kmq.wire.marker_batch import decode_batch, encode_starts
from tests.markers_io import wait_for
from tests.unit.fake_clients import FakeClients, FakeGroupClient, Record
from tests.unit.fakes import FakeStart
from tests.unit.group_world import AFTER_MS, Owner, World
from tests.unit.test_tracker_facade import _running


def test_the_marker_floor_names_the_first_marker_of_any_record_at_or_after_the_committed_offset() -> None:
    floor = MarkerFloor()
    floor.note(5, 100)  # a Start record of records up to 5, at markers offset 100
    floor.note(3, 101)  # records up to 3 only: 100 covers them already
    floor.note(9, 102)
    assert len(floor) == 2
    assert floor.at(0) == 100 and floor.at(5) == 100 and floor.at(6) == 102 and floor.at(10) is None
    floor.committed(6)
    assert floor.at(6) == 102 and len(floor) == 1


def _ledger(concurrency: int = 1) -> PartitionLedger:
    ledger = PartitionLedger(0, concurrency)
    ledger.anchored = True  # a commit naming m= exists: grouped messages may be Started
    return ledger


def test_the_ring_gives_each_ready_group_one_turn_per_round_whatever_its_backlog() -> None:
    ledger, ring = _ledger(concurrency=2), ReadyRing()
    offset = 0
    for group, count in (("busy", 1000), ("q1", 2), ("q2", 2)):
        for _ in range(count):
            ring.offer(ledger, ledger.add(offset, group, object()), now_ms=0)
            offset += 1
    taken = [entry.group for _, entry in ring.take(6, now_ms=0)]
    assert taken == ["busy", "q1", "q2", "busy", "q1", "q2"]
    assert ring.take(6, now_ms=0) == [], "each group is at its concurrency (2)"


def test_a_group_whose_head_waits_out_a_delay_holds_back_only_itself() -> None:
    ledger, ring = _ledger(), ReadyRing()
    a0 = ledger.add(0, "a", object())
    ring.offer(ledger, a0, 0)
    ring.offer(ledger, ledger.add(1, "a", object()), 0)
    ring.offer(ledger, ledger.add(2, "b", object()), 0)
    (_, head), (_, b) = ring.take(5, now_ms=0)
    assert (head.offset, b.offset) == (0, 2)
    ring.offer(ledger, ledger.back(head, due_ms=1_000, counted=True), now_ms=0)  # released for 1 s
    assert ring.take(5, now_ms=500) == [] and ring.next_due_in_ms(500) == 500
    [(_, again)] = ring.take(5, now_ms=1_000)
    assert again is head and again.delivery_count == 2, "it comes back before offset 1 of its group"
    assert ledger.lowest_unfinished() == 0
    ledger.ending(again, None)
    ring.offer(ledger, ledger.groups["a"], 1_000)
    [(_, a1)] = ring.take(5, now_ms=1_000)
    assert a1.offset == 1 and ledger.ending_before(a1), "Started while 0's End is on its way, not handed out yet"
    ledger.finish(again)
    assert ledger.lowest_unfinished() == 1 and not ledger.ending_before(a1)


def test_commit_metadata_round_trips_and_tolerates_other_formats() -> None:
    assert wire.parse_group_commit_metadata(wire.group_commit_metadata(42)) == 42
    assert wire.parse_group_commit_metadata(wire.group_commit_metadata(None)) is None
    assert wire.parse_group_commit_metadata("") is None and wire.parse_group_commit_metadata("other m=3") is None


@pytest.mark.parametrize("group", ["", "x" * 256, 7])
def test_a_bad_group_name_is_refused_with_what_is_wrong(group: object) -> None:
    with pytest.raises(ValueError, match="group"):
        wire.validate_group(group)


def test_an_owner_tracked_start_batch_says_so_and_a_tracker_skips_it() -> None:
    start = FakeStart(MessageId(0, 7), b"p")
    value = encode_starts(b"q", 1000, [start], owner_tracked=True)
    assert value[:4] == b"\x00KB\x03" and decode_batch(value).owner_tracked
    group = FakeGroupClient("mk", partitions=1, end_offsets={0: 2})
    group.feed([Record("mk", 0, 0, b"q", value, timestamp_ms=wire.now_ms() - 5_000),
                Record("mk", 0, 1, b"q", encode_starts(b"q", 1000, [FakeStart(MessageId(0, 8), b"plain")]),
                       timestamp_ms=wire.now_ms() - 5_000)])
    clients = FakeClients(group)
    group.rebalance("assign", [0])
    with _running(clients):
        assert wait_for(lambda: clients.produced("m")), "the plain overdue Start is redelivered"
        time.sleep(0.5)
        assert [r.value for r in clients.produced("m")] == [b"plain"], "the owner-tracked one is not"


def test_the_next_message_is_started_while_the_end_before_it_travels_and_goes_out_once_that_end_is_durable() -> None:
    world = World()
    owner = Owner(world, "i0")
    world.send("a")
    world.send("a")
    owner.round(5, 5)
    [first] = owner.out.values()
    owner.settle(first, "ack")
    owner.round(5, 5)  # its End is written before the next Start; that End's report has not come yet
    assert [h[1] for h in world.handouts] == [0] and not owner.out, "Started, held back"
    assert world.acked == {0}
    owner.report()
    owner.round(5, 5)
    assert [h[1] for h in world.handouts] == [0, 1]


def test_a_message_whose_workers_went_silent_max_deliveries_times_is_dead_lettered_by_its_owner() -> None:
    world, rules = World(), GroupRules(max_deliveries=2)
    world.send("a")
    world.send("a")
    owner = Owner(world, "i0", rules=rules)
    for instance in ("i1", "i2"):  # the holder dies; its lease lapses; the next owner hands it out again
        owner.round(5, 5)
        owner.commit_all()
        owner.crash()
        world.now += 2 * AFTER_MS
        owner = Owner(world, instance, rules=rules)
        owner.round(5, 5)
        world.now += 2 * AFTER_MS
    owner.round(5, 5)
    owner.flush()
    owner.report()
    owner.round(5, 5)
    assert [(o, c) for _, o, c in world.handouts] == [(0, 1), (0, 2), (1, 1)]
    assert world.dead_letters == [(0, 3, "max deliveries (2) reached")]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", None, None, None]), min_size=1, max_size=30),
       st.lists(st.tuples(st.integers(1, 8), st.booleans()), min_size=1, max_size=12))
def test_divert_many_takes_what_divert_takes_record_by_record_and_leaves_the_ledger_alike(
        groups: list[str | None], reads: list[tuple[int, bool]]) -> None:
    """The Start pipeline's batch call against the per-record one it stands for, over reads and re-reads (a
    rewound batch read again) of plain and grouped records."""
    worlds = [World(), World()]
    for world in worlds:
        for group in groups:
            world.send(group)
    owners = [Owner(world, "i0") for world in worlds]
    position = 0
    for size, again in reads:
        batch = worlds[0].records[position:position + size]
        if again and position:  # a rewound batch: read again from an earlier offset
            batch = worlds[0].records[max(0, position - size):position]
        else:
            position += len(batch)
        by_batch = [r.offset_ for r in owners[0].dispatch.divert_many(list(batch))]
        by_record = [r.offset_ for r in worlds[1].records[batch[0].offset_:batch[-1].offset_ + 1]
                     if not owners[1].dispatch.divert(r)] if batch else []
        assert by_batch == by_record
        ledgers = [owner.dispatch._ledgers[0] for owner in owners]
        assert (ledgers[0].read_to, len(ledgers[0].entries)) == (ledgers[1].read_to, len(ledgers[1].entries))
