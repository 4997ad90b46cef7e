"""Both marker formats on one broker: a slow commit redelivers nothing, a tracker rebuilds from a partition that
holds both formats, receive_many hands out batches."""

from __future__ import annotations

import time
from collections.abc import Mapping

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as RawProducer

from kmq import Service, _kafka
from kmq._kafka.offsets import CommitOutcome
from kmq.wire import MessageId
from kmq.wire.marker_batch import encode_settles, encode_starts
from kmq.wire.markers import EndReason, Marker, MarkerType, encode
from tests.conftest import ConfigFactory
from tests.helpers import receive_n, tracker_thread
from tests.markers_io import read_markers, read_topic, wait_for
from tests.unit.fakes import FakeStart

pytestmark = pytest.mark.timeout(120)


def test_messages_started_but_not_handed_out_during_a_slow_commit_are_kept_alive_not_redelivered(
    kmq_config: ConfigFactory, marker_format: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a tracker and a consumer whose first commit takes longer than the redelivery timeout
    config = kmq_config(redelivery_timeout_ms=1500, marker_format=marker_format)
    commit = _kafka.commit
    slow = {"left": 1}

    def slow_commit(consumer: KafkaConsumer, offsets: Mapping[tuple[str, int], int], what: str,
                    attempts: int = _kafka.COMMIT_ATTEMPTS) -> CommitOutcome:
        if slow["left"]:
            slow["left"] -= 1
            time.sleep(4)  # like a commit blocked by a rebalance under way
        return commit(consumer, offsets, what, attempts)

    monkeypatch.setattr(_kafka, "commit", slow_commit)
    queue = Service(config).queue("slow-commit")
    with queue.producer() as producer:
        for i in range(20):
            producer.send_async(b"%d" % i)
    with tracker_thread(config) as tracker, queue.consumer() as consumer:
        # When the messages come out after the slow commit and are acked
        got = receive_n(consumer, 20, timeout_s=30)
        for msg in got:
            msg.ack()
        assert consumer.flush(10) == 0
        assert wait_for(lambda: all(len(p.state) == 0 for p in tracker.partitions.values()), timeout_s=20)
    # Then each came once, the tracker redelivered nothing, and keep-alives covered the wait
    assert sorted(m.payload for m in got) == sorted(b"%d" % i for i in range(20))
    markers = read_markers(config.bootstrap_servers, config.marker_topic,
                           until=lambda ms: sum(m.type is MarkerType.END for m in ms) >= 20)
    assert not [m for m in markers if m.end_reason is EndReason.REDELIVERED]
    # The messages of the first fetch were Started before the slow commit: each was kept alive through it (how many
    # the first fetch brings varies, 2 to 20 here).
    kinds = [m.type for m in markers]
    before_slow_commit = {m.message_id for m in markers[:kinds.index(MarkerType.KEEPALIVE)]}
    assert before_slow_commit <= {m.message_id for m in markers if m.type is MarkerType.KEEPALIVE}
    assert len(read_topic(config.bootstrap_servers, config.message_topic, idle_s=1)) == 20


def test_a_tracker_rebuilds_from_a_partition_holding_both_formats_and_redelivers_only_what_was_not_ended(
    kmq_config: ConfigFactory,
) -> None:
    # Given one markers partition with kafka-mq-go Starts and Ends and kmq batches of Starts and settles
    config = kmq_config(partitions=1, marker_partitions=1, redelivery_timeout_ms=1000)
    producer = RawProducer({"bootstrap.servers": config.bootstrap_servers})
    go = [MessageId(0, i) for i in range(4)]
    ours = [MessageId(0, i) for i in range(10, 16)]
    for mid in go:
        start = Marker(MarkerType.START, mid, 500, b"mixed", b"go-%d" % mid.offset)
        producer.produce(config.marker_topic, encode(start), b"mixed")
    batch = encode_starts(b"mixed", 500, [FakeStart(m, b"kmq-%d" % m.offset) for m in ours])
    producer.produce(config.marker_topic, batch, b"mixed")
    producer.produce(config.marker_topic, encode(Marker(MarkerType.END, go[0])), b"mixed")
    producer.produce(config.marker_topic, encode_settles(b"mixed", 500, acks=[go[1], ours[0], ours[1]],
                                                         keep_alives=[ours[2]]), b"mixed")
    assert producer.flush(10) == 0
    # When a tracker starts on it
    with tracker_thread(config):
        copies = read_topic(config.bootstrap_servers, config.message_topic, until=lambda r: len(r) >= 6,
                            timeout_s=30)
    # Then exactly the messages with no End come back, once each, with delivery count 2
    assert sorted(r.value() for r in copies) == sorted([b"go-2", b"go-3", *(b"kmq-%d" % m.offset for m in ours[2:])])
    assert {dict(r.headers())["kmq-delivery-count"] for r in copies} == {b"2"}


def test_receive_many_hands_out_up_to_the_limit_and_an_empty_list_after_the_timeout(
    kmq_config: ConfigFactory, marker_format: str,
) -> None:
    config = kmq_config(marker_format=marker_format)
    queue = Service(config).queue("many")
    with queue.producer() as producer:
        for i in range(30):
            producer.send_async(b"%d" % i)
    with queue.consumer() as consumer:
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 30 and time.monotonic() < deadline:
            batch = consumer.receive_many(7, 0.5)
            assert len(batch) <= 7
            for msg in batch:
                got.append(msg.payload)
                msg.ack()
        assert consumer.receive_many(10, 0.3) == []
        with pytest.raises(ValueError, match="at least 1"):
            consumer.receive_many(0)
    assert sorted(got) == sorted(b"%d" % i for i in range(30))

