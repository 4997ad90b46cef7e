"""The kmq topics: create them with the settings kmq relies on (replicated as the cluster allows, see
``durability``), or check existing ones."""

from __future__ import annotations

import time
from dataclasses import dataclass

import structlog
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic  # type: ignore[attr-defined]

from kmq._kafka import durability
from kmq._kafka.errors import to_kmq_error
from kmq._kafka.metadata import check_topic, metadata
from kmq._kafka.retention import check_retention
from kmq._kafka.settings import base_settings
from kmq.config import Config
from kmq.errors import KafkaClientError, TopicError
from kmq.topic_sets import TopicSet

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

# The tracker's deadlines run on broker time: CreateTime would let one skewed host's clock fire everyone's.
MARKER_TOPIC_CONFIG = {"message.timestamp.type": "LogAppendTime"}


@dataclass(frozen=True, slots=True)
class TopicStatus:
    name: str
    #: What the topic has now (an existing topic keeps its own count).
    partitions: int
    created: bool
    requested: int
    replication: int = 0
    min_insync: int = 0


def _admin(config: Config) -> AdminClient:
    return AdminClient(base_settings(config, "kmq-admin"))


def create_topics(config: Config, topics: TopicSet, *, partitions: int = 6, marker_partitions: int = 3,
                  replication_factor: int | None = None, timeout_s: float = 30.0) -> list[TopicStatus]:
    """Creates the messages, markers (LogAppendTime), dead-letter and control topics; existing ones are checked.

    ``replication_factor`` None: from the cluster, 3 where it has three or more brokers (``durability``). Every topic
    created gets ``min.insync.replicas`` = replication factor - 1 (at least 1) and unclean leader election off."""
    for name, value in (("partitions", partitions), ("marker_partitions", marker_partitions),
                        ("replication_factor", replication_factor or 1)):
        if value < 1:
            raise TopicError(f"{name} must be at least 1, got {value}")
    admin = _admin(config)
    if replication_factor is None:
        replication_factor, min_insync = durability.replication_for(_brokers(admin, config, timeout_s))
    else:
        min_insync = max(1, replication_factor - 1)
    durable = {"min.insync.replicas": str(min_insync), "unclean.leader.election.enable": "false"}
    wanted = [
        NewTopic(topics.messages, partitions, replication_factor, config=dict(durable)),
        NewTopic(topics.markers, marker_partitions, replication_factor,
                 config={**MARKER_TOPIC_CONFIG, **durable}),
        NewTopic(topics.dead_letters, marker_partitions, replication_factor, config=dict(durable)),
        # Pause and purge records: one partition, compacted (the latest per queue is what counts).
        NewTopic(topics.control, 1, replication_factor,
                 config={"cleanup.policy": "compact", **durable}),
    ]
    created_now: dict[str, bool] = {}
    for topic, future in admin.create_topics(wanted, operation_timeout=timeout_s,
                                             request_timeout=timeout_s).items():
        try:
            future.result(timeout=timeout_s)
            created = True
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise to_kmq_error(exc, f"cannot create topic {topic!r}") from exc
            created = False
        except TimeoutError:
            raise KafkaClientError(f"cannot reach Kafka at {config.bootstrap_servers} within {timeout_s}s",
                                   retriable=True) from None
        log.info("topic_ready", topic=topic, created=created)
        created_now[topic] = created
    _wait_until_served(admin, [t.topic for t in wanted], config, timeout_s)
    actual = check_topics(config, topics, timeout_s=timeout_s, admin=admin)
    replicated = {d.name: d for d in durability.describe(admin, [t.topic for t in wanted], timeout_s)}
    return [TopicStatus(t.topic, actual.get(t.topic, t.num_partitions), created_now[t.topic], t.num_partitions,
                        replicated[t.topic].replication, replicated[t.topic].min_insync) for t in wanted]


def _brokers(admin: AdminClient, config: Config, timeout_s: float) -> int:
    return len(metadata(admin, config, timeout_s=timeout_s).brokers)


def durability_warnings(config: Config, topics: TopicSet, *, timeout_s: float = 30.0,
                        admin: AdminClient | None = None) -> list[str]:
    """What makes the existing kmq topics less durable than kmq needs on this cluster, one line each."""
    admin = admin or _admin(config)
    names = [topics.messages, topics.markers, topics.dead_letters]
    if topics.control in metadata(admin, config, timeout_s=timeout_s).topics:
        names.append(topics.control)
    return durability.warnings(durability.describe(admin, names, timeout_s), _brokers(admin, config, timeout_s),
                               topics.markers)


def _wait_until_served(admin: AdminClient, topics: list[str], config: Config, timeout_s: float) -> None:
    """Waits until the broker's metadata lists every topic with a leader for each partition: a topic's creation
    is acknowledged by the controller before the brokers serve it, and a client that asks at once (a consumer or
    tracker started right after `kmq topics create`) would be told it does not exist."""
    deadline = time.monotonic() + timeout_s
    while True:
        meta = metadata(admin, config, timeout_s=max(0.1, deadline - time.monotonic()))
        waiting = [t for t in topics if t not in meta.topics or meta.topics[t].error is not None
                   or any(p.leader < 0 for p in meta.topics[t].partitions.values())]
        if not waiting:
            return
        if time.monotonic() >= deadline:
            raise KafkaClientError(f"topics {', '.join(map(repr, waiting))} were created but have no leader "
                                   f"after {timeout_s:.0f}s", retriable=True)
        time.sleep(0.1)


def check_topics(config: Config, topics: TopicSet, *, timeout_s: float = 30.0, admin: AdminClient | None = None,
                 strict_retention: bool = False) -> dict[str, int]:
    """Verifies the topics exist and the markers topic uses LogAppendTime, and checks their retention
    (kmq._kafka.retention: an error with ``strict_retention``, else logged); returns partitions per topic."""
    admin = admin or _admin(config)
    meta = metadata(admin, config, timeout_s=timeout_s)
    found: dict[str, int] = {}
    for topic, role in ((topics.messages, "messages"), (topics.markers, "markers"),
                        (topics.dead_letters, "dead-letter")):
        info = meta.topics.get(topic)
        if info is None:  # a listing leaves out the topics the principal may not see: ask for it by name
            info = metadata(admin, config, topic, timeout_s).topics.get(topic)
        check_topic(info, topic, role)
        found[topic] = len(info.partitions)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topics.markers)
    described = durability.describe_configs(admin, [resource], timeout_s)[resource]
    ts_type = described["message.timestamp.type"].value
    if ts_type != "LogAppendTime":
        raise TopicError(f"markers topic {topics.markers!r} has message.timestamp.type={ts_type}; "
                         "kmq needs LogAppendTime (kafka-configs --alter --add-config "
                         "message.timestamp.type=LogAppendTime)")
    check_retention(admin, config, topics, timeout_s, strict=strict_retention)
    return found
