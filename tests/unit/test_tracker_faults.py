"""The tracker's two quiet faults through its client factory, no broker: an idle tracker that must block in its
poll (not spin on a deadline it cannot fire), and a group client that loses the tracker's partitions and
reports the group empty (the tracker must rejoin, or exit so a supervisor restarts it)."""

from __future__ import annotations

import threading
import time
from typing import Any

from structlog.testing import capture_logs

from kmq import wire
from kmq._kafka.group_view import GroupView
from kmq.config import Config
from kmq.errors import KmqError
from kmq.redelivery.expiry import POLL_S
from kmq.redelivery.tracker import ANSWER_FAST_S, ANSWER_POLL_S, RedeliveryTracker
from kmq.wire import MessageId
from kmq.wire.marker_batch import encode_settles, encode_starts
from tests.markers_io import wait_for
from tests.unit.fake_clients import FakeClients, FakeGroupAdmin, FakeGroupClient, Record, RejoinClients, running
from tests.unit.fakes import FakeStart


def _config(**fields: object) -> Config:
    return Config(bootstrap_servers="fake:9092", message_topic="m", marker_topic="mk",
                  redelivery_timeout_ms=1000, connect_timeout_ms=2000, **fields)  # type: ignore[arg-type]


class WaitLog:
    """Wraps a FakeGroupClient's consume: the timeout of each call, with when it was made."""

    def __init__(self, group: FakeGroupClient) -> None:
        self.calls: list[tuple[float, float]] = []
        consume = group.consume

        def logged(num_messages: int = 1, timeout: float = -1) -> list[Any]:
            self.calls.append((time.monotonic(), timeout))
            return consume(num_messages, timeout)

        group.consume = logged  # type: ignore[method-assign]

    def since(self, started: float) -> list[float]:
        return [timeout for at, timeout in self.calls if at >= started]


def test_an_idle_tracker_blocks_in_its_poll_once_every_start_by_reference_has_ended() -> None:
    # Given a burst of Starts by reference with a 300 ms deadline, all acknowledged at once
    group = FakeGroupClient("mk", partitions=1, end_offsets={0: 0})
    clients = FakeClients(group)
    waits = WaitLog(group)
    group.rebalance("assign", [0])
    refs = [FakeStart(MessageId(0, i), b"") for i in range(500)]
    now = wire.now_ms()
    with running(RedeliveryTracker(_config(), clients=clients, stop_timeout_s=1.0)) as tracker:
        assert wait_for(lambda: bool(tracker.partitions) and tracker.partitions[0].caught_up)
        group.feed([Record("mk", 0, 0, b"q", encode_starts(b"q", 300, [], refs=refs), timestamp_ms=now),
                    Record("mk", 0, 1, b"q", encode_settles(b"q", 0, acks=[r.message_id for r in refs]),
                           timestamp_ms=now + 5)])
        assert wait_for(lambda: not group.records and tracker.partitions[0].markers_read >= 2)
        assert len(tracker.partitions[0].state) == 0
        # When the (ended) deadlines have passed and the clock probe they asked for has come back
        time.sleep(1.0)
        idle_from = time.monotonic()
        time.sleep(1.0)
    # Then the loop waits the full poll interval each time: nothing is due, nothing to spin on
    idle = waits.since(idle_from)
    assert idle and min(idle) >= POLL_S, f"{sum(t < 0.001 for t in idle)} of {len(idle)} polls did not wait"
    assert not clients.produced("m"), "nothing acknowledged is redelivered"


def test_a_redelivery_whose_record_is_being_read_back_is_looked_at_often_not_at_the_idle_pace() -> None:
    # Given a Start by reference with a 300 ms deadline, whose record is read back slowly (100 ms)
    group = FakeGroupClient("mk", partitions=1, end_offsets={0: 0})
    clients = FakeClients(group)
    clients.reading.records = {0: [Record("m", 0, 0, b"q", b"payload")]}
    reads: list[tuple[float, float]] = []
    read = clients.reading.consume

    def slow_read(num_messages: int = 1, timeout: float = -1) -> list[Record]:
        began = time.monotonic()
        time.sleep(0.1)
        records = read(num_messages, timeout)
        reads.append((began, time.monotonic()))
        return records

    clients.reading.consume = slow_read  # type: ignore[method-assign]
    waits = WaitLog(group)
    group.rebalance("assign", [0])
    with running(RedeliveryTracker(_config(), clients=clients, stop_timeout_s=1.0)) as tracker:
        assert wait_for(lambda: bool(tracker.partitions) and tracker.partitions[0].caught_up)
        group.feed([Record("mk", 0, 0, b"q", encode_starts(b"q", 300, [], refs=[FakeStart(MessageId(0, 0), b"")]),
                           timestamp_ms=wire.now_ms())])
        # When its deadline passes and its record is being read back
        assert wait_for(lambda: bool(clients.produced("m")))
    # Then the loop looked for the answer every ANSWER_POLL_S meanwhile (the reader's answer waited for the idle
    # wait, up to 500 ms, and a burst of 10,000 redeliveries took a second)
    began, answered = reads[0]
    while_reading = [timeout for at, timeout in waits.calls if began <= at <= answered]
    assert while_reading and max(while_reading) <= ANSWER_POLL_S, while_reading


def test_a_tracker_whose_copies_go_unanswered_is_not_spun_on_them() -> None:
    # Given a tracker whose copies get no delivery report (the broker gone in the middle of a redelivery)
    group = FakeGroupClient("mk", partitions=1, end_offsets={0: 0})
    clients = FakeClients(group)
    waits = WaitLog(group)
    group.rebalance("assign", [0])
    with running(RedeliveryTracker(_config(), clients=clients, stop_timeout_s=1.0)) as tracker:
        assert wait_for(lambda: bool(tracker.partitions) and tracker.partitions[0].caught_up)
        clients.producers[0].broker_gone = True  # the sender
        group.feed([Record("mk", 0, 0, b"q", encode_starts(b"q", 300, [FakeStart(MessageId(0, i), b"x")
                                                                          for i in range(10)]),
                           timestamp_ms=wire.now_ms())])
        # When its copies were written and a while passed with no answer
        assert wait_for(lambda: len(clients.produced("m")) == 10)
        time.sleep(2 * ANSWER_FAST_S)
        unanswered_from = time.monotonic()
        time.sleep(0.5)
    # Then the loop waits POLL_S between looks, as with any work under way, not ANSWER_POLL_S
    unanswered = waits.since(unanswered_from)
    assert unanswered and min(unanswered) >= POLL_S, unanswered


def _view(members: set[str], served: set[int]) -> GroupView:
    return GroupView(frozenset(members), frozenset({0, 1, 2}), frozenset(served))


def test_a_tracker_that_lost_its_partitions_to_an_empty_group_says_so_then_exits_for_a_restart() -> None:
    # Given a tracker holding all three partitions
    group = FakeGroupClient("mk", partitions=3)
    clients = FakeClients(group)
    admin = FakeGroupAdmin(_view({"member-1"}, {0, 1, 2}))
    group.rebalance("assign", [0, 1, 2])
    tracker = RedeliveryTracker(_config(unassigned_unhealthy_ms=300, unassigned_exit_ms=1500), clients=clients,
                                stop_timeout_s=1.0, group_admin=admin)
    thread = threading.Thread(target=_run_keeping_error, args=(tracker, errors := []), daemon=True)
    with capture_logs() as logs:
        thread.start()
        assert wait_for(lambda: len(tracker.partitions) == 3)
        assert tracker.health() is None and tracker.liveness() is None
        # When its session is lost, the coordinator drops it and the group is left empty (no JoinGroup comes)
        group.member_id = None
        admin.answer = _view(set(), set())
        group.rebalance("lost", [0, 1, 2])
        assert wait_for(lambda: not tracker.partitions)
        # Then it is ready again for no one: unhealthy with the reason past unassigned_unhealthy_ms
        assert wait_for(lambda: tracker.health() is not None, timeout_s=5)
        assert (tracker.health() or "").startswith(
            "out of group 'kafka-mq-redelivery' while markers partitions [0, 1, 2] have no tracker, for ")
        # And past unassigned_exit_ms it stops and run() raises one line for its supervisor
        thread.join(10)
    assert not thread.is_alive() and len(errors) == 1
    assert "exiting for a restart (unassigned_exit_ms=1500)" in str(errors[0]) and "\n" not in str(errors[0])
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["tracker_fatal"]


def test_a_tracker_its_coordinator_keeps_out_of_the_group_joins_again_with_a_new_consumer(
        monkeypatch: Any) -> None:
    import kmq._kafka.rejoin as rejoin

    monkeypatch.setattr(rejoin, "REJOIN_MARGIN_S", 0.5)
    # Given a tracker holding all three partitions, whose group client loses them and never joins again
    stuck, fresh = FakeGroupClient("mk", partitions=3), FakeGroupClient("mk", partitions=3)
    clients = RejoinClients(stuck, fresh)
    admin = FakeGroupAdmin(_view({"member-1"}, {0, 1, 2}))
    stuck.rebalance("assign", [0, 1, 2])
    config = _config(consumer_kafka={"session.timeout.ms": "300"})
    tracker = RedeliveryTracker(config, clients=clients, stop_timeout_s=1.0, group_admin=admin)
    with capture_logs() as logs, running(tracker):
        assert wait_for(lambda: len(tracker.partitions) == 3)
        stuck.member_id = None
        admin.answer = _view(set(), set())
        stuck.rebalance("lost", [0, 1, 2])
        assert wait_for(lambda: not tracker.partitions)
        # When the coordinator has said so for the session timeout and the margin (librdkafka's own rejoin)
        fresh.rebalance("assign", [0, 1, 2])
        # Then a new group consumer joins and gets the partitions back; the stuck one is closed; no exit
        assert wait_for(lambda: len(tracker.partitions) == 3, timeout_s=8), [e["event"] for e in logs]
        admin.answer = _view({"member-2"}, {0, 1, 2})
        assert clients.handed == [stuck, fresh] and stuck.closed and not tracker.stopped
        assert tracker.liveness() is None
    rejoining = [e for e in logs if e["event"] == "tracker_rejoining"]
    assert len(rejoining) == 1 and rejoining[0]["log_level"] == "warning"
    assert rejoining[0]["reason"].startswith("out of group 'kafka-mq-redelivery' while markers partitions [0, 1, 2]")
    assert tracker.metrics.rejoins._value.get() == 1


def test_a_standby_replica_holding_nothing_while_others_serve_every_partition_is_healthy() -> None:
    group = FakeGroupClient("mk", partitions=3)
    admin = FakeGroupAdmin(_view({"member-1", "member-2"}, {0, 1, 2}))
    tracker = RedeliveryTracker(_config(unassigned_unhealthy_ms=100, unassigned_exit_ms=300),
                                clients=FakeClients(group), stop_timeout_s=1.0, group_admin=admin)
    with running(tracker):
        time.sleep(0.8)
        assert tracker.health() is None and tracker.liveness() is None and not tracker.stopped
    assert admin.asked >= 1


def _run_keeping_error(tracker: RedeliveryTracker, errors: list[BaseException]) -> None:
    try:
        tracker.run()
    except KmqError as err:
        errors.append(err)


def test_an_idle_tracker_commits_an_offset_once_not_every_interval() -> None:
    group = FakeGroupClient("mk", partitions=1, end_offsets={0: 0})
    group.rebalance("assign", [0])
    with running(RedeliveryTracker(_config(tracker_commit_interval_ms=50), clients=FakeClients(group),
                                    stop_timeout_s=1.0)) as tracker:
        assert wait_for(lambda: bool(tracker.partitions) and tracker.partitions[0].caught_up)
        time.sleep(0.6)
        commits = len(group.commits)
        time.sleep(0.6)
        # With nothing read, the oldest in-flight Start does not move: nothing to send (an idle tracker sent one
        # commit a second, and a frozen coordinator kept every one of them in flight)
        assert len(group.commits) == commits <= 2


def test_a_loop_that_stops_turning_ends_the_process_with_one_line(capsys: Any) -> None:
    from kmq.redelivery.cli import EXIT_ERROR, watch_loop

    class Stuck:
        def stalled(self) -> str | None:
            return "the tracker's loop has not turned for 301 s"

    exits: list[int] = []
    watch_loop([Stuck()], threading.Event(), every_s=0.01, exit_process=exits.append)  # type: ignore[list-item]
    assert exits == [EXIT_ERROR]
    assert capsys.readouterr().err == ("kmq-redelivery-tracker: error: the tracker's loop has not turned for 301 s: "
                                       "exiting for a restart\n")


def test_a_redelivery_under_way_when_its_partition_was_lost_and_given_back_is_made_once() -> None:
    """The cluster fault's duplicate (a tracker whose coordinator was cut off): a read back that failed before the
    loss was retried under the next holding too, beside the rebuild's own attempt: two copies at one count."""
    # Given a Start by reference whose record cannot be read back (its leader cut off)
    group = FakeGroupClient("mk", partitions=1, end_offsets={0: 1})
    clients = FakeClients(group)
    clients.reading.fail = True
    clients.reading.records = {0: [Record("m", 0, 0, b"q", b"payload")]}
    start = Record("mk", 0, 0, b"q", encode_starts(b"q", 100, [], refs=[FakeStart(MessageId(0, 0), b"")]),
                   timestamp_ms=wire.now_ms())
    group.feed([start])
    group.rebalance("assign", [0])
    with capture_logs() as logs, running(RedeliveryTracker(_config(), clients=clients, stop_timeout_s=1.0)):
        assert wait_for(lambda: any(e["event"] == "redelivery_retry" for e in logs))
        # When the partition is lost and given back (its rebuild reads the Start again) and the record is readable
        group.rebalance("lost", [0])
        group.rebalance("assign", [0])
        group.feed([start])
        clients.reading.fail = False
        assert wait_for(lambda: bool(clients.produced("m")))
        time.sleep(2.5)  # the first holding's retry would be due within 2 s
    # Then it is copied once
    assert len(clients.produced("m")) == 1, [e for e in logs if e["event"].startswith("redeliver")]
