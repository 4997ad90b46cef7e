"""The redelivery tracker against a real broker: crashes, release delays, dead letters, restarts, bad markers."""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest
from confluent_kafka import Consumer as RawConsumer
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka import Producer as RawProducer
from confluent_kafka.admin import AdminClient
from structlog.testing import capture_logs

from kmq import Config, Service, wire
from kmq._kafka.factory import GroupClient, KafkaClients
from kmq._kafka.topic_replay import TopicReplay
from kmq.ops.dlq import list_dead_letters, redrive
from kmq.ops.inspect import inspect_message
from kmq.ops.stats import collect
from kmq.wire import MessageId, vocabulary
from kmq.wire.markers import EndReason, Marker, MarkerType, encode
from tests.helpers import (
    FAST_GROUP,
    ConfigFactory,
    WorkerProcess,
    members_holding_partitions,
    receive_n,
    tracker_process,
    tracker_thread,
)
from tests.interop._proto import kafka_mq_v1_pb2 as upstream
from tests.markers_io import read_topic, wait_for

pytestmark = pytest.mark.timeout(150)


def test_a_killed_workers_unacked_messages_go_to_another_consumer_with_delivery_count_2(
    kmq_config: ConfigFactory, marker_format: str,
) -> None:
    config = kmq_config(redelivery_timeout_ms=3000, consumer_kafka=FAST_GROUP, marker_format=marker_format)
    queue = Service(config).queue("jobs")
    with queue.producer() as producer:
        for i in range(20):
            producer.send_async(b"job-%d" % i)
    with tracker_thread(config):
        worker = WorkerProcess(config, "jobs", hold=20, ack=5)
        seen = worker.wait_holding()
        worker.kill()
        killed_at = time.monotonic()
        acked = {s["payload"] for s in seen if s["acked"]}
        with queue.consumer() as survivor:
            again = receive_n(survivor, 15, timeout_s=40)
            waited = time.monotonic() - killed_at
            for msg in again:
                msg.ack()
            assert survivor.receive(4.0) is None, "something was delivered a third time"
    assert len(seen) == 20 and len(acked) == 5
    assert sorted(m.payload.decode() for m in again) == sorted({s["payload"] for s in seen} - acked)
    assert all(m.delivery_count == 2 and m.first_message_id != m.message_id for m in again)
    # redelivery timeout (3 s) + group session timeout (6 s) for the survivor's partitions + slack
    assert waited < 3 + 6 + 15


def test_release_with_a_delay_is_redelivered_after_about_the_delay_not_the_timeout(
    kmq_config: ConfigFactory, marker_format: str,
) -> None:
    config = kmq_config(redelivery_timeout_ms=60_000, marker_format=marker_format)
    queue = Service(config).queue("later")
    with tracker_thread(config), queue.consumer() as consumer, queue.producer() as producer:
        producer.send(b"retry-me")
        first = receive_n(consumer, 1)[0]
        released_at = time.monotonic()
        first.release(delay=1.5)
        second = receive_n(consumer, 1, timeout_s=20)[0]
        elapsed = time.monotonic() - released_at
        second.ack()
    assert second.payload == b"retry-me" and second.delivery_count == 2
    assert 1.5 <= elapsed < 15, elapsed


def test_after_max_deliveries_a_message_is_dead_lettered_and_redrive_brings_it_back(
    kmq_config: ConfigFactory, marker_format: str,
) -> None:
    config = kmq_config(redelivery_timeout_ms=30_000, max_deliveries=3, marker_format=marker_format)
    queue = Service(config).queue("poison")
    counts = []
    with tracker_thread(config) as tracker, queue.consumer() as consumer, queue.producer() as producer:
        producer.send(b"bad", headers={"trace": "t1"})
        for _ in range(3):
            msg = receive_n(consumer, 1, timeout_s=20)[0]
            counts.append(msg.delivery_count)
            msg.release()
        assert consumer.receive(3.0) is None
        assert wait_for(lambda: tracker.metrics.dead_letters.labels("poison")._value.get() == 1)
        letters = list_dead_letters(config, "poison")
        assert [(d.payload, d.delivery_count, d.headers) for d in letters] == [(b"bad", 3, {"trace": b"t1"})]
        assert "max deliveries (3)" in letters[0].reason
        assert redrive(config, "poison") == 1
        back = receive_n(consumer, 1, timeout_s=20)[0]
        back.ack()
        assert redrive(config, "poison") == 0
    assert counts == [1, 2, 3]
    assert back.payload == b"bad" and back.delivery_count == 1 and back.headers == {"trace": b"t1"}


def test_a_redriven_letter_whose_copy_was_started_no_longer_counts_the_message_as_dead_lettered(
    kmq_config: ConfigFactory,
) -> None:
    """After a redrive, what the copy does decides the message's state: here a tracker Ends the copy's delivery as
    redelivered but no copy of it exists, so `kmq stats` counts it vanished (lost), not dead-lettered, `kmq inspect`
    says the same, and `kmq dlq list` no longer shows the letter. Letters and Starts are ordered by their records'
    timestamps."""
    config = kmq_config(redelivery_timeout_ms=30_000)
    queue = Service(config).queue("redriven")
    with queue.consumer() as consumer, queue.producer() as producer:
        producer.send(b"bad")
        receive_n(consumer, 1)[0].reject("schema mismatch")
        assert consumer.flush(10) == 0
        assert [(r.dead_lettered, r.vanished) for r in collect(config, ["redriven"])] == [(1, 0)]
        assert redrive(config, "redriven") == 1
        copy = receive_n(consumer, 1, timeout_s=20)[0]
        assert consumer.flush(10) == 0
        assert [(r.in_flight, r.dead_lettered) for r in collect(config, ["redriven"])] == [(1, 0)]
        raw = RawProducer({"bootstrap.servers": config.bootstrap_servers})
        lost = Marker(MarkerType.END, copy.message_id, end_reason=EndReason.REDELIVERED, client_id="a-tracker")
        raw.produce(config.marker_topic, encode(lost), b"redriven")
        assert raw.flush(10) == 0
        rows = collect(config, ["redriven"])
        assert [(r.vanished, r.dead_lettered, r.in_flight, r.delivered) for r in rows] == [(1, 0, 0, 2)]
        assert list_dead_letters(config, "redriven") == []
        told = inspect_message(config, "redriven", copy.message_id)
        assert (told.state, told.deliveries) == (vocabulary.VANISHED, 2) and "vanished" in told.summary


def test_reject_dead_letters_at_once_and_never_redelivers(kmq_config: ConfigFactory, marker_format: str) -> None:
    config = kmq_config(redelivery_timeout_ms=2000, marker_format=marker_format)
    queue = Service(config).queue("rej")
    with tracker_thread(config), queue.consumer() as consumer, queue.producer() as producer:
        producer.send(b"nope")
        receive_n(consumer, 1)[0].reject("schema mismatch")
        assert consumer.receive(5.0) is None
    letters = list_dead_letters(config, "rej")
    assert [(d.payload, d.reason) for d in letters] == [(b"nope", "schema mismatch")]


def test_on_a_broker_with_kafkas_default_group_join_delay_dead_letters_are_listed_and_redriven() -> None:
    """Kafka's default group.initial.rebalance.delay.ms (3 s) holds a new group's first join; the session's broker
    sets it to 0. Listing and redrive must never take "not assigned yet" for "no dead letters"."""
    from kmq.testing.broker import LocalKafka

    with LocalKafka(overrides={"group.initial.rebalance.delay.ms": "3000"}) as broker:
        config = Config(bootstrap_servers=broker.bootstrap_servers, message_topic="slow-join.messages",
                        marker_topic="slow-join.markers")
        service = Service(config)
        service.create_topics(partitions=2, marker_partitions=1)
        queue = service.queue("rej")
        with queue.producer() as producer:
            for i in range(3):
                producer.send(b"bad-%d" % i)
        with queue.consumer() as consumer:
            for msg in receive_n(consumer, 3):
                msg.reject("schema mismatch")
        assert sorted(d.payload for d in list_dead_letters(config, "rej")) == [b"bad-0", b"bad-1", b"bad-2"]
        assert redrive(config, "rej") == 3
        assert list_dead_letters(config, "rej") == [], "redriven letters no longer wait"
        assert len(list_dead_letters(config, "rej", include_redriven=True)) == 3
        assert redrive(config, "rej") == 0
        # A queue with no dead letters reads the topic once: its next redrive starts at the end.
        assert redrive(config, "other") == 0
        with TopicReplay(config, config.default_topics, config.dlq_topic, group=wire.redrive_group("other")) as replay:
            assert list(replay.records()) == []


def test_a_restarted_tracker_redelivers_overdue_messages_once_and_not_yet_due_ones_not_early(
    kmq_config: ConfigFactory,
) -> None:
    config = kmq_config(redelivery_timeout_ms=3000, consumer_kafka=FAST_GROUP)
    service = Service(config)
    with service.queue("dead").producer() as p1, service.queue("alive").producer() as p2:
        for i in range(6):
            p1.send_async(b"d%d" % i)
            p2.send_async(b"a%d" % i)
    tracker = tracker_process(config)
    try:
        worker = WorkerProcess(config, "dead", hold=6, ack=2)  # 4 left unacked, then killed
        worker.wait_holding()
        with service.queue("alive").consumer() as alive:
            held = receive_n(alive, 6)  # kept alive by this consumer throughout
            tracker.send_signal(signal.SIGKILL)
            tracker.wait(10)
            worker.kill()
            time.sleep(4)  # every "dead" message is now overdue; no tracker is running
            tracker = tracker_process(config)
            with service.queue("dead").consumer() as dead:
                again = receive_n(dead, 4, timeout_s=40)
                for msg in again:
                    msg.ack()
                assert dead.receive(5.0) is None, "an overdue message was redelivered twice"
            assert alive.receive(0.5) is None, "a message kept alive was redelivered"
            for msg in held:
                msg.ack()
    finally:
        tracker.terminate()
        assert tracker.wait(30) == 0
    assert len(again) == 4 and all(m.delivery_count == 2 for m in again)


def test_when_one_of_two_tracker_replicas_dies_the_survivor_redelivers_its_messages(
    kmq_config: ConfigFactory,
) -> None:
    # With 3 markers partitions, murmur2 puts A on 1, test-queue on 0 and benchmark-q on 2 (kafka-mq-go spec 2.4):
    # whichever partitions the killed replica owned, one of these queues is on them.
    config = kmq_config(redelivery_timeout_ms=3000, marker_partitions=3, consumer_kafka=FAST_GROUP)
    service = Service(config)
    first, second = tracker_process(config), tracker_process(config)
    admin = AdminClient({"bootstrap.servers": config.bootstrap_servers})

    try:
        assert wait_for(lambda: members_holding_partitions(admin, config.tracker_group) == 2, timeout_s=30)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        for name in ("A", "test-queue", "benchmark-q"):
            with service.queue(name).producer() as producer:
                producer.send(b"x-" + name.encode())
        workers = [WorkerProcess(config, name, hold=1) for name in ("A", "test-queue", "benchmark-q")]
        for w in workers:
            w.wait_holding()
            w.kill()
        again = []
        for name in ("A", "test-queue", "benchmark-q"):
            with service.queue(name).consumer() as consumer:
                got = receive_n(consumer, 1, timeout_s=45)
                for msg in got:
                    msg.ack()
                again += got
    finally:
        for proc in (first, second):
            if proc.poll() is None:
                proc.terminate()
        assert second.wait(30) == 0
    assert sorted(m.payload for m in again) == [b"x-A", b"x-benchmark-q", b"x-test-queue"]
    assert all(m.delivery_count == 2 for m in again)


def test_a_restart_over_10000_in_flight_not_yet_due_messages_redelivers_nothing(
    kmq_config: ConfigFactory,
) -> None:
    config = kmq_config(marker_partitions=1)
    raw = RawProducer({"bootstrap.servers": config.bootstrap_servers, "linger.ms": 20})
    for i in range(10_000):
        start = Marker(MarkerType.START, MessageId(0, i), 600_000, b"q", b"payload-%d" % i)
        raw.produce(config.marker_topic, encode(start), b"q")
        if i % 2:
            raw.produce(config.marker_topic, encode(Marker(MarkerType.END, MessageId(0, i))), b"q")
    assert raw.flush(30) == 0
    for _ in range(2):  # the second run starts from the first one's committed offset
        with tracker_thread(config) as tracker:
            assert wait_for(lambda t=tracker: bool(t.partitions) and all(  # type: ignore[misc]
                p.caught_up for p in t.partitions.values()), timeout_s=60)
            time.sleep(1.0)
            assert len(tracker.partitions[0].state) == 5_000
            assert tracker.metrics.redeliveries.labels("q")._value.get() == 0
    assert read_topic(config.bootstrap_servers, config.message_topic, timeout_s=3) == []


def test_a_tracker_that_reads_a_start_late_redelivers_it_when_due_not_that_much_later(
    kmq_config: ConfigFactory,
) -> None:
    """A tracker started (or handed the partition) after a Start was written reads it late; on a partition where
    no newer marker comes, its clock must not trail the broker's by that much (clock probe)."""
    config = kmq_config(marker_partitions=1)
    raw = RawProducer({"bootstrap.servers": config.bootstrap_servers})
    raw.produce(config.marker_topic, encode(Marker(MarkerType.START, MessageId(0, 0), 8_000, b"q", b"late")), b"q")
    assert raw.flush(10) == 0
    [start] = read_topic(config.bootstrap_servers, config.marker_topic, until=bool)
    written_ms = start.timestamp()[1]
    # The tracker is down while the Start ages 3 s: it reads it at least that late.
    assert wait_for(lambda: time.time() * 1000 >= written_ms + 3_000, timeout_s=10)
    with tracker_thread(config):
        copies = read_topic(config.bootstrap_servers, config.message_topic, until=bool, timeout_s=30)
    assert [c.value() for c in copies] == [b"late"]
    lateness_ms = copies[0].timestamp()[1] - (written_ms + 8_000)
    assert 0 <= lateness_ms < 1_500, f"redelivered {lateness_ms} ms after its deadline"


def test_garbage_and_unknown_version_markers_are_counted_and_skipped(kmq_config: ConfigFactory) -> None:
    config = kmq_config(marker_partitions=1)
    raw = RawProducer({"bootstrap.servers": config.bootstrap_servers})
    with tracker_thread(config) as tracker:
        raw.produce(config.marker_topic, b"this is not a valid marker", b"q")
        raw.produce(config.marker_topic, b"", b"q")
        raw.produce(config.marker_topic, b"\x08\x07\x1a\x04\x08\x01\x10\x05", b"q")  # version 7
        # Then a valid Start, due at once: the tracker must still be running to redeliver it.
        raw.produce(config.marker_topic, encode(Marker(MarkerType.START, MessageId(0, 0), 0, b"q", b"ok")), b"q")
        assert raw.flush(10) == 0
        assert wait_for(lambda: tracker.metrics.redeliveries.labels("q")._value.get() == 1, timeout_s=20)
        assert tracker.metrics.malformed._value.get() == 3
    copies = read_topic(config.bootstrap_servers, config.message_topic, until=lambda r: len(r) >= 1)
    assert [(c.key(), c.value()) for c in copies] == [(b"q", b"ok")]


class CommittedFailsAtFirst:
    """The tracker's markers consumer, whose first ``committed()`` answers time out (a coordinator moving)."""

    def __init__(self, settings: dict[str, object], failures: int) -> None:
        self._consumer = RawConsumer(settings)
        self.failures_left = failures

    def committed(self, partitions: list[TopicPartition], timeout: float = -1) -> list[TopicPartition]:
        if self.failures_left > 0:
            self.failures_left -= 1
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "committed offsets timed out"))
        return self._consumer.committed(partitions, timeout=timeout)

    def __getattr__(self, name: str) -> object:
        return getattr(self._consumer, name)


def test_a_partition_whose_committed_offset_cannot_be_read_is_tried_again_and_loses_nothing_read_meanwhile(
    kmq_config: ConfigFactory,
) -> None:
    config = kmq_config(marker_partitions=1)
    raw = RawProducer({"bootstrap.servers": config.bootstrap_servers})
    raw.produce(config.marker_topic, encode(Marker(MarkerType.START, MessageId(0, 3), 0, b"q", b"due")), b"q")
    assert raw.flush(10) == 0
    consumers: list[CommittedFailsAtFirst] = []

    class Clients(KafkaClients):
        def group_consumer(self, settings: dict[str, Any]) -> GroupClient:
            consumers.append(CommittedFailsAtFirst(settings, failures=2))
            return consumers[-1]  # type: ignore[return-value]

    with capture_logs() as logs, tracker_thread(config, clients=Clients()) as tracker:
        assert wait_for(lambda: tracker.metrics.redeliveries.labels("q")._value.get() == 1, timeout_s=20)
    assert consumers[0].failures_left == 0
    assert [e["partition"] for e in logs if e["event"] == "partition_init_failed"] == [0, 0]
    copies = read_topic(config.bootstrap_servers, config.message_topic, timeout_s=3)
    assert [(c.key(), c.value()) for c in copies] == [(b"q", b"due")]


def test_a_start_marker_written_with_the_plain_upstream_schema_is_redelivered(kmq_config: ConfigFactory) -> None:
    config = kmq_config(marker_partitions=1)
    start = upstream.Marker(type=upstream.Marker.START, message_id=upstream.MessageID(partition=0, offset=7),
                            redeliver_after_ms=500, key=b"go-queue", value=b"from-go")
    raw = RawProducer({"bootstrap.servers": config.bootstrap_servers})
    raw.produce(config.marker_topic, start.SerializeToString(), b"go-queue")
    assert raw.flush(10) == 0
    with tracker_thread(config), Service(config).queue("go-queue").consumer() as consumer:
        msg = receive_n(consumer, 1, timeout_s=20)[0]
        msg.ack()
    assert (msg.payload, msg.delivery_count, str(msg.first_message_id)) == (b"from-go", 2, "0:7")


def test_the_metrics_endpoint_serves_fresh_figures_and_healthz_says_when_the_markers_topic_is_gone(
    kmq_config: ConfigFactory, admin: AdminClient,
) -> None:
    import urllib.error
    import urllib.request

    from kmq.metrics_http import serve
    from tests.helpers import free_port

    config = kmq_config(marker_partitions=1)
    raw = RawProducer({"bootstrap.servers": config.bootstrap_servers})
    raw.produce(config.marker_topic, encode(Marker(MarkerType.START, MessageId(0, 0), 600_000, b"m", b"x")), b"m")
    raw.produce(config.marker_topic, b"junk", b"m")
    assert raw.flush(10) == 0
    port = free_port()
    with tracker_thread(config.replace(metrics_port=port)) as tracker:
        server = serve(tracker.metrics.registry, "127.0.0.1", port, tracker.health)
        try:
            def scraped() -> str:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                    return str(response.read().decode())

            assert wait_for(lambda: 'kmq_in_flight{queue="m"} 1.0' in scraped(), timeout_s=30)
            text = scraped()
            assert "kmq_malformed_markers_total 1.0" in text and "kmq_rebuild_seconds_count 1.0" in text
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
                assert response.status == 200 and response.read() == b"ok\n"
            # Drained: the gauge follows (it stayed at 1 before).
            raw.produce(config.marker_topic, encode(Marker(MarkerType.END, MessageId(0, 0))), b"m")
            assert raw.flush(10) == 0
            assert wait_for(lambda: 'kmq_in_flight{queue="m"} 0.0' in scraped(), timeout_s=30)

            def health() -> tuple[int, bytes]:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
                        return response.status, response.read()
                except urllib.error.HTTPError as err:
                    return err.code, err.read()

            admin.delete_topics([config.marker_topic])[config.marker_topic].result(30)
            assert wait_for(lambda: health()[0] == 503, timeout_s=30)
            assert b"does not exist" in health()[1]
        finally:
            server.shutdown()
            server.server_close()
