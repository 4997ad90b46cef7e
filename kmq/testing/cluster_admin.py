"""Where a replicated cluster's leaderships are: partition leaders and ISRs, group coordinators, live brokers.

AdminClient lookups with bounded retries: while a leadership moves, the brokers answer NOT_LEADER /
NOT_COORDINATOR / LEADER_NOT_AVAILABLE for a moment, and a fault test asks exactly then.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from kmq.testing.broker import BrokerError

T = TypeVar("T")
INTERNAL_TOPIC_PREFIX = "__"
OFFSETS_TOPIC = "__consumer_offsets"


def offsets_partition(group: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition of ``group``: Java's ``String.hashCode`` (over UTF-16 code units, 32-bit
    overflow), its absolute value (Kafka's ``Utils.abs``: 0 for Integer.MIN_VALUE), modulo the partition count."""
    h = 0
    for unit in struct.unpack(f"<{len(group.encode('utf-16-le')) // 2}H", group.encode("utf-16-le")):
        h = (31 * h + unit) & 0xFFFFFFFF
    signed = h - (1 << 32) if h & 0x80000000 else h
    return 0 if signed == -(1 << 31) else abs(signed) % partitions


class ClusterAdmin:
    """Read-only questions about a cluster, each answered within ``timeout_s`` or a BrokerError naming it."""

    def __init__(self, bootstrap_servers: str, settings: Mapping[str, str] | None = None) -> None:
        #: Client settings beside the servers: a secured cluster's super user (kmq.testing.security).
        self._settings = dict(settings or {})
        # log_level 0: a fault test kills brokers on purpose; the admin's "connection refused" lines are noise.
        self._admin = AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 0,
                                   "topic.metadata.refresh.interval.ms": 1000, **self._settings})

    def brokers(self, timeout_s: float = 10.0) -> set[int]:
        """The registered, unfenced brokers (a killed node stays listed until the controller fences it)."""
        def ask() -> set[int]:
            # Metadata, not describe_cluster: librdkafka sends that to the "controller" a KRaft broker names, a
            # random broker, which may be the dead one (a 3 s timeout then).
            return {int(b) for b in self._admin.list_topics(timeout=min(3.0, timeout_s)).brokers}
        return _retry(ask, timeout_s, "live brokers")

    def partitions(self, topic: str, timeout_s: float = 10.0) -> dict[int, tuple[int, list[int], list[int]]]:
        """Per partition of ``topic``: (leader, replicas, ISR); leader -1 while it has none."""
        def ask() -> dict[int, tuple[int, list[int], list[int]]]:
            meta = self._admin.list_topics(topic, timeout=min(5.0, timeout_s))
            info = meta.topics.get(topic)
            if info is None or info.error is not None:
                raise BrokerError(f"topic {topic!r}: {info.error if info else 'not found'}")
            return {p: (pm.leader, list(pm.replicas), list(pm.isrs)) for p, pm in info.partitions.items()}
        return _retry(ask, timeout_s, f"partitions of {topic!r}")

    def leader(self, topic: str, partition: int, timeout_s: float = 10.0) -> int:
        return self.partitions(topic, timeout_s)[partition][0]

    def leaders(self, topics: Iterable[str], timeout_s: float = 10.0) -> dict[tuple[str, int], int]:
        return {(t, p): leader for t in topics for p, (leader, _r, _i) in self.partitions(t, timeout_s).items()}

    def coordinator(self, group: str, timeout_s: float = 10.0) -> int:
        """The broker coordinating consumer group ``group``: the leader of its ``__consumer_offsets`` partition
        (Kafka's rule, so no request about the group is needed: librdkafka 2.16 was seen to abort in a
        DescribeConsumerGroups sent to a cluster started a moment before)."""
        def ask() -> int:
            partitions = self.partitions(OFFSETS_TOPIC, timeout_s)
            leader = partitions[offsets_partition(group, len(partitions))][0]
            if leader < 0:
                raise BrokerError(f"group {group!r} has no coordinator now")
            return leader
        return _retry(ask, timeout_s, f"coordinator of group {group!r}")

    def create_offsets_topic(self, bootstrap_servers: str, timeout_s: float = 60.0) -> None:
        """Makes the cluster create ``__consumer_offsets`` now (it does on the first group request) and waits until
        each of its partitions has a leader, so that the first consumer group of a test finds its coordinator."""
        consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": "kmq-cluster-ready",
                             "log_level": 0, **self._settings})
        try:
            _retry(lambda: consumer.committed([TopicPartition(OFFSETS_TOPIC + "-probe", 0)], timeout=5),
                   timeout_s, "the group coordinator")
        finally:
            consumer.close()
        _retry(lambda: _all_led(self.partitions(OFFSETS_TOPIC, timeout_s)), timeout_s, "the offsets topic's leaders")

    def topics(self, timeout_s: float = 10.0, *, internal: bool = True) -> list[str]:
        meta = _retry(lambda: self._admin.list_topics(timeout=min(5.0, timeout_s)), timeout_s, "topic list")
        return [t for t in meta.topics if internal or not t.startswith(INTERNAL_TOPIC_PREFIX)]

    def under_replicated(self, topics: Iterable[str] | None = None, timeout_s: float = 10.0) -> list[str]:
        """``topic:partition`` of every partition whose ISR is short of its replicas, or that has no leader, among
        ``topics`` (default: all), from one metadata answer (a topic deleted meanwhile is no error)."""
        wanted = None if topics is None else set(topics)
        meta = _retry(lambda: self._admin.list_topics(timeout=min(5.0, timeout_s)), timeout_s, "topic metadata")
        out = []
        for name, info in meta.topics.items():
            if (wanted is not None and name not in wanted) or info.error is not None:
                continue
            for p, pm in info.partitions.items():
                if pm.leader < 0 or set(pm.isrs) != set(pm.replicas):
                    out.append(f"{name}:{p}")
        missing = (wanted or set()) - set(meta.topics)
        return out + [f"{name}: not in the metadata yet" for name in sorted(missing)]

    def wait_in_sync(self, timeout_s: float = 60.0, topics: Iterable[str] | None = None) -> None:
        """Until no partition is under-replicated: what an operator waits for before restarting the next broker."""
        deadline = time.monotonic() + timeout_s
        wanted = list(topics) if topics is not None else None
        while True:
            try:
                lagging = self.under_replicated(wanted, timeout_s=max(1.0, deadline - time.monotonic()))
            except BrokerError as err:
                lagging = [str(err)]
            if not lagging:
                return
            if time.monotonic() >= deadline:
                raise BrokerError(f"{len(lagging)} partition(s) still under-replicated after {timeout_s:.0f}s: "
                                  f"{', '.join(lagging[:5])}")
            time.sleep(0.25)


def _all_led(partitions: dict[int, tuple[int, list[int], list[int]]]) -> None:
    leaderless = [p for p, (leader, _r, _i) in partitions.items() if leader < 0]
    if leaderless:
        raise BrokerError(f"partitions {leaderless} have no leader yet")


def _retry(ask: Callable[[], T], timeout_s: float, what: str) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return ask()
        except (KafkaException, BrokerError, TimeoutError) as err:
            if time.monotonic() >= deadline:
                raise BrokerError(f"{what} not known within {timeout_s:.0f}s: {err}") from err
        time.sleep(0.1)
