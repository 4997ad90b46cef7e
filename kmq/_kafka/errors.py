"""Kafka error classification: which errors are fatal, which mean "lost the partitions", which pass."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException

from kmq.errors import AuthenticationError, AuthorizationError, KafkaClientError

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


#: What the broker refuses when a principal's ACLs do not allow an operation, and on what kind of resource.
NOT_AUTHORIZED = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "topic", KafkaError.GROUP_AUTHORIZATION_FAILED: "group",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "cluster",
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "transactional id",
}
#: The credentials were refused (librdkafka's local code, and the broker's).
NOT_AUTHENTICATED = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED})


def client_error(err: KafkaError, what: str) -> KafkaClientError:
    if err.code() in NOT_AUTHORIZED:
        return not_authorized(what, err)
    if err.code() in NOT_AUTHENTICATED:
        return not_authenticated(err)
    return KafkaClientError(f"{what}: {err.str()} ({err.name()})", retriable=err.retriable(), code=err.code())


def not_authorized(what: str, err: KafkaError) -> AuthorizationError:
    """``what`` (it names the resource: "topic 'x'", "group 'y'") was refused by the broker's authorizer."""
    return AuthorizationError(f"{what}: not authorized ({err.name()}): the principal's ACLs do not allow it "
                              "(kmq acl plan prints what a tenant needs)", code=err.code())


def not_authenticated(err: KafkaError | str) -> AuthenticationError:
    said = err if isinstance(err, str) else err.str()
    return AuthenticationError(f"authentication failed: {said.split(' (after ')[0]} (check kafka.sasl.username and "
                               "kafka.sasl.password)", code=KafkaError._AUTHENTICATION)


class Credentials:
    """Remembers when the broker last refused a client's credentials (librdkafka says so to ``error_cb`` only, and
    the request that waited for it fails later as a timeout): a metadata wait asks ``refused_since`` to fail at
    once, with the reason. One per process, keyed by bootstrap servers and user name."""

    _lock = threading.Lock()
    _refused: dict[tuple[str, str], tuple[float, str]] = {}

    @classmethod
    def note(cls, bootstrap_servers: str, user: str, err: KafkaError) -> None:
        """Records ``err`` if it says the credentials were refused (a client's own ``error_cb`` calls this)."""
        if err.code() in NOT_AUTHENTICATED:
            with cls._lock:
                cls._refused[bootstrap_servers, user] = (time.monotonic(), err.str())

    @classmethod
    def watcher(cls, bootstrap_servers: str, user: str) -> Callable[[KafkaError], None]:
        """An ``error_cb`` that records refused credentials (and ignores every other error)."""
        return lambda err: cls.note(bootstrap_servers, user, err)

    @classmethod
    def refused_since(cls, bootstrap_servers: str, user: str, since: float) -> str | None:
        """librdkafka's words if the credentials were refused after ``since`` (time.monotonic), else None."""
        with cls._lock:
            at, said = cls._refused.get((bootstrap_servers, user), (-1.0, ""))
        return said if at >= since else None


def to_kmq_error(exc: KafkaException, what: str) -> KafkaClientError:
    err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
    if err is None:
        return KafkaClientError(f"{what}: {exc}")
    return client_error(err, what)


