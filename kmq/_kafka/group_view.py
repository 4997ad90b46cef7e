"""GroupView: what the group coordinator says about a consumer group now (members, who serves which partition), and
how many records wait past a group's committed offsets. For health checks: a round trip each, asked rarely."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from kmq._kafka.offsets import GroupOffsets
from kmq._kafka.settings import base_settings
from kmq.config import Config
from kmq.errors import KmqError


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
        #: Committed offsets through consumers of the groups' ids, not the AdminClient (see GroupOffsets).
        self._offsets = GroupOffsets(config, "kmq-health", **{"reconnect.backoff.max.ms": 1000})

    def _client(self) -> AdminClient:
        if self._admin is None:
            # A health probe wants a fresh answer once the broker is back, not one after librdkafka's reconnect
            # backoff (up to 10 s after an outage).
            self._admin = AdminClient({"reconnect.backoff.max.ms": 1000, **base_settings(self._config, "kmq-health")})
        return self._admin

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
            committed = self._offsets.committed(group, topic, timeout_s, partitions)
            ends = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest()  # type: ignore[no-untyped-call]
                                       for p in partitions},
                                      request_timeout=timeout_s)
            high: dict[int, int] = {tp.partition: int(future.result(timeout=timeout_s).offset)
                                    for tp, future in ends.items()}
        except (KafkaException, KmqError, TimeoutError, KeyError):
            return None
        return int(sum(max(0, end - committed[p][0] if p in committed else end) for p, end in high.items()))


def _assigned(member: Any) -> list[Any]:
    assignment = getattr(member, "assignment", None)
    return list(getattr(assignment, "topic_partitions", None) or [])
