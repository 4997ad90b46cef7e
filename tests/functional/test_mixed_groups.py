"""Sharing consumer groups with kafka-mq-go's members, which use librdkafka's default eager strategy
(played here by a plain confluent-kafka consumer with ``range,roundrobin``: tests/group_member.py)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from kmq import Config, KafkaClientError, Service
from kmq.redelivery.tracker import RedeliveryTracker
from kmq.wire import consumer_group
from tests.conftest import ConfigFactory
from tests.helpers import FAST_GROUP, ROOT
from tests.markers_io import wait_for

pytestmark = pytest.mark.timeout(120)
EAGER = "range,roundrobin"


class Member:
    """A plain group member in its own process; ``held`` is its latest assignment."""

    def __init__(self, config: Config, group: str, topic: str, strategy: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.group_member", config.bootstrap_servers, group,
                                      topic, strategy], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        self.held: set[int] = set()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("ASSIGNED"):
                self.held = {int(p) for p in line.split()[1].split(",") if p} if len(line.split()) > 1 else set()

    def stop(self) -> None:
        self.proc.kill()
        self.proc.communicate(timeout=30)


@pytest.fixture
def members() -> Iterator[list[Member]]:
    started: list[Member] = []
    yield started
    for member in started:
        member.stop()


def test_a_kmq_consumer_in_kafka_mq_go_mode_shares_a_queue_group_with_an_eager_member(
    kmq_config: ConfigFactory, members: list[Member],
) -> None:
    config = kmq_config(partitions=6, marker_format="kafka-mq-go", consumer_kafka=FAST_GROUP)
    assert config.assignment_strategy == EAGER
    with Service(config).queue("mixed").consumer() as consumer:
        assert wait_for(lambda: len(consumer.assignment) == 6, timeout_s=30)
        members.append(Member(config, consumer_group("mixed"), config.message_topic, EAGER))
        # Eager: everything is revoked, then split between the two.
        assert wait_for(lambda: members[0].held and consumer.assignment
                        and members[0].held | consumer.assignment == set(range(6)), timeout_s=40), (
            members[0].held, consumer.assignment)
        assert not members[0].held & consumer.assignment
        consumer.receive(0.1)  # the consumer still works after the eager rebalance
        assert consumer.failure is None


def test_a_kmq_tracker_shares_its_group_with_an_eager_member(kmq_config: ConfigFactory, members: list[Member]) -> None:
    config = kmq_config(marker_partitions=4, rebalance_protocol="eager",
                        tracker_group=f"trackers-{uuid.uuid4().hex[:8]}", consumer_kafka=FAST_GROUP)
    tracker = RedeliveryTracker(config)
    thread = threading.Thread(target=tracker.run, daemon=True)
    thread.start()
    try:
        assert wait_for(lambda: len(tracker.partitions) == 4, timeout_s=30)
        members.append(Member(config, config.tracker_group, config.marker_topic, EAGER))
        assert wait_for(lambda: members[0].held and set(tracker.partitions)
                        and members[0].held | set(tracker.partitions) == set(range(4)), timeout_s=40), (
            members[0].held, set(tracker.partitions))
    finally:
        tracker.stop()
        thread.join(30)


def test_a_consumer_that_cannot_join_a_group_fails_in_bounded_time_naming_group_and_strategies(
    kmq_config: ConfigFactory, members: list[Member],
) -> None:
    config = kmq_config(connect_timeout_ms=3_000)  # kmq format: cooperative
    members.append(Member(config, consumer_group("shared"), config.message_topic, EAGER))
    assert wait_for(lambda: bool(members[0].held), timeout_s=30)
    started = time.monotonic()
    with Service(config).queue("shared").consumer() as consumer, pytest.raises(KafkaClientError) as caught:
        while time.monotonic() - started < 60:
            consumer.receive(0.5)
    assert time.monotonic() - started < 30
    text = str(caught.value)
    assert "cannot join consumer group 'kafka-mq-shared'" in text and "'cooperative-sticky'" in text
    assert "range,roundrobin" in text
