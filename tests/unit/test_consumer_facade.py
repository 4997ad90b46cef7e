"""The Consumer facade through its client factory, no broker: rebalances in both protocols, a client failing inside a
rebalance callback, close with the broker gone, and the pause intent across a revoke."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import pytest
from structlog.testing import capture_logs

from kmq._kafka.group_view import GroupView
from kmq.client.consumer import Consumer
from kmq.config import Config
from kmq.errors import UndeliveredMarkersError
from tests.markers_io import wait_for
from tests.unit.fake_clients import FakeClients, FakeGroupClient, Record, RejoinClients, receive

Make = Callable[..., tuple[Consumer, FakeClients]]


def _config(**fields: object) -> Config:
    return Config(bootstrap_servers="fake:9092", message_topic="m", marker_topic="mk", connect_timeout_ms=2000,
                  next_message_timeout_ms=50, settle_linger_ms=1, **fields)  # type: ignore[arg-type]



@pytest.fixture
def make() -> Iterator[Make]:
    made: list[Consumer] = []

    def build(group: FakeGroupClient | None = None, broker_gone: bool = False,
              **fields: object) -> tuple[Consumer, FakeClients]:
        clients = FakeClients(group or FakeGroupClient("m", partitions=2), broker_gone=broker_gone)
        made.append(Consumer(_config(**fields), "q", clients=clients))
        return made[-1], clients

    yield build
    for consumer in made:
        with contextlib.suppress(UndeliveredMarkersError):
            consumer.close(2)


def test_a_cooperative_member_hands_out_its_partitions_messages_after_their_starts_and_commit(make: Make) -> None:
    consumer, clients = make()
    group = clients.group
    group.rebalance("assign", [0, 1])
    group.feed([Record("m", 0, 0, value_=b"a"), Record("m", 1, 0, value_=b"b"), Record("m", 1, 1, b"other", b"x")])
    got = receive(consumer, 2)
    assert sorted(m.payload for m in got) == [b"a", b"b"]
    assert consumer.assignment == {0, 1} and group.held == [0, 1]
    assert clients.produced("mk"), "the Starts are written before the hand-out"
    assert wait_for(lambda: group.committed_offsets == {0: 1, 1: 2}), group.commits
    for message in got:
        message.ack()
    group.rebalance("revoke", [1])
    assert wait_for(lambda: consumer.assignment == {0})
    assert group.held == [0], "a cooperative revoke takes back only the revoked partitions"


def test_an_eager_member_takes_and_gives_back_the_whole_assignment(make: Make) -> None:
    consumer, clients = make(rebalance_protocol="eager")
    group = clients.group
    group.rebalance("assign", [0, 1])
    assert wait_for(lambda: consumer.assignment == {0, 1})
    group.rebalance("revoke", [0, 1])
    group.rebalance("assign", [1])
    assert wait_for(lambda: consumer.assignment == {1})
    assert group.held == [1]


def test_a_client_failing_inside_a_rebalance_callback_is_logged_and_the_consumer_goes_on(make: Make) -> None:
    group = FakeGroupClient("m", partitions=2, failing={"incremental_assign": 1})
    with capture_logs() as logs:
        consumer, _clients = make(group)
        group.rebalance("assign", [0])
        assert wait_for(lambda: any(e["event"] == "rebalance_callback_failed" for e in logs))
        group.rebalance("assign", [0])  # librdkafka assigns again after the failed round
        group.feed([Record("m", 0, 0, value_=b"after")])
        got = receive(consumer, 1)
    assert [m.payload for m in got] == [b"after"]
    assert consumer.failure is None
    failed = next(e for e in logs if e["event"] == "rebalance_callback_failed")
    assert failed["step"] == "assign" and "fake incremental_assign failed" in failed["error"]


def test_close_with_the_broker_gone_returns_within_its_timeout_and_says_what_was_not_written(make: Make) -> None:
    consumer, clients = make()
    group = clients.group
    group.rebalance("assign", [0])
    group.feed([Record("m", 0, 0, value_=b"job")])
    [message] = receive(consumer, 1)
    for producer in clients.producers:
        producer.broker_gone = True  # from now on nothing is acknowledged, and leaving the group hangs
    group.hang_on_close = True
    message.ack()
    started = time.monotonic()
    with pytest.raises(UndeliveredMarkersError) as raised:
        consumer.close(timeout=1.0)
    group.hang_on_close = False
    assert time.monotonic() - started < 4.0
    assert raised.value.undelivered >= 1


def test_a_record_of_a_lost_partition_returned_after_the_loss_is_never_started_committed_or_handed_out(
    make: Make,
) -> None:
    """CI's frozen worker: thawed, it lost its partitions, librdkafka still returned a record of one fetched before,
    and the worker Started it, committed it with its next generation (Kafka takes a member's commit of any
    partition), moved the new owner's committed offset back from 165 to 40 and re-ran 126 handled records."""
    consumer, clients = make(rebalance_protocol="eager")
    group = clients.group
    group.rebalance("assign", [0, 1])
    group.feed([Record("m", 0, i, value_=b"%d" % i) for i in range(3)])
    for message in receive(consumer, 3):
        message.ack()
    assert wait_for(lambda: group.committed_offsets.get(0) == 3), group.commits
    commits_before_the_loss = len(group.commits)
    # When the member is thawed: the loss, a record of partition 0 fetched before it, then an empty assignment
    with group.lock:
        group.stale.append(Record("m", 0, 3, value_=b"stale"))
    group.rebalance("lost", [0, 1])
    group.rebalance("assign", [])
    group.committed_offsets[0] = 165  # the new owner's progress meanwhile
    assert wait_for(lambda: consumer.assignment == set() and not group.stale)
    # Then nothing of partition 0 is committed again, and the stale record is not handed out
    assert not receive(consumer, 1, timeout_s=1.0)
    assert all(0 not in commit for commit in group.commits[commits_before_the_loss:]), group.commits
    assert group.committed_offsets[0] == 165


def test_the_pause_intent_holds_across_a_revoke_and_a_new_assignment(make: Make) -> None:
    consumer, clients = make(receive_buffer_capacity=1, max_in_flight=1, max_read_ahead_records=4)
    group = clients.group
    group.rebalance("assign", [0, 1])
    group.feed([Record("m", 0, i, value_=b"%d" % i) for i in range(20)])
    assert wait_for(lambda: consumer.fetch_paused and group.paused == {0, 1}), "past the hard limit fetching pauses"
    # Paused: partition 1 leaves and comes back with its flag forgotten: it comes back paused, as intended.
    group.rebalance("revoke", [1])
    assert wait_for(lambda: consumer.assignment == {0})
    group.paused.discard(1)
    group.rebalance("assign", [1])
    assert wait_for(lambda: consumer.assignment == {0, 1} and group.paused == {0, 1})
    # Partition 1 leaves paused (librdkafka keeps the flag); fetching resumes meanwhile: it must come back fetching.
    group.rebalance("revoke", [1])
    assert wait_for(lambda: consumer.assignment == {0})
    drained = 0
    while drained < 20:
        got = receive(consumer, 1, timeout_s=5)
        assert got, f"only {drained} of 20 records came"
        for message in got:
            message.ack()
        drained += len(got)
    assert not consumer.fetch_paused and group.paused == {1}
    group.rebalance("assign", [1])
    assert wait_for(lambda: consumer.assignment == {0, 1} and group.paused == set())


def test_an_ack_after_the_redelivery_deadline_counts_as_late_and_one_in_time_does_not(make: Make) -> None:
    # Given two messages Started (their deadline, 400 ms after the Start landed, known to the consumer)
    consumer, clients = make(redelivery_timeout_ms=400)
    clients.group.rebalance("assign", [0])
    clients.group.feed([Record("m", 0, 0, value_=b"on time"), Record("m", 0, 1, value_=b"zombie")])
    on_time, zombie = sorted(receive(consumer, 2), key=lambda m: m.payload)
    on_time.ack()
    assert consumer.late_acks == 0
    # When the broker stops acknowledging the keep-alives meant to move the deadline (a cut-off worker) and the
    # handler ends only after it
    for producer in clients.producers:
        producer.broker_gone = True
    time.sleep(0.6)
    with capture_logs() as logs:
        zombie.ack()
    # Then the ack is counted late: the tracker may have delivered the message again meanwhile
    assert consumer.late_acks == 1
    assert [e["total"] for e in logs if e["event"] == "late_acks"] == [1]


def test_a_consumer_its_coordinator_keeps_out_of_the_group_joins_again_with_a_new_group_consumer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import kmq._kafka.rejoin as rejoin
    import kmq.client.consumer.rejoin as queue_rejoin

    monkeypatch.setattr(rejoin, "REJOIN_MARGIN_S", 0.3)
    monkeypatch.setattr(queue_rejoin, "GROUP_CHECK_S", 0.1)
    # Given a consumer holding both partitions, whose group client loses them and never joins again (after a broker
    # freeze librdkafka's member stayed out of its group until the run ended)
    stuck, fresh = FakeGroupClient("m", partitions=2), FakeGroupClient("m", partitions=2)
    fresh.member_id = "member-2"
    clients = RejoinClients(stuck, fresh)
    clients.admin.answer = GroupView(frozenset({"member-1"}), frozenset({0, 1}), frozenset({0, 1}))
    consumer = Consumer(_config(consumer_kafka={"session.timeout.ms": "300"}), "q", clients=clients)
    try:
        with capture_logs() as logs:
            stuck.rebalance("assign", [0, 1])
            assert wait_for(lambda: consumer.assignment == {0, 1})
            stuck.member_id = None
            clients.admin.answer = GroupView(frozenset({"member-3"}), frozenset({0, 1}), frozenset({0, 1}))
            stuck.rebalance("lost", [0, 1])
            assert wait_for(lambda: not consumer.assignment)
            # When the coordinator has said for the session timeout and the margin that it is not a member, a new
            # group consumer subscribes, gets the partitions and its records are handed out; the stuck one is closed
            fresh.rebalance("assign", [0, 1])
            fresh.feed([Record("m", 0, 5, value_=b"after")])
            got = receive(consumer, 1, timeout_s=8)
            assert [m.payload for m in got] == [b"after"], [e["event"] for e in logs]
            assert clients.handed == [stuck, fresh] and stuck.closed and not fresh.closed
            assert consumer.assignment == {0, 1} and consumer.rejoins == 1
            assert wait_for(lambda: fresh.committed_offsets == {0: 6}), fresh.commits
            got[0].ack()
    finally:
        consumer.close(2)
    rejoining = [e for e in logs if e["event"] == "consumer_rejoining"]
    assert len(rejoining) == 1 and rejoining[0]["log_level"] == "warning"
    assert rejoining[0]["reason"].startswith("out of group 'kafka-mq-q' (its members hold 2 of 2 partitions), for ")
    assert fresh.closed, "close() closes the consumer it holds now"


def test_a_standby_consumer_its_coordinator_counts_as_a_member_keeps_its_group_consumer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import kmq._kafka.rejoin as rejoin
    import kmq.client.consumer.rejoin as queue_rejoin

    monkeypatch.setattr(rejoin, "REJOIN_MARGIN_S", 0.2)
    monkeypatch.setattr(queue_rejoin, "GROUP_CHECK_S", 0.1)
    # Given a consumer given nothing (its group has more members than partitions), listed as a member
    group = FakeGroupClient("m", partitions=2)
    clients = FakeClients(group)
    clients.admin.answer = GroupView(frozenset({"member-1", "member-2"}), frozenset({0, 1}), frozenset({0, 1}))
    consumer = Consumer(_config(consumer_kafka={"session.timeout.ms": "200"}), "q", clients=clients)
    try:
        # When it has held nothing for many times the session timeout and the margin
        time.sleep(1.0)
        # Then it asked, and kept its group consumer
        assert clients.admin.asked >= 2 and consumer.rejoins == 0 and not group.closed
    finally:
        consumer.close(2)
