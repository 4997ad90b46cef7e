"""Consumer behaviour on a real broker: group split, keep-alives, settle markers, back-pressure, close, bad input."""

from __future__ import annotations

import threading
import time

import pytest
from google.protobuf.message import DecodeError

from kmq import (
    Config,
    Consumer,
    ConsumerClosedError,
    InvalidQueueNameError,
    KafkaClientError,
    MessageSettledError,
    PayloadError,
    PayloadTooLargeError,
    Service,
    TopicError,
)
from kmq.wire.marker_batch import BATCH_PREFIX, decode_record
from kmq.wire.markers import EndReason, MarkerType
from tests.conftest import ConfigFactory
from tests.helpers import receive_n
from tests.interop._proto import kafka_mq_v1_pb2 as upstream
from tests.markers_io import read_markers, read_topic, wait_for

pytestmark = pytest.mark.timeout(120)


def test_two_consumers_of_one_queue_split_the_partitions_and_each_message_comes_once(
    kmq_config: ConfigFactory,
) -> None:
    config = kmq_config(partitions=4)
    queue = Service(config).queue("split")
    with queue.consumer() as one, queue.consumer() as two:
        assert wait_for(lambda: len(one.assignment) + len(two.assignment) == 4
                        and bool(one.assignment) and bool(two.assignment), timeout_s=30)
        with queue.producer() as producer:
            for i in range(200):
                producer.send_async(b"%d" % i)
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 200 and time.monotonic() < deadline:
            for consumer in (one, two):
                msg = consumer.receive(0.05)
                if msg is not None:
                    got.append(msg.payload)
                    msg.ack()
        extra = [c.receive(1.0) for c in (one, two)]
    assert sorted(got) == sorted(b"%d" % i for i in range(200))
    assert extra == [None, None]


def test_a_consumer_joining_during_a_backlog_loses_and_stalls_nothing_without_a_tracker(
    kmq_config: ConfigFactory,
) -> None:
    # No tracker: every message must come through the consumer group alone, across the rebalance.
    config = kmq_config(partitions=6)
    queue = Service(config).queue("join")
    with queue.producer() as producer:
        for i in range(6000):
            producer.send_async(b"%d" % i)
    got: list[bytes] = []
    lock = threading.Lock()

    def drain(consumer: Consumer) -> None:
        deadline = time.monotonic() + 40
        while len(got) < 6000 and time.monotonic() < deadline:
            msg = consumer.receive(0.2)
            if msg is not None:
                with lock:
                    got.append(msg.payload)
                msg.ack()

    with queue.consumer() as one:
        first = threading.Thread(target=drain, args=(one,))
        first.start()
        time.sleep(0.3)
        with queue.consumer() as two:
            drain(two)
            first.join()
    assert sorted(got) == sorted(b"%d" % i for i in range(6000))


def test_keep_alives_flow_while_a_slow_handler_holds_a_message(kmq_config: ConfigFactory, marker_format: str) -> None:
    config = kmq_config(redelivery_timeout_ms=1000, marker_format=marker_format)
    queue = Service(config).queue("slow")
    with queue.consumer() as consumer, queue.producer() as producer:
        producer.send(b"slow")
        msg = receive_n(consumer, 1)[0]
        time.sleep(2.2)  # the "work": longer than the redelivery timeout
        msg.ack()
    markers = read_markers(config.bootstrap_servers, config.marker_topic,
                           until=lambda ms: any(m.type is MarkerType.END for m in ms))
    keep_alives = [m for m in markers if m.type is MarkerType.KEEPALIVE]
    assert len(keep_alives) >= 3 and all(m.redeliver_after_ms == 1000 for m in keep_alives)
    assert next(m.type for m in markers) is MarkerType.START and markers[-1].type is MarkerType.END


def test_release_reject_and_double_ack_write_the_right_markers(kmq_config: ConfigFactory, marker_format: str) -> None:
    config = kmq_config(redelivery_timeout_ms=60_000, marker_format=marker_format)
    queue = Service(config).queue("settle")
    with queue.consumer() as consumer, queue.producer() as producer:
        for payload in (b"ack", b"release", b"reject"):
            producer.send(payload)
        by_payload = {m.payload: m for m in receive_n(consumer, 3)}
        by_payload[b"ack"].ack()
        with pytest.raises(MessageSettledError, match="already settled"):
            by_payload[b"ack"].ack()
        by_payload[b"release"].release(delay=2.5)
        with pytest.raises(MessageSettledError):
            by_payload[b"release"].ack()
        by_payload[b"reject"].reject("bad payload")
    ids = {p: m.message_id for p, m in by_payload.items()}
    markers = read_markers(config.bootstrap_servers, config.marker_topic,
                           until=lambda ms: sum(m.type is MarkerType.END for m in ms) >= 2)
    about = {p: [m for m in markers if m.message_id == mid] for p, mid in ids.items()}
    assert [m.type for m in about[b"ack"]] == [MarkerType.START, MarkerType.END]
    release = about[b"release"]
    assert [m.type for m in release] == [MarkerType.START, MarkerType.KEEPALIVE]
    assert release[1].redeliver_after_ms == 2500
    reject = about[b"reject"]
    assert [(m.type, m.end_reason, m.reason) for m in reject[1:]] == [
        (MarkerType.END, EndReason.REJECTED, "bad payload")]
    dlq = read_topic(config.bootstrap_servers, config.dlq_topic, until=lambda r: len(r) >= 1)
    assert [d.value() for d in dlq] == [b"reject"]


def test_in_kafka_mq_go_format_markers_decode_with_the_upstream_schema(kmq_config: ConfigFactory) -> None:
    config = kmq_config(redelivery_timeout_ms=4000, marker_format="kafka-mq-go")
    queue = Service(config).queue("wire")
    with queue.consumer() as consumer, queue.producer() as producer:
        producer.send(b"payload")
        msg = receive_n(consumer, 1)[0]
        msg.ack()
    records = read_topic(config.bootstrap_servers, config.marker_topic, until=lambda r: len(r) >= 2)
    theirs = []
    for record in records:
        marker = upstream.Marker()
        marker.ParseFromString(record.value())
        theirs.append(marker)
        assert record.key() == b"wire"
    start, end = theirs
    assert (start.version, start.type, start.redeliver_after_ms, start.key, start.value) == (
        upstream.Marker.V1, upstream.Marker.START, 4000, b"wire", b"payload")
    assert (start.message_id.partition, start.message_id.offset) == (
        msg.message_id.partition, msg.message_id.offset)
    assert (end.type, end.message_id, end.redeliver_after_ms, end.key, end.value) == (
        upstream.Marker.END, start.message_id, 0, b"", b"")


def test_in_kmq_format_a_batch_takes_one_start_record_and_one_settle_record_that_go_decoders_refuse(
    kmq_config: ConfigFactory,
) -> None:
    config = kmq_config(redelivery_timeout_ms=4000, partitions=1, settle_linger_ms=50)
    queue = Service(config).queue("batched")
    with queue.producer() as producer:
        for i in range(10):
            producer.send_async(b"%d" % i)
    with queue.consumer() as consumer:
        got = receive_n(consumer, 10)
        for msg in got:
            msg.ack()
        assert consumer.flush(10) == 0
        records = read_topic(config.bootstrap_servers, config.marker_topic, until=lambda r: len(r) >= 2)
    assert len(records) == 2 and all(r.key() == b"batched" for r in records)
    assert all(r.value().startswith(BATCH_PREFIX) for r in records)
    for record in records:
        with pytest.raises(DecodeError):  # what a kafka-mq-go tracker does: log "malformed" and skip
            upstream.Marker().ParseFromString(record.value())
    starts, settles = (decode_record(r.value()) for r in records)
    assert [m.type for m in starts] == [MarkerType.START] * 10
    assert [(m.type, m.message_id) for m in settles] == [(MarkerType.END, msg.message_id) for msg in got]


def test_back_pressure_hands_out_at_most_max_in_flight_and_stays_in_the_group(kmq_config: ConfigFactory) -> None:
    config = kmq_config(partitions=2, max_in_flight=5, receive_buffer_capacity=100,
                        consumer_kafka={"session.timeout.ms": "6000", "max.poll.interval.ms": "7000"})
    queue = Service(config).queue("bp")
    with queue.producer() as producer:
        for i in range(30):
            producer.send_async(b"%d" % i)
    with queue.consumer() as consumer:
        held = receive_n(consumer, 5)
        assert consumer.receive(1.0) is None
        rebalances = consumer.rebalances
        time.sleep(9)  # past max.poll.interval.ms with nothing acked
        assert consumer.receive(0.5) is None and consumer.in_flight == 5
        assert consumer.rebalances == rebalances, "the consumer left or was evicted from its group"
        for msg in held:
            msg.ack()
        rest = []
        deadline = time.monotonic() + 30
        while len(rest) < 25 and time.monotonic() < deadline:
            msg = consumer.receive(0.2)
            if msg is not None:
                assert consumer.in_flight <= 5
                rest.append(msg.payload)
                msg.ack()
    assert sorted(rest + [m.payload for m in held]) == sorted(b"%d" % i for i in range(30))


def test_close_releases_unsettled_messages_and_then_settling_raises(
    kmq_config: ConfigFactory, marker_format: str,
) -> None:
    config = kmq_config(redelivery_timeout_ms=60_000, marker_format=marker_format)
    queue = Service(config).queue("closing")
    with queue.producer() as producer:
        for i in range(4):
            producer.send(b"%d" % i)
    consumer = queue.consumer()
    held = receive_n(consumer, 4)
    held[0].ack()
    consumer.close()
    with pytest.raises(ConsumerClosedError, match="closed"):
        held[1].ack()
    with pytest.raises(ConsumerClosedError):
        consumer.receive(0.1)
    markers = read_markers(config.bootstrap_servers, config.marker_topic,
                           until=lambda ms: sum(m.type is MarkerType.KEEPALIVE for m in ms) >= 3)
    released = {m.message_id for m in markers if m.type is MarkerType.KEEPALIVE and m.redeliver_after_ms == 0}
    assert released == {m.message_id for m in held[1:]}


def test_a_second_consumer_with_the_same_client_id_fences_the_first_with_a_clear_error(
    kmq_config: ConfigFactory,
) -> None:
    config = kmq_config(client_id="worker-7")
    queue = Service(config).queue("static")
    first = queue.consumer()
    try:
        assert wait_for(lambda: bool(first.assignment), timeout_s=30)
        with queue.consumer():
            def fenced() -> bool:
                try:
                    first.receive(0.2)
                except KafkaClientError as err:
                    assert "worker-7" in str(err)
                    return True
                return False

            assert wait_for(fenced, timeout_s=40)
    finally:
        first.close()


@pytest.mark.parametrize(("payload", "error", "match"), [
    ("text", PayloadError, "bytes-like, got str"),
    ({"a": 1}, PayloadError, "got dict"),
    (b"x" * 2001, PayloadTooLargeError, "2001 bytes exceeds max_payload_bytes=2000"),
])
def test_bad_payloads_are_refused_before_sending(kmq_config: ConfigFactory, payload: object,
                                                 error: type[Exception], match: str) -> None:
    config = kmq_config(max_payload_bytes=2000)
    with Service(config).queue("q").producer() as producer, pytest.raises(error, match=match):
        producer.send(payload)  # type: ignore[arg-type]


def test_reserved_headers_are_refused(kmq_config: ConfigFactory) -> None:
    with Service(kmq_config()).queue("q").producer() as producer, pytest.raises(PayloadError, match="reserved"):
        producer.send(b"x", headers={"kmq-delivery-count": "9"})


@pytest.mark.parametrize(("name", "match"), [("", "empty"), ("x" * 201, "limit is 200"),
                                             ("tab\there", "printable"), (" padded", "printable")])
def test_bad_queue_names_are_refused(name: str, match: str) -> None:
    with pytest.raises(InvalidQueueNameError, match=match):
        Service(Config(bootstrap_servers="127.0.0.1:1")).queue(name)


def test_an_unreachable_broker_fails_within_the_connect_timeout() -> None:
    config = Config(bootstrap_servers="127.0.0.1:1", connect_timeout_ms=1500)
    started = time.monotonic()
    with pytest.raises(KafkaClientError, match=r"cannot reach Kafka at 127\.0\.0\.1:1"):
        Service(config).queue("q").consumer()
    producer = Service(config).queue("q").producer()
    with pytest.raises(KafkaClientError, match="reachable"):
        producer.send(b"x", timeout=1.5)
    producer.close(timeout=0.5)
    assert time.monotonic() - started < 15


def test_a_missing_message_topic_is_named(kafka_bootstrap: str) -> None:
    config = Config(bootstrap_servers=kafka_bootstrap, message_topic="no-such-topic-here")
    with pytest.raises(TopicError, match="'no-such-topic-here' does not exist"):
        Service(config).queue("q").consumer()
