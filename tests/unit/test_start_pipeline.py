"""The Start pipeline, the offset book and the commit policy, behind fakes: nothing is handed out before its
Starts are durable and its offsets committed, and a failure rewinds without committing past the failed batch."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from kmq import Config
from kmq._kafka.commit_policy import CommitPolicy
from kmq._kafka.offsets import CommitOutcome
from kmq.client.consumer.committer import QueueCommitter
from kmq.client.consumer.intake import Intake
from kmq.client.consumer.marker_writer import MarkerWriter
from kmq.client.consumer.offset_book import OffsetBook, TopicPartitionKey
from kmq.client.consumer.start_pipeline import StartPipeline
from kmq.client.message import Message
from kmq.wire import MessageId
from kmq.wire.marker_batch import decode_record
from kmq.wire.markers import MarkerType
from tests.unit.fake_clients import FakeGroupClient
from tests.unit.fakes import FakeFetchClient, FakeProducer, FakeRecord, Part


class Table(dict[MessageId, Message]):
    """The in-flight table's add/discard over a plain dict."""

    def add(self, message: Message) -> None:
        self[message.message_id] = message

    def add_many(self, messages: list[Message]) -> None:
        for message in messages:
            self.add(message)

    def discard(self, message_id: MessageId) -> None:
        self.pop(message_id, None)


class Rig:
    """A pipeline wired to fakes; ``commits`` records each commit and answers with ``outcome``."""

    def __init__(self, depth: int = 2) -> None:
        self.client = FakeFetchClient(assigned=[Part("m", p) for p in range(3)])
        self.intake = Intake(self.client, b"q", on_error=lambda r: None)
        self.producer = FakeProducer()
        config = Config(bootstrap_servers="x:1", redelivery_timeout_ms=1000)
        self.writer = MarkerWriter(config, config.marker_topic, b"q", self.producer)
        self.book = OffsetBook(CommitPolicy(1000, 5.0))
        self.in_flight = Table()
        self.handed: list[Message] = []
        self.commits: list[dict[TopicPartitionKey, int]] = []
        self.outcome = CommitOutcome.COMMITTED
        self.pipeline = StartPipeline(
            key=b"q", intake=self.intake, writer=self.writer, book=self.book, in_flight=self.in_flight,
            to_message=self.to_message, commit=self.commit, hand_out=self.handed.extend, start_timeout_s=0.01,
            depth=depth)

    def to_message(self, record: FakeRecord) -> Message:  # type: ignore[override]
        mid = MessageId(record.partition(), record.offset())
        return Message(record.value(), {}, "q", mid, 1, mid, 0, _settler=None)  # type: ignore[arg-type]

    def commit(self, offsets: Mapping[TopicPartitionKey, int]) -> CommitOutcome:
        self.commits.append(dict(offsets))
        if self.outcome is CommitOutcome.COMMITTED:
            self.book.committed(offsets)
        return self.outcome

    def close(self) -> None:
        self.writer.close(0)


@pytest.fixture
def rig() -> Rig:
    made = Rig()
    yield made  # type: ignore[misc]
    made.close()


def test_a_batch_is_handed_out_only_after_its_starts_are_durable_and_its_offsets_committed(rig: Rig) -> None:
    rig.pipeline.start([FakeRecord("m", 0, 0), FakeRecord("m", 0, 1, b"other"), FakeRecord("m", 1, 7)])
    assert len(rig.in_flight) == 2, "Started messages are in flight (kept alive) before the hand-out"
    rig.pipeline.advance(block=False)
    assert rig.handed == [] and rig.commits == []
    rig.producer.deliver()
    rig.pipeline.advance(block=False)
    assert [m.message_id for m in rig.handed] == [MessageId(0, 0), MessageId(1, 7)]
    assert rig.commits == [{("m", 0): 2, ("m", 1): 8}]
    starts = decode_record(rig.producer.records[0].value)
    assert [(m.type, m.message_id) for m in starts] == [(MarkerType.START, MessageId(0, 0)),
                                                       (MarkerType.START, MessageId(1, 7))]
    assert len(rig.producer.records) == 1, "one Start record for the whole batch"


def test_the_next_batch_is_started_while_the_previous_one_waits_and_only_the_previous_is_committed(
    rig: Rig,
) -> None:
    rig.pipeline.start([FakeRecord("m", 0, 0)])
    rig.producer.deliver()
    rig.pipeline.start([FakeRecord("m", 0, 1)])
    assert rig.pipeline.full()
    rig.pipeline.advance(block=True)
    assert [m.message_id.offset for m in rig.handed] == [0]
    assert rig.commits == [{("m", 0): 1}], "batch 2's Starts are not durable: its offset must not be committed"


def test_a_fenced_commit_rewinds_every_batch_not_handed_out_in_order(rig: Rig) -> None:
    records = [FakeRecord("m", 0, 0), FakeRecord("m", 0, 1)]
    rig.pipeline.start(records[:1])
    rig.pipeline.start(records[1:])
    rig.producer.deliver()
    rig.outcome = CommitOutcome.FENCED
    rig.pipeline.advance(block=True)
    assert rig.handed == [] and rig.in_flight == {} and len(rig.pipeline) == 0
    assert rig.intake.take(10) == records
    assert rig.book.pending() == {("m", 0): 0}, "never commit past a rewound record"


def test_a_failed_start_rewinds_without_committing(rig: Rig) -> None:
    rig.pipeline.start([FakeRecord("m", 2, 5)])
    rig.producer.deliver(RuntimeError("broker down"))
    rig.pipeline.advance(block=True)
    assert rig.handed == [] and rig.commits == [] and rig.in_flight == {}
    assert [r.offset() for r in rig.intake.take(10)] == [5]


def test_a_start_that_never_completes_is_a_failure_after_the_timeout(rig: Rig) -> None:
    rig.pipeline.start([FakeRecord("m", 2, 5)])
    rig.pipeline.advance(block=True)
    assert rig.handed == [] and [r.offset() for r in rig.intake.take(10)] == [5]


def test_other_queues_records_with_nothing_before_them_go_straight_to_the_book(rig: Rig) -> None:
    rig.pipeline.start([FakeRecord("m", 0, 3, b"other")])
    assert len(rig.pipeline) == 0 and rig.book.pending() == {("m", 0): 4} and rig.commits == []


def test_the_commit_policy_is_due_after_n_records_or_t_seconds() -> None:
    now = [0.0]
    policy = CommitPolicy(3, 5.0, clock=lambda: now[0])
    policy.note(2)
    assert not policy.due()
    policy.note(1)
    assert policy.due()
    policy.committed()
    assert not policy.due()
    now[0] = 5.0
    assert policy.due()
    with pytest.raises(ValueError, match="positive"):
        CommitPolicy(0, 1.0)


def test_the_offset_book_keeps_an_offset_advanced_during_a_commit() -> None:
    book = OffsetBook(CommitPolicy(10, 1.0))
    book.advance({("m", 0): 5, ("m", 1): 2}, 7)
    sent = book.pending()
    book.advance({("m", 0): 9}, 4)
    book.committed(sent)
    assert book.pending() == {("m", 0): 9}
    book.forget([("m", 0)])
    assert not book


def test_a_minimum_interval_holds_a_count_triggered_commit_but_never_the_time_triggered_one() -> None:
    now = [0.0]
    policy = CommitPolicy(3, 5.0, clock=lambda: now[0], min_interval_s=0.1)
    policy.note(10)
    assert not policy.due()
    now[0] = 0.1
    assert policy.due()
    policy.committed()
    now[0] = 5.1
    assert policy.due()


def test_a_rewind_never_brings_back_a_partition_the_book_forgot() -> None:
    book = OffsetBook(CommitPolicy(1000, 5.0))
    book.advance({("m", 0): 40, ("m", 1): 7}, 2)
    book.forget([("m", 0)])
    book.rewind({("m", 0): 39, ("m", 1): 5})
    assert book.pending() == {("m", 1): 5}


def test_a_partition_given_up_is_never_committed_and_alone_it_is_fenced() -> None:
    client = FakeGroupClient("m", partitions=2)
    book = OffsetBook(CommitPolicy(1000, 5.0))
    left: set[int] = {0}
    committer = QueueCommitter(client, book, "q", left=left)  # type: ignore[arg-type]
    book.advance({("m", 0): 40, ("m", 1): 7}, 2)
    assert committer.commit(book.pending()) is CommitOutcome.COMMITTED
    assert client.commits == [{1: 7}] and not book
    assert committer.commit({("m", 0): 41}) is CommitOutcome.FENCED and client.commits == [{1: 7}]

