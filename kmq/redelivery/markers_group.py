"""MarkersGroup: a tracker replica's membership of its group over the markers topic.

Replicas share the markers partitions through consumer group ``kafka-mq-redelivery`` (GroupMembership: assign,
revoke, lost). This part holds the group consumer and what it does for the tracker: its client errors (a group it
cannot join is fatal; the rest are said every few seconds while they last); partitions assigned are handed
to OwnedPartitions (their rebuild starts at once, inside the callback); revoked ones are committed first, so the next
owner starts from the oldest Start still in flight; and it commits each partition's oldest in-flight Start on the
commit policy, only when that offset moved since it was last sent. An idle tracker then sends no commits, and after a
broker freeze librdkafka has none in flight to wait for before it rejoins (a lost assignment completes only once
every commit in flight has an answer).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import structlog
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kmq import _kafka
from kmq._kafka.closing import OLD_CLIENT_CLOSE_S, close_within
from kmq._kafka.commit_policy import CommitPolicy
from kmq._kafka.factory import GroupClient
from kmq._kafka.group import GroupMembership
from kmq._util import Throttle
from kmq.config import Config
from kmq.errors import KmqError
from kmq.redelivery.clock import Monotonic
from kmq.redelivery.partitions import OwnedPartitions
from kmq.topic_sets import TopicSet

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

BATCH = 1000
MIN_COMMIT_INTERVAL_S = 0.1
#: How often the tracker says it cannot reach the broker.
COMPLAIN_EVERY_S = 5.0


class MarkersGroup:
    """The group consumer of one tracker replica and its commits. Loop thread only (rebalance callbacks run inside
    ``consume``). ``fold(records)`` feeds the records that waited for a partition's rebuild to start;
    ``on_error(err)`` sees every client error (``error_cb``)."""

    def __init__(self, config: Config, topics: TopicSet, consumer_for: Callable[[dict[str, Any]], GroupClient],
                 client_id: str, owned: OwnedPartitions, fold: Callable[[Sequence[Any]], int], monotonic: Monotonic,
                 *, on_assigned: Callable[[], None], on_fatal: Callable[[KmqError], None]) -> None:
        self._topic = topics.markers
        self._bootstrap_servers = config.bootstrap_servers
        self._sasl_username = config.kafka.get("sasl.username", "")
        self._owned = owned
        self._fold = fold
        self._on_assigned_hook = on_assigned
        self._on_fatal = on_fatal
        self._complaints = Throttle(COMPLAIN_EVERY_S, monotonic)
        # At most every MIN_COMMIT_INTERVAL_S however many markers come: a commit holds the loop ~1 ms while
        # librdkafka fetches (measured), and at kafka-mq-go's 1,000 markers a commit that was 50 commits a second.
        self._policy = CommitPolicy(config.num_offsets_per_commit, config.tracker_commit_interval_ms / 1000,
                                    monotonic, min_interval_s=MIN_COMMIT_INTERVAL_S)
        #: Partition → the offset last sent in a commit (dropped when that commit failed: sent again).
        self._sent: dict[int, int] = {}
        self.membership = GroupMembership(
            topics.tracker_group, config.assignment_strategy, eager=config.eager_rebalance,
            join_bound_s=config.connect_timeout_ms / 1000, on_assigned=self._on_assigned,
            on_revoking=lambda partitions: self.commit(partitions, wait=True), on_dropped=self._on_dropped,
            monotonic=monotonic)
        self._consumer_for = consumer_for
        self._settings: dict[str, Any] = {
            **_kafka.consumer_settings(config.replace(client_id=""), topics.tracker_group, client_id),
            "fetch.max.bytes": 64 * 1024 * 1024, "max.partition.fetch.bytes": 16 * 1024 * 1024,
            "error_cb": self._on_client_error, "on_commit": self._on_commit,
        }
        self.consumer = consumer_for(self._settings)
        self.membership.subscribe(self.consumer, [self._topic])
        #: Group consumers made again because the coordinator kept this replica out of its group.
        self.rejoins = 0

    def consume(self, timeout_s: float) -> list[Any]:
        """Up to BATCH records within ``timeout_s`` (rebalance callbacks run in here)."""
        return self.consumer.consume(BATCH, timeout_s)

    def records_read(self, count: int) -> None:
        self._policy.note(count)

    def commit_if_due(self) -> None:
        if self._policy.due():
            self.commit(list(self._owned))

    def commit(self, partitions: list[int], *, wait: bool = False) -> None:
        """Commits each caught-up partition's oldest in-flight Start that moved since it was last sent (all of them
        with ``wait``). Asynchronous in the loop: with the broker away a synchronous commit blocks until it is back,
        and the loop must go on (the next commit carries the same or later offsets; close() waits for the last).
        Synchronous on revoke, so the next owner starts from it."""
        offsets = []
        for p in partitions:
            part = self._owned.get(p)
            if part is not None and part.caught_up:
                offset = part.state.commit_offset()
                if wait or self._sent.get(p) != offset:
                    offsets.append(TopicPartition(self._topic, p, offset))
                    self._sent[p] = offset
        self._policy.committed()
        if not offsets:
            return
        try:
            self.consumer.commit(offsets=offsets, asynchronous=not wait)
        except Exception as err:  # noqa: BLE001 - the next commit carries the same or later offsets
            for tp in offsets:
                self._sent.pop(tp.partition, None)
            log.warning("tracker_commit_failed", error=describe(err))

    def _on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        if err is not None and err.code() != KafkaError._NO_OFFSET:
            for tp in partitions:
                if self._sent.get(tp.partition) == tp.offset:
                    del self._sent[tp.partition]
            log.warning("tracker_commit_failed", error=f"{err.str()} ({err.name()})")

    def lag_of(self, partition: int) -> int | None:
        """Markers not yet read on ``partition`` (from librdkafka's cached high watermark)."""
        try:
            _low, high = self.consumer.get_watermark_offsets(TopicPartition(self._topic, partition),
                                                             cached=True) or (0, 0)
        except Exception:  # noqa: BLE001 - a gauge can wait for the next round
            return None
        part = self._owned.get(partition)
        return None if part is None else max(0, int(high) - part.state.next_offset)

    def member_id(self) -> str | None:
        """This member's id in the group, None when it has none (never joined, or reset after a lost session)."""
        try:
            return self.consumer.memberid() or None
        except (KafkaException, RuntimeError):
            return None

    def _on_client_error(self, err: KafkaError) -> None:
        _kafka.Credentials.note(self._bootstrap_servers, self._sasl_username, err)
        cannot_join = self.membership.cannot_join(err)
        if cannot_join is not None:
            self._on_fatal(cannot_join)
            return
        # Repeats many times a second while the broker is away: say it every few seconds, with what we wait for.
        if self._complaints.due():
            log.warning("tracker_waiting_for_kafka", bootstrap_servers=self._bootstrap_servers,
                        error=err.str(), code=err.name(), assigned=sorted(self._owned))

    def rejoin(self, reason: str) -> None:
        """Replaces the group consumer, which holds nothing, with a new one that joins the group afresh (see
        TrackerHealth.rejoin_reason). The old one leaves (in the background: it may hang), and any rebalance callback
        it still runs is ignored (GroupMembership follows the new one)."""
        self.rejoins += 1
        log.warning("tracker_rejoining", group=self.membership.group, reason=reason, rejoins=self.rejoins)
        close_within(self.consumer, OLD_CLIENT_CLOSE_S, log, what="tracker_old_consumer")
        self._sent.clear()
        self.consumer = self._consumer_for(self._settings)
        self.membership.subscribe(self.consumer, [self._topic])

    def close(self) -> None:
        _close(self.consumer)

    # --- rebalances (GroupMembership calls these inside consume(), on the loop thread) -----------------

    def _on_assigned(self, partitions: list[int]) -> None:
        self._on_assigned_hook()
        for p in partitions:
            self._sent.pop(p, None)
        self._owned.assigned(partitions)
        self._fold(self._owned.init_pending(self.consumer, force=True))

    def _on_dropped(self, partitions: list[int], _lost: bool) -> None:
        self._owned.dropped(partitions)
        for p in partitions:
            self._sent.pop(p, None)


def _close(consumer: GroupClient) -> None:
    try:
        consumer.close()
    except Exception as err:  # noqa: BLE001 - closing: nothing left to save
        log.warning("tracker_close_failed", error=describe(err))


def describe(err: BaseException) -> str:
    """One line for any error, a bare KafkaError (which formats badly) included."""
    if isinstance(err, KafkaException) and err.args and isinstance(err.args[0], KafkaError):
        return f"{err.args[0].str()} ({err.args[0].name()})"
    return f"{type(err).__name__}: {err}"
