"""PartitionState: any interleaving of Start/KeepAlive/End/expiry yields the right in-flight set and offset."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kmq.redelivery.partition_state import PartitionState
from kmq.wire import RELEASE_REASON, RETURN_REASON, MessageId
from kmq.wire.marker_batch import decode_batch, decode_record, encode_hello, encode_settles, encode_starts
from kmq.wire.markers import Marker, MarkerType
from tests.unit.fakes import FakeStart

IDS = st.integers(0, 7).map(lambda i: MessageId(i % 2, i))


def start(mid: MessageId, after: int = 1000) -> Marker:
    return Marker(MarkerType.START, mid, after, b"q", b"payload-%d" % mid.offset)


def marker(kind: MarkerType, mid: MessageId, after: int = 0) -> Marker:
    return Marker(kind, mid, after)


def test_three_starts_expire_in_deadline_order_and_the_oldest_pins_the_offset() -> None:
    state = PartitionState(0)
    for offset, ts in ((0, 0), (2, 2000), (1, 1000)):
        state.apply(offset, ts, start(MessageId(0, offset)))
    assert state.take_expired(1000) == []
    assert [i.message_id.offset for i in state.take_expired(3001)] == [0, 1, 2]
    assert state.commit_offset() == 0  # still in flight until the End comes back
    state.apply(3, 3001, marker(MarkerType.END, MessageId(0, 0)))
    assert state.commit_offset() == 1


def test_the_deadline_is_strict_and_keepalive_moves_it() -> None:
    state = PartitionState(0)
    state.apply(0, 0, start(MessageId(0, 0)))
    assert state.take_expired(1000) == []
    state.apply(1, 900, marker(MarkerType.KEEPALIVE, MessageId(0, 0), 1000))
    assert state.take_expired(1001) == []
    assert len(state.take_expired(1901)) == 1


def test_strays_are_counted_and_change_nothing() -> None:
    state = PartitionState(0, next_offset=10)
    state.apply(10, 5, marker(MarkerType.END, MessageId(0, 99)))
    state.apply(11, 5, marker(MarkerType.KEEPALIVE, MessageId(0, 99), 10))
    assert len(state) == 0 and state.commit_offset() == 12
    assert state.stats == {"unknown_end": 1, "unknown_keepalive": 1}


def test_a_duplicate_start_refreshes_the_deadline_but_keeps_the_first_payload_and_offset() -> None:
    state = PartitionState(0)
    state.apply(0, 0, start(MessageId(0, 1)))
    state.apply(5, 1000, Marker(MarkerType.START, MessageId(0, 1), 1000, b"q", b"other"))
    assert state.take_expired(1001) == []
    [item] = state.take_expired(2001)
    assert (item.value, item.marker_offset, state.commit_offset()) == (b"payload-1", 0, 0)


def test_a_start_for_a_message_being_redelivered_does_not_rearm_it() -> None:
    state = PartitionState(0)
    state.apply(0, 0, start(MessageId(0, 1)))
    assert len(state.take_expired(5000)) == 1
    state.apply(1, 5000, start(MessageId(0, 1)))
    assert state.take_expired(10**9) == [] and state.stats["start_while_redelivering"] == 1


def test_a_batch_record_pins_its_offset_until_every_start_in_it_has_ended() -> None:
    state = PartitionState(0)
    state.start(7, 0, b"q", 1000, [(MessageId(0, i), b"p", (), 1, None, 0) for i in range(3)])
    state.end([MessageId(0, 0), MessageId(0, 2)])
    assert state.commit_offset() == 7
    state.end([MessageId(0, 1)])
    assert state.commit_offset() == 8 and len(state) == 0


settles = st.lists(st.tuples(st.sampled_from(["keep_alive", "ack"]), IDS), max_size=12)


@given(st.lists(IDS, min_size=1, max_size=8, unique=True), settles, st.integers(0, 5000))
def test_folding_a_batch_record_equals_folding_its_markers_one_by_one(
    ids: list[MessageId], ops: list[tuple[str, MessageId]], now_ms: int,
) -> None:
    starts = [FakeStart(mid, b"p%d" % mid.offset) for mid in ids]
    records = [encode_starts(b"q", 1000, starts),
               encode_settles(b"q", 1000, keep_alives=[m for op, m in ops if op == "keep_alive"],
                              acks=[m for op, m in ops if op == "ack"])]
    batched, one_by_one = PartitionState(0), PartitionState(0)
    for offset, value in enumerate(records):
        batched.apply_batch(offset, offset * 100, decode_batch(value))
        for marker in decode_record(value):
            one_by_one.apply(offset, offset * 100, marker)
    assert batched.in_flight == one_by_one.in_flight
    assert batched.commit_offset() == one_by_one.commit_offset()
    assert batched.take_expired(now_ms) == one_by_one.take_expired(now_ms)


class PartitionStateMachine(RuleBasedStateMachine):
    """Model: a dict of in-flight ids → (first Start offset, deadline, taken for redelivery)."""

    @initialize()
    def setup(self) -> None:
        self.state = PartitionState(0)
        self.model: dict[MessageId, list[int | bool]] = {}
        self.offset = -1
        self.now = 0

    def _next(self) -> tuple[int, int]:
        self.offset += 1
        self.now += 10
        return self.offset, self.now

    @rule(mid=IDS, after=st.integers(0, 200))
    def start(self, mid: MessageId, after: int) -> None:
        offset, ts = self._next()
        self.state.apply(offset, ts, start(mid, after))
        if mid not in self.model:
            self.model[mid] = [offset, ts + after, False]
        elif not self.model[mid][2]:
            self.model[mid][1] = ts + after

    @rule(mid=IDS, after=st.integers(0, 200))
    def keep_alive(self, mid: MessageId, after: int) -> None:
        offset, ts = self._next()
        self.state.apply(offset, ts, marker(MarkerType.KEEPALIVE, mid, after))
        if mid in self.model and not self.model[mid][2]:
            self.model[mid][1] = ts + after

    @rule(mid=IDS)
    def end(self, mid: MessageId) -> None:
        offset, ts = self._next()
        self.state.apply(offset, ts, marker(MarkerType.END, mid))
        self.model.pop(mid, None)

    @precondition(lambda self: bool(self.model))
    @rule(advance=st.integers(0, 300))
    def expire(self, advance: int) -> None:
        now = self.now + advance
        taken = self.state.take_expired(now)
        expected = {m for m, (_, deadline, t) in self.model.items() if not t and int(deadline) < now}
        assert {i.message_id for i in taken} == expected
        assert [i.deadline_ms for i in taken] == sorted(i.deadline_ms for i in taken)
        for mid in expected:
            self.model[mid][2] = True

    @invariant()
    def in_flight_set_matches(self) -> None:
        assert set(self.state.in_flight) == set(self.model)
        assert set(self.state.copies.deadlines) == {m for m, v in self.model.items() if not v[2]}

    @invariant()
    def committed_offset_is_the_oldest_in_flight_start(self) -> None:
        expected = min((int(v[0]) for v in self.model.values()), default=self.offset + 1)
        assert self.state.commit_offset() == expected


TestPartitionStateMachine = PartitionStateMachine.TestCase


def test_a_returned_message_expires_at_once_and_is_marked_so_its_copy_keeps_the_count() -> None:
    state = PartitionState(0)
    state.apply(0, 0, Marker(MarkerType.START, MessageId(0, 0), 60_000, b"q", b"p", delivery_count=2))
    state.apply(0, 0, Marker(MarkerType.START, MessageId(0, 1), 60_000, b"q", b"p", delivery_count=2))
    state.apply(1, 500, Marker(MarkerType.KEEPALIVE, MessageId(0, 0), 0, reason=RETURN_REASON))
    state.apply(1, 500, Marker(MarkerType.KEEPALIVE, MessageId(0, 1), 0, reason=RELEASE_REASON))
    expired = state.take_expired(501)
    assert [(i.message_id.offset, i.returned) for i in expired] == [(0, True), (1, False)]


def test_a_restarted_client_takes_over_what_its_earlier_instance_held_and_nothing_else() -> None:
    state = PartitionState(0)
    old = [FakeStart(MessageId(0, i), b"p") for i in range(3)]
    other = [FakeStart(MessageId(0, 10), b"p")]
    state.apply_batch(0, 1000, decode_batch(encode_starts(b"q", 60_000, old, client_id="w1", instance_id="h:1")))
    state.apply_batch(1, 1000, decode_batch(encode_starts(b"q", 60_000, other, client_id="w2", instance_id="h:2")))
    state.apply_batch(2, 5000, decode_batch(encode_hello(b"q", "w1", "h:3")))
    assert [i.message_id.offset for i in state.take_expired(5001)] == [0, 1, 2]
    assert state.take_expired(60_000) == []  # w2's deadline is still 61,000
    state.apply_batch(3, 6000, decode_batch(encode_hello(b"q", "w2", "h:2")))  # the same instance: nothing
    assert state.take_expired(6001) == []
