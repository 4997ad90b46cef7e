"""Redeliverer: COPY → END → DONE per attempt; failures retried with backoff; Ends batched per queue (kmq)."""

from __future__ import annotations

from kmq import Config
from kmq.redelivery.in_flight import InFlight
from kmq.redelivery.redeliverer import Attempt, Redeliverer, Step
from kmq.wire import MessageId
from kmq.wire.marker_batch import decode_record
from kmq.wire.markers import EndReason, MarkerType, decode
from tests.unit.fakes import FakeProducer


class Failure:
    def str(self) -> str:
        return "broker down"


def _item(offset: int, key: bytes = b"q", count: int = 1) -> InFlight:
    return InFlight(MessageId(0, offset), key, b"payload-%d" % offset, (("trace", b"t"),), count, None, 5,
                    offset, 0, 1000)


def _rig(fmt: str = "kmq", max_deliveries: int = 0) -> tuple[Redeliverer, FakeProducer, FakeProducer,
                                                              list[Attempt], list[float]]:
    sender, markers, copied, now = FakeProducer(), FakeProducer(), [], [0.0]
    config = Config(bootstrap_servers="x:1", marker_format=fmt, max_deliveries=max_deliveries)
    redeliverer = Redeliverer(config, config.default_topics, sender, markers, lambda: now[0], copied.append)
    return redeliverer, sender, markers, copied, now


def _complete(producer: FakeProducer, error: object = None) -> None:
    for record in producer.records:
        if record.on_done is not None:
            record.on_done(error, None)
            record.on_done = None


def test_a_copy_then_one_end_record_for_every_copy_of_a_queue() -> None:
    redeliverer, sender, markers, copied, _ = _rig()
    attempts = [Attempt(0, _item(i), dead_letter=False) for i in range(3)]
    for attempt in attempts:
        redeliverer.submit(attempt)
    assert [r.value for r in sender.records] == [b"payload-0", b"payload-1", b"payload-2"]
    _complete(sender)
    redeliverer.poll(lambda p, h: True)
    assert copied == attempts and all(a.step is Step.END for a in attempts)
    [end_record] = markers.records
    ends = decode_record(end_record.value)
    assert [(m.type, m.message_id, m.end_reason) for m in ends] == [
        (MarkerType.END, MessageId(0, i), EndReason.REDELIVERED) for i in range(3)]
    _complete(markers)
    redeliverer.poll(lambda p, h: True)
    assert all(a.step is Step.DONE for a in attempts) and redeliverer.unfinished == 0


def test_the_kafka_mq_go_format_writes_one_plain_end_per_copy() -> None:
    redeliverer, sender, markers, _, _ = _rig("kafka-mq-go")
    for i in range(2):
        redeliverer.submit(Attempt(0, _item(i), dead_letter=False))
    _complete(sender)
    redeliverer.poll(lambda p, h: True)
    assert [decode(r.value).message_id for r in markers.records] == [MessageId(0, 0), MessageId(0, 1)]


def test_a_failed_copy_is_retried_after_its_backoff_and_not_once_the_partition_is_gone() -> None:
    redeliverer, sender, _, copied, now = _rig()
    attempt = Attempt(3, _item(1), dead_letter=False)
    redeliverer.submit(attempt)
    _complete(sender, Failure())
    redeliverer.poll(lambda p, h: True)
    assert attempt.failures == 1 and len(sender.records) == 1
    now[0] = 0.6
    redeliverer.poll(lambda p, h: True)
    assert len(sender.records) == 2 and attempt.step is Step.COPY
    _complete(sender, Failure())
    now[0] = 5.0
    redeliverer.poll(lambda p, h: p != 3)
    assert len(sender.records) == 2 and copied == [] and redeliverer.unfinished == 0


def test_a_dead_letter_keeps_its_delivery_count_and_says_why() -> None:
    redeliverer, sender, markers, _, _ = _rig(max_deliveries=3)
    redeliverer.submit(Attempt(0, _item(4, count=3), dead_letter=True))
    assert sender.records == []
    [copy] = markers.records
    assert copy.value == b"payload-4" and copy.key == b"q"
    headers = dict(copy.headers)
    assert headers["kmq-delivery-count"] == b"3" and headers["trace"] == b"t"
    assert headers["kmq-dead-letter-reason"] == b"max deliveries (3) reached"


def test_a_copy_counts_one_more_delivery_unless_the_message_was_given_back_unprocessed() -> None:
    redeliverer, sender, _, _, _ = _rig()
    released, returned = _item(1, count=2), _item(2, count=2)
    returned.returned = True
    redeliverer.submit(Attempt(0, released, dead_letter=False))
    redeliverer.submit(Attempt(0, returned, dead_letter=False))
    assert [dict(r.headers)["kmq-delivery-count"] for r in sender.records] == [b"3", b"2"]


def test_a_start_of_queue_empty_from_a_go_consumer_is_redelivered_with_an_empty_key() -> None:
    redeliverer, sender, _, _, _ = _rig(fmt="kafka-mq-go")
    redeliverer.submit(Attempt(0, _item(3, key=b""), dead_letter=False))
    [copy] = sender.records
    assert (copy.key, copy.value) == (b"", b"payload-3")


def test_a_copy_made_under_a_holding_since_lost_still_gets_its_end_and_counts_as_writing_until_answered() -> None:
    """The next holder of the partition must read that End, not copy the message again."""
    redeliverer, sender, markers, _, now = _rig()
    attempt = Attempt(3, _item(1), dead_letter=False, holding=1)
    redeliverer.submit(attempt)
    assert redeliverer.writing(3) and not redeliverer.writing(0)
    _complete(sender)
    redeliverer.poll(lambda p, h: False)
    [end] = markers.records
    assert decode_record(end.value)[0].message_id == MessageId(0, 1) and redeliverer.writing(3)
    _complete(markers, Failure())
    redeliverer.poll(lambda p, h: False)
    assert redeliverer.writing(3), "a failed End is retried, whoever holds the partition"
    now[0] = 1.0
    redeliverer.poll(lambda p, h: False)
    assert len(markers.records) == 2
    _complete(markers)
    redeliverer.poll(lambda p, h: False)
    assert not redeliverer.writing(3) and attempt.step is Step.DONE and redeliverer.unfinished == 0
