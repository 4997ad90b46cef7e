"""A consumer whose fetching is paused (local backlog full) must read every partition it holds after any
rebalance: librdkafka remembers a partition's paused flag across revoke/lost and a later re-assignment."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from kmq import Config, Consumer, ConsumerClosedError, Service
from tests.helpers import FAST_GROUP, ROOT, ConfigFactory, env_for
from tests.markers_io import wait_for

pytestmark = pytest.mark.timeout(180)

TOTAL = 6000
# Fetching pauses once 60 records wait unstarted (past 30 the intake takes one record per poll).
PAUSES_SOON = {"receive_buffer_capacity": 10, "max_read_ahead_records": 60}


def _produce(config: Config, queue: str) -> None:
    with Service(config).queue(queue).producer() as producer:
        for i in range(TOTAL):
            producer.send_async(b"%d" % i)


class Member:
    """A plain group member in its own process (tests.group_member), to be SIGKILLed; it uses the kmq consumers'
    strategy (eager in the kafka-mq-go format), so the two can share the group."""

    def __init__(self, config: Config, queue: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.group_member", config.bootstrap_servers, config.consumer_group(queue),
             config.message_topic, config.assignment_strategy], cwd=ROOT, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def _drain(consumer: Consumer, seen: dict[bytes, int], until: threading.Event) -> None:
    """Receives and acks until ``until``; ``seen`` maps each payload read to its partition."""
    with contextlib.suppress(ConsumerClosedError):
        while not until.is_set() and len(seen) < TOTAL:
            msg = consumer.receive(0.1)
            if msg is not None:
                seen[msg.payload] = msg.message_id.partition
                msg.ack()


def _read_from(seen: dict[bytes, int], partitions: frozenset[int]) -> int:
    partition_of_each = list(seen.values())  # one C-level copy: the drainer thread keeps adding
    return sum(p in partitions for p in partition_of_each)


def _records_in(admin: AdminClient, topic: str, partitions: frozenset[int]) -> int:
    """How many records ``partitions`` of a fresh ``topic`` hold. The producer's random partitioner does not split
    TOTAL evenly: CI once put 2,455 of 6,000 on the three partitions a survivor kept."""
    ends = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in partitions})
    return sum(future.result(timeout=10).offset for future in ends.values())


def test_a_paused_survivor_reads_the_partitions_a_dead_member_gives_back(
    kmq_config: ConfigFactory, admin: AdminClient, marker_format: str,
) -> None:
    # Given a consumer whose backlog is full, so fetching is paused
    config = kmq_config(partitions=6, consumer_kafka=FAST_GROUP, marker_format=marker_format, **PAUSES_SOON)
    _produce(config, "survivor")
    seen: dict[bytes, int] = {}
    stop = threading.Event()
    with Service(config).queue("survivor").consumer() as one:
        drainer = threading.Thread(target=_drain, args=(one, seen, stop))
        try:
            assert wait_for(lambda: one.fetch_paused, timeout_s=30), "fetching never paused"
            # When a second member joins and takes half the partitions
            member = Member(config, "survivor")
            try:
                assert wait_for(lambda: len(one.assignment) == 3, timeout_s=30), one.assignment
                kept = one.assignment
                kept_records = _records_in(admin, config.message_topic, kept)
                # and the survivor drains its half, so it resumes fetching while the other half is away
                drainer.start()
                assert wait_for(lambda: _read_from(seen, kept) == kept_records and not one.fetch_paused,
                                timeout_s=60), (
                    f"{_read_from(seen, kept)} of the {kept_records} records of kept partitions {sorted(kept)} "
                    f"read, fetch paused: {one.fetch_paused}, assignment {sorted(one.assignment)}")
            finally:
                # and the second member dies
                member.kill()
            # Then the survivor gets all six partitions back and finishes every message in bounded time
            assert wait_for(lambda: len(one.assignment) == 6, timeout_s=30), one.assignment
            assert wait_for(lambda: len(seen) == TOTAL, timeout_s=90), (
                f"{TOTAL - len(seen)} messages never read; fetch paused: {one.fetch_paused}")
        finally:
            stop.set()
            if drainer.is_alive():
                drainer.join(10)


def test_a_consumer_whose_partitions_are_lost_while_paused_reads_them_when_they_come_back(
    kmq_config: ConfigFactory, admin: AdminClient,
) -> None:
    # Given a consumer process whose fetching is paused
    config = kmq_config(partitions=6, consumer_kafka=FAST_GROUP, **PAUSES_SOON)
    _produce(config, "lost")
    proc = subprocess.Popen([sys.executable, "-m", "tests.paused_drain_proc", "lost", str(TOTAL)], cwd=ROOT,
                            env=env_for(config), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "PAUSED"
        # When it is frozen past its session timeout, so the group drops it and its partitions are lost
        proc.send_signal(signal.SIGSTOP)
        assert wait_for(lambda: _members(admin, config.consumer_group("lost")) == 0, timeout_s=30, interval_s=0.5)
        proc.send_signal(signal.SIGCONT)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        # Then, back in the group with the same partitions, it reads every message
        assert proc.stdout.readline().strip() == f"DONE {TOTAL}"
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait(10)
        proc.stdin.close()
        proc.stdout.close()


def _members(admin: AdminClient, group: str) -> int:
    description = admin.describe_consumer_groups([group])[group].result(timeout=10)
    return len(description.members)
