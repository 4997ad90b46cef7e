"""The Start pipeline with several batches on their way: the durable ones after the oldest are committed with it in
one commit and handed out in order; a batch still on its way or failed is never committed with them; a failure
rewinds that batch and every later one. And the read-ahead the hand-out allows for ``depth`` batches."""

from __future__ import annotations

import pytest

from kmq import Config
from kmq._kafka.offsets import CommitOutcome
from kmq.client.consumer.hand_out import HandOut
from kmq.errors import ConfigError
from kmq.wire import MessageId
from tests.unit.fakes import FakeRecord
from tests.unit.test_hand_out import messages
from tests.unit.test_start_pipeline import Rig


@pytest.fixture
def rig() -> Rig:
    made = Rig(depth=3)
    yield made  # type: ignore[misc]
    made.close()


def deliver(rig: Rig, record: int, error: BaseException | None = None) -> None:
    """Completes the delivery of the ``record``-th Start record only."""
    delivery = rig.producer.records[record].delivery
    assert delivery is not None
    delivery._set(None if error else MessageId(0, 0), error)


def start_three(rig: Rig) -> None:
    """Three batches of one record each (partition 0 offsets 0, 1, 2), one Start record each."""
    for offset in range(3):
        rig.pipeline.start([FakeRecord("m", 0, offset)])
    assert len(rig.producer.records) == 3


def test_the_pipeline_is_full_at_its_depth(rig: Rig) -> None:
    for offset in range(2):
        rig.pipeline.start([FakeRecord("m", 0, offset)])
        assert not rig.pipeline.full()
    rig.pipeline.start([FakeRecord("m", 0, 2)])
    assert rig.pipeline.full()


def test_durable_batches_are_committed_in_one_commit_of_the_newest_and_handed_out_in_order(rig: Rig) -> None:
    start_three(rig)
    rig.producer.deliver()
    rig.pipeline.advance(block=False)
    assert [m.message_id.offset for m in rig.handed] == [0, 1, 2]
    assert rig.commits == [{("m", 0): 3}], "one commit, of the newest durable batch's offsets"
    assert len(rig.pipeline) == 0 and rig.pipeline.waiting == 0


def test_a_batch_still_on_its_way_is_not_committed_with_the_durable_ones_before_it(rig: Rig) -> None:
    start_three(rig)
    deliver(rig, 0)
    deliver(rig, 1)
    rig.pipeline.advance(block=False)
    assert [m.message_id.offset for m in rig.handed] == [0, 1]
    assert rig.commits == [{("m", 0): 2}]
    assert len(rig.pipeline) == 1 and rig.pipeline.waiting == 1


def test_a_durable_batch_after_one_still_on_its_way_waits_for_it(rig: Rig) -> None:
    start_three(rig)
    deliver(rig, 0)
    deliver(rig, 2)
    rig.pipeline.advance(block=False)
    assert [m.message_id.offset for m in rig.handed] == [0]
    assert rig.commits == [{("m", 0): 1}], "batch 3 is durable, but batch 2 before it is not"
    deliver(rig, 1)
    rig.pipeline.advance(block=False)
    assert [m.message_id.offset for m in rig.handed] == [0, 1, 2]
    assert rig.commits[-1] == {("m", 0): 3}


def test_a_failed_batch_is_not_committed_with_the_one_before_and_rewinds_with_every_later_one(rig: Rig) -> None:
    start_three(rig)
    deliver(rig, 0)
    deliver(rig, 1, RuntimeError("broker down"))
    deliver(rig, 2)
    rig.pipeline.advance(block=False)
    assert [m.message_id.offset for m in rig.handed] == [0]
    assert rig.commits == [{("m", 0): 1}], "nothing past the failed batch is committed"
    rig.pipeline.advance(block=False)
    assert [m.message_id.offset for m in rig.handed] == [0], "the failed batch and the durable one after it"
    assert len(rig.pipeline) == 0 and set(rig.in_flight) == {MessageId(0, 0)}
    assert [r.offset() for r in rig.intake.take(10)] == [1, 2]
    assert rig.book.pending() == {("m", 0): 1}, "never commit past the failed batch's first record"


def test_a_failed_commit_of_several_batches_rewinds_them_all_and_commits_nothing_past_the_first(rig: Rig) -> None:
    start_three(rig)
    rig.producer.deliver()
    rig.outcome = CommitOutcome.FAILED
    rig.pipeline.advance(block=False)
    assert rig.handed == [] and rig.in_flight == {} and len(rig.pipeline) == 0
    assert [r.offset() for r in rig.intake.take(10)] == [0, 1, 2]
    assert rig.book.pending() == {("m", 0): 0}


def test_the_read_ahead_is_depth_batches_within_the_in_flight_limit() -> None:
    out = HandOut(capacity=10, max_in_flight=100, depth=3)
    assert out.room(starting=0, in_flight=0) == 30
    out.put(messages(0, 10))
    assert out.room(starting=10, in_flight=20) == 10, "30 ahead of receive: 10 buffered, 10 Starting"
    assert out.room(starting=0, in_flight=95) == 5, "the in-flight limit"
    out.limit = 15
    assert out.room(starting=0, in_flight=0) == 5, "a lowered limit bounds the read-ahead too"


def test_the_depth_is_a_positive_integer() -> None:
    assert Config(bootstrap_servers="x:1").start_pipeline_depth == 3
    with pytest.raises(ConfigError, match="start_pipeline_depth"):
        Config(bootstrap_servers="x:1", start_pipeline_depth=0)
