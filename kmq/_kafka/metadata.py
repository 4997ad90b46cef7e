"""Metadata queries: a topic's partitions, with one clear error for "broker unreachable" and "no such topic"."""

from __future__ import annotations

from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaException
from confluent_kafka import Producer as KafkaProducer

from kmq._kafka.errors import to_kmq_error
from kmq.config import Config
from kmq.errors import KafkaClientError, TopicError


def topic_partitions(client: KafkaConsumer | KafkaProducer, config: Config, topic: str, role: str) -> list[int]:
    """The partitions of ``topic`` (the ``role`` topic: "message", "dead-letter" …); a clear KafkaClientError when the
    broker does not answer within the connect timeout, a TopicError when the topic does not exist."""
    timeout_s = config.connect_timeout_ms / 1000
    try:
        meta = client.list_topics(topic, timeout=timeout_s)
    except KafkaException as exc:
        raise KafkaClientError(f"cannot reach Kafka at {config.bootstrap_servers} within {timeout_s:.0f}s: "
                               f"{to_kmq_error(exc, 'metadata')}", retriable=True) from exc
    info = meta.topics.get(topic)
    if info is None or info.error is not None:
        raise TopicError(f"{role} topic {topic!r} does not exist: create it with `kmq topics create`")
    return list(info.partitions)


