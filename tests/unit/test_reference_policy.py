"""Which Starts reference their record and which copy it: the consumer's ReferencePolicy, the writer's records,
and the retention problems that turn references off."""

from __future__ import annotations

import pytest

from kmq import Config
from kmq._kafka.retention import Retention
from kmq.client.consumer.marker_writer import MarkerWriter
from kmq.client.consumer.reference_policy import ReferencePolicy
from kmq.config import MAX_REDELIVERY_TIMEOUT_MS
from kmq.wire import HEADER_DELIVER_AT, MessageId
from kmq.wire.marker_batch import START_OVERHEAD_BYTES, decode_batch
from tests.unit.fakes import FakeProducer, FakeRecord, FakeStart

NOW = 1_800_000_000_000
DAY = 86_400_000


def _policy(keep_ms: int | None) -> ReferencePolicy:
    return ReferencePolicy(keep_ms=keep_ms, redelivery_timeout_ms=60_000, clock_ms=lambda: NOW)


def _offsets(starts: list[FakeStart]) -> list[int]:
    return [s.message_id.offset for s in starts]


def test_a_fresh_record_is_referenced_and_one_near_the_end_of_its_retention_copied() -> None:
    fresh = FakeStart(MessageId(0, 1), b"p", enqueued_at_ms=NOW - 1000)
    old = FakeStart(MessageId(0, 2), b"p", enqueued_at_ms=NOW - 4 * DAY)  # past half of 7 days
    copies, refs = _policy(7 * DAY).split([fresh, old])
    assert (_offsets(copies), _offsets(refs)) == ([2], [1])


def test_a_delayed_message_whose_hop_ends_past_half_the_retention_carries_its_payload() -> None:
    short = FakeStart(MessageId(0, 1), b"p", {HEADER_DELIVER_AT: str(NOW + 3_600_000).encode()}, enqueued_at_ms=NOW)
    long = FakeStart(MessageId(0, 2), b"p", {HEADER_DELIVER_AT: str(NOW + 5 * DAY).encode()}, enqueued_at_ms=NOW)
    copies, refs = _policy(DAY).split([short, long])  # hops are at most 12 h: the long one's first hop ends at 12 h
    assert (_offsets(copies), _offsets(refs)) == ([], [1, 2])
    copies, refs = _policy(20 * 3_600_000).split([short, long])  # half of 20 h is 10 h: a 12 h hop is too long
    assert (_offsets(copies), _offsets(refs)) == ([2], [1])


def test_records_kept_for_ever_are_always_referenced() -> None:
    ancient = FakeStart(MessageId(0, 1), b"p", enqueued_at_ms=0)
    assert _policy(None).split([ancient]) == ([], [ancient])


def test_the_writer_puts_references_beside_the_copies_and_splits_records_below_the_size_limit() -> None:
    producer = FakeProducer()
    config = Config(bootstrap_servers="x:1", max_payload_bytes=100 * START_OVERHEAD_BYTES)
    writer = MarkerWriter(config, config.marker_topic, b"q", producer)
    try:
        writer.references = _policy(7 * DAY)
        fresh = [FakeStart(MessageId(0, i), b"", enqueued_at_ms=NOW) for i in range(250)]
        old = [FakeStart(MessageId(1, i), b"x" * 50, enqueued_at_ms=0) for i in range(3)]
        deliveries = writer.start([*old, *fresh])
        batches = [decode_batch(r.value) for r in producer.records]
        assert len(deliveries) == len(batches) == 3
        assert [s[0].offset for b in batches for s in b.starts()] == [0, 1, 2]
        assert sorted(m.offset for b in batches for m in b.refs.message_ids()) == list(range(250))
        assert all(len(b.refs) <= 100 for b in batches)
    finally:
        writer.close(0)


def test_without_a_policy_every_start_copies() -> None:
    producer = FakeProducer()
    writer = MarkerWriter(Config(bootstrap_servers="x:1"), "kmq.markers", b"q", producer)
    try:
        writer.start([FakeStart(MessageId(0, 1), b"p", enqueued_at_ms=NOW)])
        [batch] = [decode_batch(r.value) for r in producer.records]
        assert len(list(batch.starts())) == 1 and not batch.refs
    finally:
        writer.close(0)


@pytest.mark.parametrize(("retention", "problem"), [
    (Retention(7 * DAY, 7 * DAY, messages_cleanup="compact"), "compaction"),
    (Retention(7 * DAY, 7 * DAY, messages_cleanup="delete,compact"), "compaction"),
    (Retention(7 * DAY, 7 * DAY, messages_bytes=10**9), "retention.bytes"),
    (Retention(DAY, 7 * DAY), "less than the markers topic"),
    (Retention(DAY, None), "less than the markers topic"),
    (Retention(MAX_REDELIVERY_TIMEOUT_MS - 1, MAX_REDELIVERY_TIMEOUT_MS - 1), "longest redelivery timeout"),
])
def test_a_retention_that_could_drop_a_record_while_a_start_names_it_is_a_problem(
    retention: Retention, problem: str,
) -> None:
    assert any(problem in p for p in retention.problems())


@pytest.mark.parametrize("retention", [Retention(7 * DAY, 7 * DAY), Retention(None, 7 * DAY), Retention(None, None),
                                       Retention(8 * DAY, 7 * DAY)])
def test_a_retention_that_keeps_records_as_long_as_their_starts_is_fine(retention: Retention) -> None:
    assert retention.problems() == []


def test_every_start_of_a_record_learns_its_deadline_once_durable_by_copy_or_by_reference() -> None:
    producer = FakeProducer()
    writer = MarkerWriter(Config(bootstrap_servers="x:1"), "kmq.markers", b"q", producer)
    durable: list[tuple[list[MessageId], int]] = []
    writer.on_durable = lambda ids, appended_ms: durable.append((sorted(ids), appended_ms))
    try:
        writer.references = _policy(7 * DAY)
        fresh = [FakeStart(MessageId(0, i), b"", enqueued_at_ms=NOW) for i in range(3)]
        old = FakeStart(MessageId(1, 0), b"x", enqueued_at_ms=0)  # copied: too old to reference
        writer.start([old, *fresh])
        producer.deliver(report=FakeRecord("mk", 0, 0, timestamp_ms=NOW))
        assert durable == [([MessageId(0, 0), MessageId(0, 1), MessageId(0, 2), MessageId(1, 0)], NOW)]
    finally:
        writer.close(0)
