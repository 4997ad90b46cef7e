"""Kafka error classification: which errors are fatal, which mean "lost the partitions", which pass."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from kmq.errors import KafkaClientError

# Commit errors that mean this member no longer owns its partitions: retrying cannot succeed.
OWNERSHIP_LOST = frozenset({
    KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID, KafkaError.REBALANCE_IN_PROGRESS,
    KafkaError.FENCED_INSTANCE_ID, getattr(KafkaError, "STALE_MEMBER_EPOCH", -10_000),
    KafkaError._ASSIGNMENT_LOST, KafkaError._STATE,
})

# Offset-query errors of a partition whose leader is moving or not yet serving (a topic created a moment ago gives
# NOT_LEADER_FOR_PARTITION until its broker has loaded it; a query sent to a broker that just died ends with
# _TRANSPORT or _DESTROY_BROKER until the cluster has moved its leaderships): they pass, so a one-shot query
# retries them.
LEADERSHIP_MOVING = frozenset({
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError._TRANSPORT, KafkaError._DESTROY_BROKER,
})


def is_fatal(err: KafkaError) -> bool:
    # librdkafka reports a fatal error (e.g. a fenced static member) as an event whose code is _FATAL.
    return bool(err.fatal()) or err.code() == KafkaError._FATAL


def client_error(err: KafkaError, what: str) -> KafkaClientError:
    return KafkaClientError(f"{what}: {err.str()} ({err.name()})", retriable=err.retriable(), code=err.code())


def to_kmq_error(exc: KafkaException, what: str) -> KafkaClientError:
    err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    if err is None:
        return KafkaClientError(f"{what}: {exc}")
    return client_error(err, what)


