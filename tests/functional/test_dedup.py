"""Deduplicated sends on a real broker (docs/concepts/dedup.md): a repeat within the window is accepted and never
handed out, in both marker formats and across consumers; after the window it runs again; stats, the audit's fold
and inspect call it ``deduplicated``."""

from __future__ import annotations

import time

import pytest

from kmq import Service
from kmq.errors import PayloadError
from kmq.ops.inspect import inspect_message
from kmq.ops.stats import collect
from kmq.wire import HEADER_DEDUP_ID, partitioning
from tests.helpers import ConfigFactory, receive_expecting, receive_n

pytestmark = pytest.mark.timeout(120)


def test_a_repeated_dedup_id_is_handled_once_and_named_a_duplicate_everywhere(
    kmq_config: ConfigFactory, marker_format: str,
) -> None:
    config = kmq_config(partitions=3, marker_format=marker_format)
    queue = Service(config).queue("orders")
    with queue.producer() as producer:
        first = producer.send(b"charge 991", dedup_id="order-991")
        again = producer.send(b"charge 991 (retried)", dedup_id="order-991")
        plain = producer.send(b"no id")
        other = producer.send(b"charge 992", dedup_id="order-992")
    # Every send of an id goes to the partition of its id: one consumer sees them all
    assert first.partition == again.partition == partitioning.partition_for("orders", "order-991", 3)
    with queue.consumer() as consumer:
        got = receive_expecting(consumer, 3)
        for message in got:
            message.ack()
        assert consumer.deduplicated == 1
        assert consumer.flush(10) == 0
    assert sorted(m.message_id for m in got) == sorted([first, plain, other])
    assert {m.message_id: m.headers.get(HEADER_DEDUP_ID) for m in got}[first] == b"order-991"
    [row] = collect(config, ["orders"])
    assert (row.deduplicated, row.acked, row.delivered, row.produced) == (1, 3, 3, 4)
    life = inspect_message(config, "orders", again)
    assert (life.state, life.summary) == ("deduplicated", f"duplicate of {first}")


def test_a_new_consumer_rebuilds_the_window_from_the_log(kmq_config: ConfigFactory) -> None:
    config = kmq_config(partitions=2)
    queue = Service(config).queue("jobs")
    with queue.producer() as producer:
        first = producer.send(b"1", dedup_id="job-1")
    with queue.consumer() as consumer:
        [message] = receive_n(consumer, 1)
        message.ack()
    # A consumer that never saw job-1 (a restart, a rebalance) reads the partition back before deciding
    with queue.producer() as producer:
        repeat = producer.send(b"1 again", dedup_id="job-1")
        fresh = producer.send(b"2", dedup_id="job-2")
    with queue.consumer() as consumer:
        got = receive_expecting(consumer, 1)
        assert [m.message_id for m in got] == [fresh]
        got[0].ack()
        assert consumer.deduplicated == 1
    assert inspect_message(config, "jobs", repeat).summary == f"duplicate of {first}"


def test_the_same_id_after_the_window_runs_again(kmq_config: ConfigFactory) -> None:
    config = kmq_config(partitions=1, dedup_window_ms=1500, dedup_clock_skew_ms=0)
    queue = Service(config).queue("w")
    with queue.producer() as producer, queue.consumer() as consumer:
        producer.send(b"a", dedup_id="x")
        producer.send(b"b", dedup_id="x")
        time.sleep(1.6)
        producer.send(b"c", dedup_id="x")
        got = receive_expecting(consumer, 2)
        for message in got:
            message.ack()
    assert [m.payload for m in got] == [b"a", b"c"]


def test_a_content_dedup_queue_drops_an_identical_send_and_keeps_a_different_one(kmq_config: ConfigFactory) -> None:
    config = kmq_config(partitions=3, content_dedup_queues=("hooks",))
    queue = Service(config).queue("hooks")
    with queue.producer() as producer:
        producer.send(b'{"event": 1}', {"source": "github"}, ttl=60)
        producer.send(b'{"event": 1}', {"source": "github"}, ttl=90)  # a retry: kmq's own headers differ
        producer.send(b'{"event": 1}', {"source": "gitlab"})
        producer.send(b'{"event": 1}', {"source": "github"}, dedup_id="explicit")  # its own id wins
    with queue.consumer() as consumer:
        got = receive_expecting(consumer, 3)
        for message in got:
            message.ack()
    assert sorted((m.headers["source"], m.headers[HEADER_DEDUP_ID][:7]) for m in got) == [
        (b"github", b"explici"), (b"github", b"sha256:"), (b"gitlab", b"sha256:")]


def test_a_bad_dedup_id_is_refused_with_a_clear_error(kmq_config: ConfigFactory) -> None:
    config = kmq_config(partitions=1)
    with Service(config).queue("q").producer() as producer:
        with pytest.raises(PayloadError, match="dedup_id must not be empty"):
            producer.send(b"x", dedup_id="")
        with pytest.raises(PayloadError, match="the limit is 256"):
            producer.send(b"x", dedup_id="x" * 300)


def test_a_range_is_read_back_from_a_time_up_to_an_offset_or_fails_clearly(kmq_config: ConfigFactory) -> None:
    from confluent_kafka import Consumer

    from kmq._kafka.range_reader import records_since
    from kmq._kafka.settings import reader_settings
    from kmq.errors import KafkaClientError

    config = kmq_config(partitions=1)
    with Service(config).queue("q").producer() as producer:
        ids = [producer.send(b"%d" % i) for i in range(5)]
    stamps = []
    reader = Consumer(reader_settings(config, "range-test", "t"))
    try:
        everything = list(records_since(reader, config.message_topic, 0, 0, ids[-1].offset + 1, 10))
        stamps = [r.timestamp()[1] for r in everything]
        assert [r.offset() for r in everything] == [m.offset for m in ids]  # up to the partition's end
        tail = list(records_since(reader, config.message_topic, 0, stamps[2], ids[4].offset, 10))
        assert tail[0].offset() <= ids[2].offset and tail[-1].offset() == ids[3].offset
        assert list(records_since(reader, config.message_topic, 0, stamps[-1] + 60_000, 99, 10)) == []
        with pytest.raises(KafkaClientError, match="ends at 5, before offset 9"):
            list(records_since(reader, config.message_topic, 0, 0, 9, 10))
    finally:
        reader.close()
