"""Starts by reference in the tracker's state: any interleaving of Starts of both kinds (copies and references,
as in a partition upgraded mid-flight), keep-alives, Ends and expiries yields the right in-flight set, deadlines,
commit offset and redelivery items."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from kmq.redelivery.partition_state import PartitionState
from kmq.redelivery.ref_store import OFFSET_LIMIT, pack, unpack
from kmq.wire import MessageId
from kmq.wire.marker_batch import decode_batch, encode_hello, encode_settles, encode_starts
from kmq.wire.markers import Marker, MarkerType
from tests.unit.fakes import FakeStart

IDS = st.integers(0, 9).map(lambda i: MessageId(i % 3, i))


@given(st.integers(0, 2**20), st.integers(0, OFFSET_LIMIT - 1))
def test_a_packed_id_unpacks_to_itself(partition: int, offset: int) -> None:
    assert unpack(pack(MessageId(partition, offset))) == MessageId(partition, offset)


def test_an_offset_past_the_packing_limit_is_never_taken_for_another_message() -> None:
    assert pack(MessageId(0, OFFSET_LIMIT)) == -1 != pack(MessageId(1, 0))


def test_a_reference_start_expires_with_what_its_start_said_and_no_payload() -> None:
    state = PartitionState(0)
    copy = FakeStart(MessageId(1, 7), b"", {}, delivery_count=3, first=MessageId(0, 2), enqueued_at_ms=40)
    first = FakeStart(MessageId(0, 9), b"", {}, enqueued_at_ms=50)
    state.apply_batch(4, 1000, decode_batch(encode_starts(b"q", 500, [], refs=[copy, first], client_id="c",
                                                          instance_id="h:1")))
    assert state.take_expired(1500) == []
    items = state.take_expired(1501)
    assert [(i.message_id, i.value, i.delivery_count, i.first_message_id, i.enqueued_at_ms, i.marker_offset,
             i.start_timestamp_ms, i.deadline_ms, i.holder) for i in items] == [
        (MessageId(0, 9), None, 1, None, 50, 4, 1000, 1500, ("c", "h:1")),
        (MessageId(1, 7), None, 3, MessageId(0, 2), 40, 4, 1000, 1500, ("c", "h:1"))]
    assert state.commit_offset() == 4 and len(state) == 2
    state.apply_batch(5, 1600, decode_batch(encode_settles(b"q", 0, acks=[MessageId(0, 9), MessageId(1, 7)])))
    assert state.commit_offset() == 6 and len(state) == 0


def test_a_batch_of_references_is_freed_once_its_last_message_ends() -> None:
    state = PartitionState(0)
    refs = [FakeStart(MessageId(0, i), b"") for i in range(3)]
    state.apply_batch(0, 0, decode_batch(encode_starts(b"q", 500, [], refs=refs)))
    state.apply_batch(1, 10, decode_batch(encode_settles(b"q", 0, acks=[r.message_id for r in refs])))
    assert len(state) == 0 and state.per_queue() == {} and state.take_expired(10**9) == []


def test_a_restart_takes_over_references_too() -> None:
    state = PartitionState(0)
    refs = [FakeStart(MessageId(0, i), b"") for i in range(3)]
    state.apply_batch(0, 1000, decode_batch(encode_starts(b"q", 60_000, [], refs=refs, client_id="w",
                                                          instance_id="h:1")))
    state.apply_batch(1, 5000, decode_batch(encode_hello(b"q", "w", "h:2")))
    assert [i.message_id.offset for i in state.take_expired(5001)] == [0, 1, 2]


class MixedStateMachine(RuleBasedStateMachine):
    """Model: in-flight id → [first Start offset, deadline, taken]; Starts come as copies or references, settles
    one marker at a time or in batch records."""

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

    @rule(mids=st.lists(IDS, min_size=1, max_size=4, unique=True), refs=st.lists(st.booleans(), min_size=4,
                                                                                  max_size=4),
          after=st.integers(0, 200))
    def start(self, mids: list[MessageId], refs: list[bool], after: int) -> None:
        offset, ts = self._next()
        starts = [FakeStart(mid, b"p%d" % mid.offset) for mid in mids]
        copies = [s for s, ref in zip(starts, refs, strict=False) if not ref]
        by_ref = [s for s, ref in zip(starts, refs, strict=False) if ref]
        self.state.apply_batch(offset, ts, decode_batch(encode_starts(b"q", after, copies, refs=by_ref)))
        for mid in mids:
            if mid not in self.model:
                self.model[mid] = [offset, ts + after, False]
            elif not self.model[mid][2]:
                self.model[mid][1] = ts + after

    @rule(mids=st.lists(IDS, min_size=1, max_size=4, unique=True), after=st.integers(0, 200), batched=st.booleans())
    def keep_alive(self, mids: list[MessageId], after: int, batched: bool) -> None:
        offset, ts = self._next()
        if batched:
            self.state.apply_batch(offset, ts, decode_batch(encode_settles(b"q", after, keep_alives=mids)))
        else:
            for mid in mids:
                self.state.apply(offset, ts, Marker(MarkerType.KEEPALIVE, mid, after))
        for mid in mids:
            if mid in self.model and not self.model[mid][2]:
                self.model[mid][1] = ts + after

    @rule(mids=st.lists(IDS, min_size=1, max_size=4, unique=True), batched=st.booleans())
    def end(self, mids: list[MessageId], batched: bool) -> None:
        offset, ts = self._next()
        if batched:
            self.state.apply_batch(offset, ts, decode_batch(encode_settles(b"q", 0, acks=mids)))
        else:
            for mid in mids:
                self.state.apply(offset, ts, Marker(MarkerType.END, mid))
        for mid in mids:
            self.model.pop(mid, None)

    @rule(advance=st.integers(0, 300))
    def expire(self, advance: int) -> None:
        now = self.now + advance
        taken = self.state.take_expired(now)
        # What the tracker sleeps until: a deadline it reports is one take_expired() pops once it is past (else the
        # tracker wakes at once for ever: it spun at 100% of a core once every Start by reference had ended).
        due = self.state.next_deadline_ms()
        assert due is None or due >= now, f"next deadline {due} left behind at {now}"
        expected = {m for m, (_, deadline, t) in self.model.items() if not t and int(deadline) < now}
        assert sorted(i.message_id for i in taken) == sorted(expected)
        assert [i.deadline_ms for i in taken] == sorted(i.deadline_ms for i in taken)
        assert all(i.deadline_ms == self.model[i.message_id][1] for i in taken)
        for mid in expected:
            self.model[mid][2] = True

    @invariant()
    def in_flight_set_matches(self) -> None:
        assert self.state.message_ids() == set(self.model)
        assert self.state.message_ids(waiting=True) == {m for m, v in self.model.items() if not v[2]}
        assert len(self.state) == len(self.model)

    @invariant()
    def committed_offset_is_the_oldest_in_flight_start(self) -> None:
        expected = min((int(v[0]) for v in self.model.values()), default=self.offset + 1)
        assert self.state.commit_offset() == expected

    @invariant()
    def the_next_deadline_is_never_after_a_waiting_one(self) -> None:
        waiting = [int(v[1]) for v in self.model.values() if not v[2]]
        if waiting:
            due = self.state.next_deadline_ms()
            assert due is not None and due <= min(waiting)


TestMixedStateMachine = MixedStateMachine.TestCase
