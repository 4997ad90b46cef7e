"""The RedeliveryTracker facade through its client factory, no broker: rebuild and redelivery, rebalances in both
protocols, a client failing inside a rebalance callback or an offset query, and stopping with the broker gone."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from structlog.testing import capture_logs

from kmq import wire
from kmq.config import Config
from kmq.redelivery.tracker import RedeliveryTracker
from kmq.wire import MessageId
from kmq.wire.markers import Marker, MarkerType, encode
from tests.markers_io import wait_for
from tests.unit.fake_clients import FakeClients, FakeGroupClient, Record, running


def _config(**fields: object) -> Config:
    return Config(bootstrap_servers="fake:9092", message_topic="m", marker_topic="mk",
                  redelivery_timeout_ms=1000, connect_timeout_ms=2000, **fields)  # type: ignore[arg-type]


def _start(offset: int, message: int, payload: bytes, written_ms_ago: int) -> Record:
    """A kafka-mq-go Start at ``offset`` of markers partition 0 whose 1 s deadline is ``written_ms_ago`` old."""
    marker = Marker(MarkerType.START, MessageId(0, message), 1000, b"q", payload)
    return Record("mk", 0, offset, b"q", encode(marker), timestamp_ms=wire.now_ms() - written_ms_ago)



@contextmanager
def _running(clients: FakeClients, **fields: object) -> Iterator[RedeliveryTracker]:
    with running(RedeliveryTracker(_config(**fields), clients=clients, stop_timeout_s=1.0)) as tracker:
        yield tracker


def test_an_overdue_start_is_redelivered_once_its_partition_is_rebuilt_and_a_revoke_commits_its_offset() -> None:
    group = FakeGroupClient("mk", partitions=1, end_offsets={0: 2})
    group.feed([_start(0, 7, b"overdue", written_ms_ago=5000), _start(1, 8, b"fresh", written_ms_ago=0)])
    clients = FakeClients(group)
    group.rebalance("assign", [0])
    with _running(clients) as tracker:
        assert wait_for(lambda: [r.value for r in clients.produced("m")] == [b"overdue"])
        copy = clients.produced("m")[0]
        assert dict(copy.headers)[wire.HEADER_DELIVERY_COUNT] == b"2"
        assert wait_for(lambda: len(clients.produced("mk")) >= 1), "an End follows the copy"
        # Revoked only once that End is read back: a revoke delivered in the same poll would rightly commit offset 0
        assert wait_for(lambda: len(tracker.partitions[0].state) == 1), "the End was read back"
        group.rebalance("revoke", [0])
        assert wait_for(lambda: not tracker.partitions)
    # The overdue Start's End was read back (offset 0 settled): the fresh one's is where the next owner starts.
    assert group.commits and group.commits[-1] == {0: 1}, "the oldest in-flight Start is where the next owner starts"
    assert group.held == []


def test_an_eager_tracker_takes_the_whole_assignment_and_gives_it_back() -> None:
    group = FakeGroupClient("mk", partitions=2)
    clients = FakeClients(group)
    group.rebalance("assign", [0, 1])
    with _running(clients, marker_format="kafka-mq-go") as tracker:
        assert wait_for(lambda: set(tracker.partitions) == {0, 1} and group.held == [0, 1])
        group.rebalance("revoke", [0, 1])
        group.rebalance("assign", [1])
        assert wait_for(lambda: set(tracker.partitions) == {1} and group.held == [1])


def test_a_client_failing_inside_a_rebalance_callback_is_logged_and_the_tracker_goes_on() -> None:
    group = FakeGroupClient("mk", partitions=1, end_offsets={0: 1}, failing={"incremental_assign": 1})
    group.feed([_start(0, 7, b"overdue", written_ms_ago=5000)])
    clients = FakeClients(group)
    with capture_logs() as logs:
        group.rebalance("assign", [0])
        with _running(clients):
            assert wait_for(lambda: any(e["event"] == "rebalance_callback_failed" for e in logs))
            group.rebalance("assign", [0])
            assert wait_for(lambda: [r.value for r in clients.produced("m")] == [b"overdue"])


def test_a_partition_whose_offsets_cannot_be_read_yet_keeps_its_records_and_is_rebuilt_later() -> None:
    group = FakeGroupClient("mk", partitions=1, end_offsets={0: 1}, failing={"committed": 1})
    group.feed([_start(0, 7, b"overdue", written_ms_ago=5000)])
    clients = FakeClients(group)
    group.rebalance("assign", [0])
    with capture_logs() as logs, _running(clients):
        assert wait_for(lambda: [r.value for r in clients.produced("m")] == [b"overdue"], timeout_s=10)
    assert [e["partition"] for e in logs if e["event"] == "partition_init_failed"] == [0]


def test_with_the_broker_gone_the_tracker_stops_within_its_stop_timeout() -> None:
    group = FakeGroupClient("mk", partitions=1, end_offsets={0: 1}, hang_on_close=True)
    group.feed([_start(0, 7, b"overdue", written_ms_ago=5000)])
    clients = FakeClients(group, broker_gone=True)
    group.rebalance("assign", [0])
    # kafka-mq-go format: no clock probe to wait for (kmq's would never come back from a broker that is gone).
    tracker = RedeliveryTracker(_config(marker_format="kafka-mq-go"), clients=clients, stop_timeout_s=1.0)
    thread = threading.Thread(target=tracker.run, daemon=True)
    thread.start()
    assert wait_for(lambda: bool(clients.produced("m"))), "the copy is produced (and never acknowledged)"
    stopped_at = time.monotonic()
    tracker.stop()
    thread.join(10)
    group.hang_on_close = False
    assert not thread.is_alive() and time.monotonic() - stopped_at < 4.0
