"""MarkerWriter: settles are appended, then written as few records (kmq) or one per marker (kafka-mq-go)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from kmq import Config
from kmq.client.consumer.marker_writer import MarkerWriter
from kmq.client.consumer.settle_sink import SettleSink
from kmq.wire import RELEASE_REASON, MessageId
from kmq.wire.marker_batch import decode_record, is_batch
from kmq.wire.markers import EndReason, Marker, MarkerType, decode
from tests.markers_io import wait_for
from tests.unit.fakes import FakeProducer, FakeStart


def _writer(fmt: str, **fields: object) -> tuple[MarkerWriter, FakeProducer]:
    producer = FakeProducer()
    config = Config(bootstrap_servers="x:1", redelivery_timeout_ms=8000, marker_format=fmt,
                    settle_linger_ms=60_000, **fields)  # type: ignore[arg-type]
    return MarkerWriter(config, config.marker_topic, b"q", producer, instance_id="host:1"), producer


@pytest.fixture
def kmq_writer() -> Iterator[tuple[MarkerWriter, FakeProducer]]:
    writer, producer = _writer("kmq")
    yield writer, producer
    writer.close(0)


def test_many_settles_become_one_record_applied_keep_alives_first_and_acks_last(
    kmq_writer: tuple[MarkerWriter, FakeProducer],
) -> None:
    writer, producer = kmq_writer
    writer.ack(MessageId(0, 1))
    writer.keep_alive(MessageId(0, 1))
    writer.release(MessageId(0, 2), 1500)
    writer.end(MessageId(0, 3), EndReason.REJECTED, "bad")
    writer.ack(MessageId(1, 4))
    assert writer.flush(1) == 0
    assert len(producer.records) == 1 and producer.records[0].key == b"q"
    markers = decode_record(producer.records[0].value)
    assert [(m.type, m.message_id, m.redeliver_after_ms, m.end_reason, m.reason) for m in markers] == [
        (MarkerType.KEEPALIVE, MessageId(0, 1), 8000, EndReason.ACKED, ""),
        (MarkerType.KEEPALIVE, MessageId(0, 2), 1500, EndReason.ACKED, RELEASE_REASON),
        (MarkerType.END, MessageId(0, 3), 0, EndReason.REJECTED, "bad"),
        (MarkerType.END, MessageId(0, 1), 0, EndReason.ACKED, ""),
        (MarkerType.END, MessageId(1, 4), 0, EndReason.ACKED, ""),
    ]
    assert {m.instance_id for m in markers} == {"host:1"}


def test_a_full_settle_batch_is_written_without_waiting_for_the_linger() -> None:
    writer, producer = _writer("kmq", settle_batch_size=3)
    try:
        for offset in range(3):
            writer.ack(MessageId(0, offset))
        assert wait_for(lambda: len(producer.records) == 1, timeout_s=2), "the third ack should wake the writer"
    finally:
        writer.close(0)


class _CountedWake(threading.Event):
    def __init__(self) -> None:
        super().__init__()
        self.sets = 0

    def set(self) -> None:
        self.sets += 1
        super().set()


def test_a_full_settle_batch_wakes_the_writer_once_until_it_is_taken() -> None:
    wake = _CountedWake()
    sink = SettleSink(3, wake)
    for offset in range(10):  # the writer is slow to take: the acks after the third need not wake it again
        sink.ack(MessageId(0, offset))
    sink.ack_many([MessageId(1, 0), MessageId(1, 1)])
    assert wake.sets == 1
    assert len(sink.take()[2]) == 12
    sink.ack_many([MessageId(0, offset) for offset in range(20, 23)])  # taken: a full batch wakes it again
    sink.ack(MessageId(0, 23))
    assert wake.sets == 2


def test_start_batches_split_below_the_record_limit() -> None:
    writer, producer = _writer("kmq", max_payload_bytes=1000)
    try:
        deliveries = writer.start([FakeStart(MessageId(0, i), b"x" * 400) for i in range(5)])
        assert len(deliveries) == len(producer.records) == 3
        sizes = [len(decode_record(r.value)) for r in producer.records]
        assert sizes == [2, 2, 1]
    finally:
        writer.close(0)


def test_the_kafka_mq_go_format_writes_one_plain_marker_per_start_and_settle() -> None:
    writer, producer = _writer("kafka-mq-go")
    try:
        [delivery] = writer.start([FakeStart(MessageId(0, 5), b"p")])
        assert not delivery.done()
        producer.records[0].on_done(None, None)  # type: ignore[misc]
        assert delivery.done() and delivery.exception(0) is None
        writer.ack(MessageId(0, 5))
        writer.release(MessageId(0, 6), 300)
        writer.flush(1)
        assert not any(is_batch(r.value) for r in producer.records)
        decoded = [decode(r.value) for r in producer.records]
        assert [(m.type, m.message_id) for m in decoded] == [
            (MarkerType.START, MessageId(0, 5)), (MarkerType.KEEPALIVE, MessageId(0, 6)),
            (MarkerType.END, MessageId(0, 5))]
        # An ack says who wrote it: that tells it from a kafka-mq-go End (kmq.ops.lifecycle); keep-alives do not.
        assert decoded[0].instance_id == decoded[2].instance_id == "host:1" and decoded[1].instance_id == ""
        assert decoded[1] == Marker(MarkerType.KEEPALIVE, MessageId(0, 6), 300, reason=RELEASE_REASON)
    finally:
        writer.close(0)


def test_a_failed_settle_record_counts_every_marker_in_it(kmq_writer: tuple[MarkerWriter, FakeProducer]) -> None:
    writer, producer = kmq_writer
    writer.ack(MessageId(0, 1))
    writer.ack(MessageId(0, 2))
    writer.flush(1)

    class Failure:
        def str(self) -> str:
            return "broker down"

    assert producer.records[0].on_done is not None
    producer.records[0].on_done(Failure(), None)
    assert writer.undelivered == 2

