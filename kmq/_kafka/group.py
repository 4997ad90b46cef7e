"""Group membership helpers shared by the consumer and the tracker: assignment per rebalance protocol, and the
watch that turns "cannot join the group" into a clear fatal error."""

from __future__ import annotations

import time

from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError, TopicPartition

from kmq.errors import KafkaClientError


def assign(consumer: KafkaConsumer, partitions: list[TopicPartition], eager: bool) -> None:
    """In an on_assign callback: an eager rebalance hands over the whole assignment, a cooperative one a delta."""
    if eager:
        consumer.assign(partitions)
    else:
        consumer.incremental_assign(partitions)


def unassign(consumer: KafkaConsumer, partitions: list[TopicPartition], eager: bool) -> None:
    """In an on_revoke/on_lost callback: an eager rebalance takes everything back, a cooperative one a delta."""
    if eager:
        consumer.unassign()
    else:
        consumer.incremental_unassign(partitions)


class GroupJoinWatch:
    """Turns "cannot join the group" (no assignment strategy in common with its members) into a fatal error once
    it has lasted ``bound_s`` with nothing assigned: librdkafka retries it for ever, silently to the caller."""

    def __init__(self, group: str, strategy: str, bound_s: float) -> None:
        self._group = group
        self._strategy = strategy
        self._bound_s = bound_s
        self._since: float | None = None

    def assigned(self) -> None:
        self._since = None

    def check(self, err: KafkaError, has_assignment: bool) -> KafkaClientError | None:
        """For each client error: the fatal error to raise, or None."""
        if err.code() != KafkaError.INCONSISTENT_GROUP_PROTOCOL or has_assignment:
            return None
        now = time.monotonic()
        if self._since is None:
            self._since = now
        if now - self._since < self._bound_s:
            return None
        return KafkaClientError(
            f"cannot join consumer group {self._group!r}: its members use a partition assignment strategy this "
            f"member does not ({self._strategy!r} here; kafka-mq-go's members use 'range,roundrobin'). Give every "
            "kmq member of a group shared with kafka-mq-go rebalance_protocol: eager (the default with "
            "marker_format: kafka-mq-go)", code=err.code())


