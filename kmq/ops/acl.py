"""The least-privilege ACLs of a tenant: what its producers, workers, trackers and operators need on one topic set.

A named topic set keeps every topic and group under its prefix ``P.`` (docs/concepts/topic-sets.md), so a tenant's
rights are prefixed ACLs (KIP-290) on ``P.``: one per resource type and operation, never a wildcard, never a
cluster-wide right. kmq's producers are idempotent without a transactional id, and since Kafka 3.0 (KIP-679) the
producer id of an idempotent producer is granted to a principal that may write to a topic: no ``IdempotentWrite``
on the cluster. Pure: ``kmq._kafka.acls`` applies a plan through the admin API.
"""

from __future__ import annotations

from dataclasses import dataclass

from kmq.errors import ConfigError
from kmq.topic_sets import TopicSet

PRODUCER, WORKER, TRACKER, OPERATOR = "producer", "worker", "tracker", "operator"
ROLES = (PRODUCER, WORKER, TRACKER, OPERATOR)
TOPIC, GROUP = "TOPIC", "GROUP"
PREFIXED = "PREFIXED"

#: What each role does with the set's topics and groups, and why. READ and WRITE imply DESCRIBE (metadata, offsets,
#: group descriptions) in Kafka's authorizer.
NEEDS: dict[str, tuple[tuple[str, str, str], ...]] = {
    PRODUCER: (
        (TOPIC, "WRITE", "send to the messages topic; its idempotent producer id (KIP-679)"),
        (TOPIC, "DESCRIBE_CONFIGS", "kmq send checks the markers topic's timestamps and the retention"),
    ),
    WORKER: (
        (TOPIC, "READ", "read the messages and control topics"),
        (TOPIC, "WRITE", "write Starts, keep-alives and settles to the markers topic, dead letters, client_id claims"),
        (TOPIC, "DESCRIBE_CONFIGS", "check the markers topic's timestamps and the retention Starts by reference need"),
        (GROUP, "READ", "join the queue's consumer group and commit; one-reader groups of the control follower"),
    ),
    TRACKER: (
        (TOPIC, "READ", "read the markers, read back messages to redeliver, follow purges"),
        (TOPIC, "WRITE", "write copies to the messages topic, Ends and clock probes, dead letters"),
        (TOPIC, "DESCRIBE_CONFIGS", "check the topics before tracking"),
        (GROUP, "READ", "join the set's tracker group and commit; the read-back group"),
    ),
    OPERATOR: (
        (TOPIC, "CREATE", "kmq topics create --set"),
        (TOPIC, "READ", "kmq stats, inspect, dlq list, audit"),
        (TOPIC, "WRITE", "kmq dlq redrive, pause, resume, purge"),
        (TOPIC, "DESCRIBE_CONFIGS", "kmq topics check"),
        (GROUP, "READ", "committed offsets for stats; the redrive group's commits"),
    ),
}


@dataclass(frozen=True, slots=True)
class AclEntry:
    """One ALLOW ACL: ``principal`` may do ``operation`` on the ``resource_type`` resources whose names start with
    ``name`` (PREFIXED), from any host; ``roles`` say who needs it."""

    principal: str
    resource_type: str
    name: str
    operation: str
    roles: tuple[str, ...]
    pattern_type: str = PREFIXED
    host: str = "*"

    def as_dict(self) -> dict[str, object]:
        return {"principal": self.principal, "resource_type": self.resource_type, "pattern_type": self.pattern_type,
                "name": self.name, "operation": self.operation, "permission": "ALLOW", "host": self.host,
                "roles": list(self.roles)}


def plan(topics: TopicSet, principal: str, roles: tuple[str, ...] = ROLES) -> list[AclEntry]:
    """The ACLs ``principal`` needs to act in ``roles`` on the named set ``topics``, one per resource type and
    operation (the roles that need it listed), topics first."""
    if topics.is_default:
        raise ConfigError("topic set", "the default set shares no prefix (its names are kafka-mq-go's): give the "
                                       "tenant a named set in topic_sets, and route its queues there")
    unknown = [r for r in roles if r not in NEEDS]
    if unknown:
        raise ConfigError("role", f"{unknown[0]!r} is not a role ({', '.join(ROLES)})")
    if ":" not in principal:
        raise ConfigError("principal", f"{principal!r} must be TYPE:NAME, e.g. User:{principal}")
    wanted: dict[tuple[str, str], list[str]] = {}
    for role in ROLES:  # in ROLES' order, whatever order they were asked in
        if role in roles:
            for resource_type, operation, _why in NEEDS[role]:
                wanted.setdefault((resource_type, operation), []).append(role)
    order = {TOPIC: 0, GROUP: 1}
    return [AclEntry(principal, resource_type, topics.acl_prefix, operation, tuple(who))
            for (resource_type, operation), who in sorted(wanted.items(), key=lambda kv: (order[kv[0][0]], kv[0][1]))]
