"""Durable topics on a replicated cluster: the replication kmq's topics get, and the check that flags weak ones.

What makes an acknowledged message survive a broker's loss is the topic, not the client: kmq's producers all write
with acks=all and idempotence, so a write is acknowledged once ``min.insync.replicas`` replicas have it. With
replication factor 3 and ``min.insync.replicas`` 2 one broker may fail (or restart) and every partition keeps
taking writes; with ``min.insync.replicas`` 1 an acknowledged write may live on the broker that just died, and
with unclean leader election a replica missing it may become leader. The markers topic must also keep records as
long as a message may stay in flight: up to the 12 h redelivery cap (a longer delay hops through the tracker in
steps of at most that).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigEntry, ConfigResource  # type: ignore[attr-defined]

from kmq._kafka.errors import LEADERSHIP_MOVING, to_kmq_error
from kmq.config import MAX_REDELIVERY_TIMEOUT_MS
from kmq.errors import KafkaClientError

#: The replication factor kmq gives its topics on a cluster of three or more brokers.
TARGET_REPLICATION = 3


def replication_for(brokers: int) -> tuple[int, int]:
    """(replication factor, min.insync.replicas) for a cluster of ``brokers``: 3 and 2 from three brokers on; all of
    them and one less below that (at least 1)."""
    replication = max(1, min(TARGET_REPLICATION, brokers))
    return replication, max(1, replication - 1)


@dataclass(frozen=True, slots=True)
class TopicDurability:
    name: str
    #: The smallest replica count among its partitions.
    replication: int
    min_insync: int
    unclean_election: bool
    #: retention.ms; -1: kept for ever.
    retention_ms: int


def warnings(topics: list[TopicDurability], brokers: int, marker_topic: str) -> list[str]:
    """One line per weakness: what is wrong and what it risks."""
    out = []
    for t in topics:
        if t.replication == 1 and brokers > 1:
            out.append(f"{t.name}: replication factor 1 on a {brokers}-broker cluster: the loss of one broker loses "
                       "its partitions (recreate it with replication factor 3)")
        if t.min_insync > t.replication:
            out.append(f"{t.name}: min.insync.replicas={t.min_insync} is more than its replication factor "
                       f"{t.replication}: every acks=all write fails (NOT_ENOUGH_REPLICAS)")
        if t.replication >= TARGET_REPLICATION and t.min_insync <= 1:
            out.append(f"{t.name}: min.insync.replicas={t.min_insync} with replication factor {t.replication}: an "
                       "acknowledged write may exist on one broker only (set min.insync.replicas=2)")
        if t.unclean_election:
            out.append(f"{t.name}: unclean.leader.election.enable=true: a failover may elect a replica that lacks "
                       "acknowledged writes (set it to false)")
        if t.name == marker_topic and 0 <= t.retention_ms < MAX_REDELIVERY_TIMEOUT_MS:
            out.append(f"{t.name}: retention.ms={t.retention_ms} is shorter than the 12 h redelivery cap: a Start "
                       "deleted while its message is in flight can no longer be redelivered (set retention.ms to "
                       f"at least {MAX_REDELIVERY_TIMEOUT_MS}, longer than your longest job)")
    return out


def describe(admin: AdminClient, names: list[str], timeout_s: float) -> list[TopicDurability]:
    """Reads the replication and configs of existing topics ``names``."""
    meta = admin.list_topics(timeout=timeout_s)
    resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in names]
    configs = describe_configs(admin, resources, timeout_s)
    out = []
    for name, resource in zip(names, resources, strict=True):
        partitions = meta.topics[name].partitions.values()
        entries = configs[resource]
        out.append(TopicDurability(
            name, min((len(p.replicas) for p in partitions), default=0), int(_value(entries, "min.insync.replicas")),
            _value(entries, "unclean.leader.election.enable") == "true", int(_value(entries, "retention.ms"))))
    return out


def _value(entries: dict[str, ConfigEntry], key: str) -> str:
    entry = entries.get(key)
    if entry is None or entry.value is None:
        raise KafkaClientError(f"the broker did not describe topic config {key!r}")
    return str(entry.value)


def describe_configs(admin: AdminClient, resources: list[ConfigResource],
                     timeout_s: float) -> dict[ConfigResource, dict[str, ConfigEntry]]:
    """describe_configs, retried while a broker does not know a topic yet: on a cluster the request goes to any
    broker, and one that has not applied a topic's creation (a moment after it, or right after a restart) answers
    UNKNOWN_TOPIC_OR_PART."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            futures = admin.describe_configs(resources, request_timeout=timeout_s)
            return {r: f.result(timeout=max(0.1, deadline - time.monotonic())) for r, f in futures.items()}
        except KafkaException as exc:
            code = exc.args[0].code() if exc.args else None
            if code not in LEADERSHIP_MOVING or time.monotonic() >= deadline:
                raise to_kmq_error(exc, "cannot read topic configs") from exc
        except TimeoutError:
            raise KafkaClientError(f"topic configs not answered within {timeout_s:.0f}s", retriable=True) from None
        time.sleep(0.2)
