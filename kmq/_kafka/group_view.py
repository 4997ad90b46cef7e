"""GroupView: what the group coordinator says about a consumer group now (members, who serves which partition), and
how many records wait past a group's committed offsets. For health checks: a round trip each, asked rarely."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from kmq._kafka.settings import base_settings
from kmq.config import Config


@dataclass(frozen=True, slots=True)
class GroupView:
    """One answer of the coordinator about ``group`` on ``topic``."""

    #: Member ids in the group now.
    members: frozenset[str]
    #: Partitions of the topic.
    partitions: frozenset[int]
    #: Partitions of the topic some member holds.
    served: frozenset[int]

    @property
    def unserved(self) -> list[int]:
        """The topic's partitions no member holds."""
        return sorted(self.partitions - self.served)


class GroupAdmin(Protocol):
    """The group queries health checks make (``KafkaGroupAdmin``; a fake in unit tests)."""

    def view(self, group: str, topic: str, timeout_s: float) -> GroupView | None:
        """The group now, or None when the broker cannot say within ``timeout_s``."""

    def waiting(self, group: str, topic: str, timeout_s: float) -> int | None:
        """Records of ``topic`` past ``group``'s committed offsets (all of a partition it never committed), or
        None when the broker cannot say."""


class KafkaGroupAdmin:
    """GroupAdmin on confluent-kafka's AdminClient (made on first use: most processes never ask)."""

    def __init__(self, config: Config) -> None:
        self._config = config
        self._admin: AdminClient | None = None
        #: Per group, a consumer with its id that never subscribes: it reads the group's committed offsets.
        self._readers: dict[str, Consumer] = {}

    def _client(self) -> AdminClient:
        if self._admin is None:
            # A health probe wants a fresh answer once the broker is back, not one after librdkafka's reconnect
            # backoff (up to 10 s after an outage).
            self._admin = AdminClient({"reconnect.backoff.max.ms": 1000, **base_settings(self._config, "kmq-health")})
        return self._admin

    def _offsets_reader(self, group: str) -> Consumer:
        # Not the AdminClient's list_consumer_group_offsets: librdkafka (2.16) answers an offset fetch that meets a
        # coordinator move (NOT_COORDINATOR, as right after a frozen broker thaws) by asking the client's own consumer
        # group to find the coordinator again, and an AdminClient has none: the process dies in rd_kafka_cgrp_op
        # (a worker's health check did, in the fault run's 30 s broker freeze). A consumer with the group's id has
        # one; never subscribing, it never joins the group.
        reader = self._readers.get(group)
        if reader is None:
            reader = Consumer({"reconnect.backoff.max.ms": 1000, **base_settings(self._config, "kmq-health"),
                               "group.id": group, "enable.auto.commit": False})
            self._readers[group] = reader
        return reader

    def view(self, group: str, topic: str, timeout_s: float) -> GroupView | None:
        admin = self._client()
        try:
            partitions = frozenset(admin.list_topics(topic, timeout=timeout_s).topics[topic].partitions)
            described = admin.describe_consumer_groups([group], request_timeout=timeout_s)[group].result(
                timeout=timeout_s)
        except (KafkaException, TimeoutError, KeyError):
            return None
        members = described.members or []
        served = frozenset(tp.partition for m in members for tp in _assigned(m) if tp.topic == topic)
        return GroupView(frozenset(m.member_id for m in members), partitions, served)

    def waiting(self, group: str, topic: str, timeout_s: float) -> int | None:
        admin = self._client()
        try:
            partitions = list(admin.list_topics(topic, timeout=timeout_s).topics[topic].partitions)
            offsets = self._offsets_reader(group).committed([TopicPartition(topic, p) for p in partitions],
                                                            timeout=timeout_s)
            ends = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest()  # type: ignore[no-untyped-call]
                                       for p in partitions},
                                      request_timeout=timeout_s)
            high: dict[int, int] = {tp.partition: int(future.result(timeout=timeout_s).offset)
                                    for tp, future in ends.items()}
        except (KafkaException, TimeoutError, KeyError):
            return None
        if any(tp.error is not None for tp in offsets):
            return None
        committed = {tp.partition: tp.offset for tp in offsets if tp.offset >= 0}
        return int(sum(max(0, end - committed.get(p, 0)) for p, end in high.items()))


def _assigned(member: Any) -> list[Any]:
    assignment = getattr(member, "assignment", None)
    return list(getattr(assignment, "topic_partitions", None) or [])
