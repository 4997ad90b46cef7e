"""Metadata queries with one clear error each for "broker unreachable", "credentials refused", "not authorized" and
"no such topic"."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from kmq._kafka.errors import NOT_AUTHORIZED, Credentials, not_authenticated, not_authorized, to_kmq_error
from kmq.config import Config
from kmq.errors import KafkaClientError, TopicError
from kmq.metrics_http import MetadataClient

#: One metadata request's wait within a longer one: refused credentials are noticed this soon.
SLICE_S = 0.5


def metadata(client: MetadataClient, config: Config, topic: str | None = None,
             timeout_s: float | None = None) -> Any:
    """The cluster's metadata (``topic``'s only, if named). Raises AuthenticationError as soon as the broker
    refuses the credentials, and a KafkaClientError naming the broker when it does not answer in ``timeout_s``
    (default the connect timeout)."""
    timeout_s = config.connect_timeout_ms / 1000 if timeout_s is None else timeout_s
    started = time.monotonic()
    deadline = started + timeout_s
    while True:
        try:
            wait_s = max(0.05, min(SLICE_S, deadline - time.monotonic()))
            return client.list_topics(timeout=wait_s) if topic is None else client.list_topics(topic, timeout=wait_s)
        except KafkaException as exc:
            # error_cb runs in poll only, and says whether the credentials were refused. A consumer is asked before it
            # reads anything (never while assigned: a poll would take a record).
            if isinstance(client, AdminClient) or (isinstance(client, KafkaConsumer) and not client.assignment()):
                client.poll(0)
            refused = Credentials.refused_since(config.bootstrap_servers, config.kafka.get("sasl.username", ""),
                                                started)
            if refused is not None:
                raise not_authenticated(refused) from exc
            if time.monotonic() >= deadline:
                raise KafkaClientError(f"cannot reach Kafka at {config.bootstrap_servers} within {timeout_s:.0f}s: "
                                       f"{to_kmq_error(exc, 'metadata')}", retriable=True) from exc


def topic_partitions(client: MetadataClient, config: Config, topic: str, role: str) -> list[int]:
    """The partitions of ``topic`` (the ``role`` topic: "message", "dead-letter" …); a clear KafkaClientError when the
    broker does not answer within the connect timeout, a TopicError when the topic does not exist, an
    AuthorizationError when the principal may not see it."""
    info = metadata(client, config, topic).topics.get(topic)
    check_topic(info, topic, role)
    return list(info.partitions)


def check_topic(info: Any, topic: str, role: str) -> None:
    """Raises what is wrong with a topic's metadata (``info``, None when absent): not authorized, or missing."""
    error = None if info is None else info.error
    if error is not None and error.code() in NOT_AUTHORIZED:
        raise not_authorized(f"{role} topic {topic!r}", error)
    if info is None or error is not None:
        code = f" ({error.name()})" if error is not None and error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART else ""
        raise TopicError(f"{role} topic {topic!r} does not exist{code}: create it with `kmq topics create`")
