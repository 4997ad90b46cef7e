"""Intake: backlog and pause state; every assigned partition ends in the pause state the consumer intends,
whatever librdkafka remembered across revoke, lost and re-assignment."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kmq.client.consumer.intake import Intake
from tests.unit.fakes import FakeFetchClient, FakeRecord, Part

PARTS = [Part("m", p) for p in range(6)]


def _intake(client: FakeFetchClient, batch_records: int = 1) -> Intake:
    """Soft limit 4 records per batch record, hard limit 40 records per batch record."""
    return Intake(client, b"q", on_error=lambda r: None, batch_records=batch_records, hard_limit=40 * batch_records)


def _records(n: int, start: int = 0) -> list[FakeRecord]:
    return [FakeRecord("m", i % 6, start + i) for i in range(n)]


def _revoke(client: FakeFetchClient, intake: Intake, parts: list[Part], flipped: frozenset[int] = frozenset()) -> None:
    """``flipped``: kept partitions whose paused flag the client changed during the rebalance."""
    intake.forget([(p.topic, p.partition) for p in parts])
    client.unassign(parts)
    client.paused ^= {p for p in client.assigned if p.partition in flipped}
    intake.rebalanced()


def _assign(client: FakeFetchClient, intake: Intake, parts: list[Part]) -> None:
    client.assign(parts)
    intake.rebalanced()


def test_past_the_soft_limit_each_poll_takes_one_record_and_librdkafka_keeps_the_rest() -> None:
    client = FakeFetchClient(assigned=list(PARTS), pending=_records(10))
    intake = _intake(client)
    client.pending, rest = client.pending[:4], client.pending[4:]
    intake.fetch(0)
    client.pending += rest
    assert intake.fetch(0) == 1 and len(client.pending) == 5
    intake.update_pause()
    assert not intake.paused


def test_past_the_hard_limit_fetching_pauses_and_under_the_soft_limit_it_resumes() -> None:
    client = FakeFetchClient(assigned=list(PARTS), pending=_records(50))
    intake = _intake(client)
    intake.fetch(0)
    intake.update_pause()
    assert intake.paused and client.fetchable() == set()
    intake.take(45)
    intake.update_pause()
    assert intake.paused, "above the soft limit: a resume now would cost a fetch round trip for little"
    intake.take(1)
    intake.update_pause()
    assert not intake.paused and client.fetchable() == set(range(6))


def test_partitions_revoked_while_paused_are_fetched_when_they_come_back_after_the_resume() -> None:
    # Given a paused intake
    client = FakeFetchClient(assigned=list(PARTS), pending=_records(60))
    intake = _intake(client)
    intake.fetch(0)
    intake.update_pause()
    assert intake.paused
    # When half the partitions are revoked, the rest resumed, and the half assigned again
    _revoke(client, intake, PARTS[:3])
    intake.take(30)
    intake.update_pause()
    _assign(client, intake, PARTS[:3])
    # Then all six are fetched (librdkafka alone would keep 0-2 paused)
    assert client.fetchable() == set(range(6))


def test_partitions_assigned_while_paused_stay_paused_until_the_resume() -> None:
    client = FakeFetchClient(assigned=list(PARTS[3:]), pending=[r for r in _records(120) if r.partition() >= 3])
    intake = _intake(client)
    intake.fetch(0)
    intake.update_pause()
    _assign(client, intake, PARTS[:3])
    assert client.fetchable() == set()
    intake.take(60)
    intake.update_pause()
    assert client.fetchable() == set(range(6))


def test_taking_stops_after_room_own_records_and_foreign_ones_ride_along() -> None:
    client = FakeFetchClient(assigned=list(PARTS))
    client.pending = [FakeRecord("m", 0, 0, b"other"), FakeRecord("m", 0, 1), FakeRecord("m", 0, 2, b"other"),
                      FakeRecord("m", 0, 3), FakeRecord("m", 0, 4)]
    intake = _intake(client, batch_records=100)
    intake.fetch(0)
    taken = intake.take(2)
    assert [r.offset() for r in taken] == [0, 1, 2, 3]
    intake.put_back(taken[2:])
    assert [r.offset() for r in intake.take(5)] == [2, 3, 4]


def test_records_of_forgotten_partitions_leave_the_backlog() -> None:
    client = FakeFetchClient(assigned=list(PARTS), pending=_records(12))
    intake = _intake(client, batch_records=100)
    intake.fetch(0)
    intake.forget([("m", 0), ("m", 1)])
    assert {r.partition() for r in intake.take(100)} == {2, 3, 4, 5}


operations = st.lists(st.one_of(
    st.tuples(st.just("fill"), st.integers(1, 60)),
    st.tuples(st.just("take"), st.integers(1, 60)),
    st.tuples(st.just("revoke"), st.sets(st.integers(0, 5), min_size=1), st.frozensets(st.integers(0, 5))),
    st.tuples(st.just("assign"), st.sets(st.integers(0, 5), min_size=1)),
), max_size=40)


@given(operations)
def test_every_assigned_partition_is_in_the_intended_pause_state_after_any_sequence(ops: list[tuple]) -> None:
    client = FakeFetchClient(assigned=list(PARTS))
    intake = _intake(client)
    offset = 0
    for op, arg, *flipped in ops:
        if op == "fill":
            client.pending += _records(arg, offset)
            offset += arg
            intake.fetch(0)
        elif op == "take":
            intake.take(arg)
        elif op == "revoke":
            _revoke(client, intake, [p for p in PARTS if p.partition in arg and p in client.assigned], *flipped)
        else:
            _assign(client, intake, [p for p in PARTS if p.partition in arg and p not in client.assigned])
        intake.update_pause()
        expected = set() if intake.paused else {p.partition for p in client.assigned}
        assert client.fetchable() == expected


def test_records_of_a_partition_given_up_are_dropped_wherever_they_turn_up_until_it_comes_back() -> None:
    client = FakeFetchClient(assigned=list(PARTS), pending=_records(6))
    intake = _intake(client, batch_records=10)
    intake.forget([("m", 0)])
    # librdkafka can still return a record of it in the poll that ran the loss's callback
    intake.fetch(0)
    assert sorted(r.partition() for r in intake.take(10)) == [1, 2, 3, 4, 5]
    intake.put_back([FakeRecord("m", 0, 6), FakeRecord("m", 1, 7)])  # a rewind after a fenced commit
    assert [(r.partition(), r.offset()) for r in intake.take(10)] == [(1, 7)]
    intake.assigned([0])
    intake.put_back([FakeRecord("m", 0, 8)])
    assert [(r.partition(), r.offset()) for r in intake.take(10)] == [(0, 8)]
