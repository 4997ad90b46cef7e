"""Offsets: synchronous commits with their outcome, and watermark queries that ride out a moving leader."""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any, Protocol

import structlog
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from kmq._kafka.errors import LEADERSHIP_MOVING, NOT_AUTHORIZED, OWNERSHIP_LOST, not_authorized, to_kmq_error
from kmq._kafka.metadata import metadata
from kmq._kafka.settings import base_settings
from kmq.config import Config

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

COMMIT_ATTEMPTS = 3
#: Groups ``committed_of_groups`` reads at once. A read is a few round trips (the group's coordinator found, then
#: asked) in a fresh client, waiting on the network, not the CPU: 100 groups took 5 s one after the other, ~0.3 s 16 at
#: once; more at once mostly adds client threads (about five each) and connections at the same instant.
GROUPS_AT_ONCE = 16
#: librdkafka settings of a reader made for one read. librdkafka drops its bootstrap connection once it learns the
#: broker's id, failing a coordinator lookup sent on it, and asks again only after reconnect.backoff.ms / 2 (50 ms by
#: default; its floor is 11 ms): about half the reads took 54 ms instead of 5 (measured with 100 groups on one broker:
#: 30 ms a read on average, 8 ms with 10). A reader lives one read, so its backoff never grows to matter.
ONE_READ_SETTINGS: dict[str, Any] = {"reconnect.backoff.ms": 10}


class Committer(Protocol):
    def commit(self, message: Any = ..., offsets: Any = ..., asynchronous: bool = ...) -> Any: ...


class CommitOutcome(enum.Enum):
    COMMITTED = "committed"
    #: This member no longer owns the partitions (rebalance): retrying cannot succeed.
    FENCED = "fenced"
    FAILED = "failed"


def watermarks(consumer: KafkaConsumer, tp: TopicPartition, timeout_s: float, what: str,
               sleep: Callable[[float], None] = time.sleep) -> tuple[int, int]:
    """The low and high watermarks of ``tp``, retrying transient errors for up to ``timeout_s``; a
    KafkaClientError naming ``what`` (e.g. "end offsets of 'q.control'") once they persist or are not transient."""
    deadline = time.monotonic() + timeout_s
    pause_s = 0.05
    while True:
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=max(0.1, deadline - time.monotonic()))
            return int(low), int(high)
        except KafkaException as exc:
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            transient = err is not None and (err.retriable() or err.code() in LEADERSHIP_MOVING
                                             or err.code() == KafkaError._TIMED_OUT)
            if not transient or time.monotonic() + pause_s >= deadline:
                raise to_kmq_error(exc, what) from exc
            log.debug("offsets_query_retried", of=what, error=err.str() if err else str(exc))
        sleep(pause_s)
        pause_s = min(pause_s * 2, 1.0)


def commit(consumer: Committer, offsets: Mapping[tuple[str, int], int], what: str,
           attempts: int = COMMIT_ATTEMPTS, metadata: Mapping[tuple[str, int], str] | None = None) -> CommitOutcome:
    """Commits ``offsets`` synchronously (each with its ``metadata``, if any), retrying transient errors; FENCED when
    this member lost the partitions."""
    metadata = metadata or {}
    partitions = [TopicPartition(topic, partition, offset, metadata=metadata[(topic, partition)])
                  if (topic, partition) in metadata else TopicPartition(topic, partition, offset)
                  for (topic, partition), offset in offsets.items()]
    for attempt in range(1, attempts + 1):
        try:
            results = consumer.commit(offsets=partitions, asynchronous=False) or []
            errors = [tp.error for tp in results if tp.error is not None]
            if not errors:
                return CommitOutcome.COMMITTED
            error: KafkaError = errors[0]
        except KafkaException as exc:
            error = exc.args[0]
        if error.code() in OWNERSHIP_LOST:
            log.info("commit_fenced", of=what, error=error.str())
            return CommitOutcome.FENCED
        log.warning("commit_failed", of=what, error=error.str(), attempt=attempt)
        time.sleep(0.2 * attempt)
    return CommitOutcome.FAILED




def committed_with_metadata(consumer: Any, topic: str, partitions: list[int],
                            timeout_s: float) -> dict[int, tuple[int, str | None]]:
    """A group member's committed offsets of ``partitions`` (negative: none) and each commit's metadata."""
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=timeout_s)
    except KafkaException as exc:
        raise to_kmq_error(exc, f"committed offsets of {topic!r}") from exc
    return {tp.partition: (tp.offset, tp.metadata or None) for tp in found}


class GroupOffsets:
    """Consumer groups' committed offsets, each read by a consumer with the group's id that never subscribes (so it
    never joins the group), made on first use per group and kept until ``close``.

    Not the AdminClient's ``list_consumer_group_offsets``: librdkafka (2.16, and its master in 2026) answers an
    offset fetch that meets a coordinator move (NOT_COORDINATOR, as right after a broker failover or a frozen broker
    thaws) by asking the client's own consumer group to find the coordinator again, without checking it has one; an
    AdminClient has none, and the process dies in ``rd_kafka_cgrp_op`` (confluentinc/librdkafka#5040; a worker's
    health check did, in a fault run). A consumer with the group's id has one.
    """

    def __init__(self, config: Config, client_id: str, **settings: Any) -> None:
        self._settings = {**base_settings(config, client_id), "enable.auto.commit": False, **settings}
        self._config = config
        self._timeout_s = config.connect_timeout_ms / 1000
        self._readers: dict[str, KafkaConsumer] = {}

    def __enter__(self) -> GroupOffsets:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def committed(self, group: str, topic: str, timeout_s: float | None = None,
                  partitions: list[int] | None = None) -> dict[int, tuple[int, str | None]]:
        """``group``'s committed offsets on ``topic`` (of ``partitions``, default all), with each commit's metadata;
        partitions it never committed are left out. A KafkaClientError when the broker cannot say."""
        timeout_s = self._timeout_s if timeout_s is None else timeout_s
        if partitions is None:
            partitions = self.partitions(group, topic, timeout_s)
            if partitions is None:
                return {}
        try:
            found = self._reader(group).committed([TopicPartition(topic, p) for p in partitions], timeout=timeout_s)
        except KafkaException as exc:
            raise to_kmq_error(exc, f"committed offsets of group {group!r}") from exc
        errors = [tp.error for tp in found if tp.error is not None]
        if errors:
            raise to_kmq_error(KafkaException(errors[0]), f"committed offsets of group {group!r}")
        return {tp.partition: (tp.offset, tp.metadata or None) for tp in found if tp.offset >= 0}

    def partitions(self, group: str, topic: str, timeout_s: float | None = None) -> list[int] | None:
        """The partitions of ``topic`` (None: no such topic), asked through ``group``'s reader. An unreachable broker,
        refused credentials, a topic the principal may not see: one clear error each."""
        timeout_s = self._timeout_s if timeout_s is None else timeout_s
        described = metadata(self._reader(group), self._config, topic, timeout_s).topics.get(topic)
        error = None if described is None else described.error
        if described is None or (error is not None and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            return None
        if error is not None and error.code() in NOT_AUTHORIZED:  # both resources named: the tenant's ACLs
            raise not_authorized(f"topic {topic!r} (for the committed offsets of consumer group {group!r})", error)
        if error is not None:
            raise to_kmq_error(KafkaException(error), f"metadata of topic {topic!r}")
        return sorted(described.partitions)

    def offsets(self, group: str, topic: str, timeout_s: float | None = None) -> dict[int, int]:
        """``group``'s committed offsets on ``topic``, per partition (none: an empty dict)."""
        return offsets_only(self.committed(group, topic, timeout_s))

    def close(self) -> None:
        readers, self._readers = self._readers, {}
        for reader in readers.values():
            reader.close()

    def _reader(self, group: str) -> KafkaConsumer:
        reader = self._readers.get(group)
        if reader is None:
            reader = self._readers[group] = KafkaConsumer({**self._settings, "group.id": group})
        return reader


def group_offsets(config: Config, group: str, topic: str, partitions: list[int] | None = None) -> dict[int, int]:
    """The offsets ``group`` has committed on ``topic`` (of ``partitions``, default all), per partition (none: an
    empty dict)."""
    with GroupOffsets(config, "kmq-admin", **ONE_READ_SETTINGS) as offsets:
        return offsets_only(offsets.committed(group, topic, partitions=partitions))


def offsets_only(committed: Mapping[int, tuple[int, str | None]]) -> dict[int, int]:
    """``GroupOffsets.committed``'s offsets without their commits' metadata."""
    return {p: offset for p, (offset, _meta) in committed.items()}


def committed_of_groups(config: Config, client_id: str, groups: Iterable[str],
                        topic: str) -> dict[str, dict[int, tuple[int, str | None]]]:
    """Each of ``groups``' committed offsets on ``topic``, as ``GroupOffsets.committed`` reads them: the topic described
    once, then GROUPS_AT_ONCE groups read at a time, each by a reader made for it and closed once read (none is kept:
    a hundred idle clients cost more than making them). The first read that fails is raised (a KafkaClientError), once
    the reads under way are done and their readers closed; the reads not begun are dropped."""
    groups = list(dict.fromkeys(groups))
    if not groups:
        return {}
    with GroupOffsets(config, client_id, **ONE_READ_SETTINGS) as first:
        partitions = first.partitions(groups[0], topic)
    if partitions is None:  # no such topic: nothing committed on it
        return {group: {} for group in groups}

    def read(group: str) -> dict[int, tuple[int, str | None]]:
        with GroupOffsets(config, client_id, **ONE_READ_SETTINGS) as reader:
            return reader.committed(group, topic, partitions=partitions)

    pool = ThreadPoolExecutor(min(GROUPS_AT_ONCE, len(groups)), thread_name_prefix="kmq-offset-readers")
    try:
        futures = {group: pool.submit(read, group) for group in groups}
        done, _ = wait(futures.values(), return_when=FIRST_EXCEPTION)
        for future in done:
            future.result()  # raises the failure, if one stopped the wait
        return {group: future.result() for group, future in futures.items()}
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def group_members(config: Config, group: str, timeout_s: float | None = None) -> int | None:
    """How many members ``group`` has now; None when the broker cannot say within ``timeout_s`` (default: the
    connect timeout)."""
    admin = AdminClient(base_settings(config, "kmq-admin"))
    timeout_s = config.connect_timeout_ms / 1000 if timeout_s is None else timeout_s
    try:
        described = admin.describe_consumer_groups([group])[group].result(timeout=timeout_s)
    except (KafkaException, TimeoutError):
        return None
    return len(described.members or [])
