"""Starts by reference on a real broker: a crashed worker's messages come back with payload and headers read back
from the messages topic; a record gone to retention is dead-lettered with its reason and counted; a deployment
switched from copies to references mid-flight loses nothing; retention that could drop a referenced record is
caught by `kmq topics check` and makes consumers copy."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from kmq import Config, Service
from kmq.wire import UNREADABLE_REASON, DeadLetterHeaders
from kmq.wire.markers import MarkerType
from tests.helpers import FAST_GROUP, ConfigFactory, WorkerProcess, receive_n, run_kmq, tracker_thread
from tests.markers_io import read_markers, read_topic, wait_for

pytestmark = pytest.mark.timeout(180)


def _starts(config: Config) -> list[tuple[bool, str]]:
    """(by reference, message id) of every Start on the markers topic."""
    return [(m.reference, str(m.message_id)) for m in read_markers(config.bootstrap_servers, config.marker_topic)
            if m.type is MarkerType.START]


def test_a_crashed_workers_messages_come_back_with_their_payload_and_headers_read_back(
    kmq_config: ConfigFactory,
) -> None:
    config = kmq_config(redelivery_timeout_ms=3000, consumer_kafka=FAST_GROUP)
    queue = Service(config).queue("jobs")
    with queue.producer() as producer:
        sent = {producer.send(b"job-%d" % i, headers={"trace": f"t{i}"}, time_limit=30): i for i in range(20)}
    with tracker_thread(config) as tracker:
        worker = WorkerProcess(config, "jobs", hold=20, ack=5)
        seen = worker.wait_holding()
        worker.kill()
        with queue.consumer() as survivor:
            again = receive_n(survivor, 15, timeout_s=60)
            for msg in again:
                msg.ack()
            assert survivor.receive(3.0) is None, "something was delivered a third time"
    acked = {s["payload"] for s in seen if s["acked"]}
    assert len(again) == 15 and {m.payload.decode() for m in again} == {f"job-{i}" for i in range(20)} - acked
    for msg in again:
        i = sent[msg.first_message_id]
        assert msg.payload == b"job-%d" % i and msg.delivery_count == 2
        assert (msg.headers, msg.time_limit) == ({"trace": f"t{i}".encode()}, 30.0)
    first_starts = [ref for ref, mid in _starts(config) if mid in {str(m) for m in sent}]
    assert first_starts and all(first_starts), "the first deliveries' Starts should name their records"
    assert tracker.metrics.unreadable.labels("jobs")._value.get() == 0


def test_a_record_deleted_before_its_redelivery_is_dead_lettered_with_its_reason_and_counted(
    kmq_config: ConfigFactory, admin: AdminClient,
) -> None:
    config = kmq_config(partitions=2, redelivery_timeout_ms=3000, consumer_kafka=FAST_GROUP)
    queue = Service(config).queue("jobs")
    with queue.producer() as producer:
        ids = {producer.send(b"job-%d" % i) for i in range(6)}
    worker = WorkerProcess(config, "jobs", hold=6)
    worker.wait_holding()
    worker.kill()
    # What retention would do to these records (while their Starts still name them).
    gone = admin.delete_records([TopicPartition(config.message_topic, p, -1) for p in range(2)])
    for future in gone.values():
        future.result(30)
    with tracker_thread(config) as tracker:
        assert wait_for(lambda: tracker.metrics.unreadable.labels("jobs")._value.get() >= 6, timeout_s=60)
        letters = read_topic(config.bootstrap_servers, config.dlq_topic, until=lambda rs: len(rs) >= 6)
        with queue.consumer() as survivor:
            assert survivor.receive(4.0) is None, "an unreadable message must not be redelivered"
    said = [DeadLetterHeaders.parse(dict(r.headers() or [])) for r in letters]
    assert {s.reason for s in said} == {UNREADABLE_REASON} and all(r.value() in (b"", None) for r in letters)
    assert {s.delivery.first_message_id for s in said} == ids and {s.queue_key for s in said} == {b"jobs"}
    ends = [m for m in read_markers(config.bootstrap_servers, config.marker_topic) if m.type is MarkerType.END]
    assert sum(m.reason == UNREADABLE_REASON for m in ends) == 6


def test_switching_from_copies_to_references_mid_flight_loses_nothing(kmq_config: ConfigFactory) -> None:
    """An old worker (Starts with copies) and a new one (Starts by reference) both crash holding messages; one
    tracker, restarted between them, rebuilds the mixed partitions and redelivers both kinds. (A message Started
    by a crashed worker whose commit was not yet written may come twice: at least once, never lost.)"""
    config = kmq_config(redelivery_timeout_ms=3000, consumer_kafka=FAST_GROUP, receive_buffer_capacity=10,
                        max_in_flight=10)
    queue = Service(config).queue("jobs")
    everything = {b"job-%d" % i for i in range(40)}
    with queue.producer() as producer:
        for payload in everything:
            producer.send_async(payload)
    acked: set[bytes] = set()
    with tracker_thread(config):
        old = WorkerProcess(config.replace(start_markers="copy"), "jobs", hold=8, ack=2)
        acked |= {str(s["payload"]).encode() for s in old.wait_holding() if s["acked"]}
        old.kill()
    with tracker_thread(config):
        new = WorkerProcess(config, "jobs", hold=8, ack=2)
        acked |= {str(s["payload"]).encode() for s in new.wait_holding() if s["acked"]}
        new.kill()
        deadline = time.monotonic() + 90
        with queue.consumer() as survivor:
            while acked != everything and time.monotonic() < deadline:
                for msg in survivor.receive_many(50, 0.5):
                    acked.add(msg.payload)
                    msg.ack()
    assert acked == everything, f"lost: {sorted(everything - acked)}"
    kinds = {ref for ref, _ in _starts(config)}
    assert kinds == {True, False}, "both kinds of Start should be on the markers topic"


def test_topics_check_fails_on_a_retention_that_could_drop_a_referenced_record_and_consumers_then_copy(
    kmq_config: ConfigFactory, admin: AdminClient,
) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    config = kmq_config()
    assert run_kmq(config, "topics", "check").returncode == 0
    resource = ConfigResource(ConfigResource.Type.TOPIC, config.message_topic, incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    check = run_kmq(config, "topics", "check")
    assert check.returncode == 1 and "less than the markers topic" in check.stderr
    assert len(check.stderr.strip().splitlines()) == 1
    assert run_kmq(config.replace(start_markers="copy"), "topics", "check").returncode == 0
    with Service(config).queue("q").producer() as producer:
        producer.send(b"x")
    with Service(config).queue("q").consumer() as consumer:
        [msg] = receive_n(consumer, 1)
        msg.ack()
    assert _starts(config) == [(False, str(msg.message_id))]
