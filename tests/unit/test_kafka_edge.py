"""Just-created topics at the Kafka edge: a partition whose leader is not serving yet is waited for, not fatal."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kmq import _kafka
from kmq._kafka import topics
from kmq.config import Config
from kmq.errors import KafkaClientError

TP = TopicPartition("q.control", 0)


class ScriptedOffsets:
    """A consumer whose watermark queries fail with the given error codes, then answer (0, 7)."""

    def __init__(self, *codes: int) -> None:
        self.codes = list(codes)
        self.calls = 0

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        self.calls += 1
        if self.codes:
            raise KafkaException(KafkaError(self.codes.pop(0)))
        return 0, 7


def test_a_partition_just_created_answers_once_its_leader_serves_it() -> None:
    consumer = ScriptedOffsets(KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)
    naps: list[float] = []
    assert _kafka.watermarks(consumer, TP, 5.0, "end offsets", sleep=naps.append) == (0, 7)  # type: ignore[arg-type]
    assert consumer.calls == 3
    assert naps == [0.05, 0.1]


def test_an_error_that_will_not_pass_is_raised_at_once_naming_what_was_asked() -> None:
    consumer = ScriptedOffsets(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaClientError, match=r"end offsets of 'q\.control'.*TOPIC_AUTHORIZATION_FAILED"):
        _kafka.watermarks(consumer, TP, 5.0, "end offsets of 'q.control'", sleep=lambda _s: None)  # type: ignore[arg-type]
    assert consumer.calls == 1


def test_a_leader_that_never_comes_is_an_error_once_the_timeout_is_spent() -> None:
    consumer = ScriptedOffsets(*[KafkaError.NOT_LEADER_FOR_PARTITION] * 1000)
    with pytest.raises(KafkaClientError, match="NOT_LEADER_FOR_PARTITION"):
        _kafka.watermarks(consumer, TP, 0.0, "end offsets", sleep=lambda _s: None)  # type: ignore[arg-type]
    assert consumer.calls == 1


class MetadataSequence:
    """An admin client whose metadata answers lag behind a topic's creation by ``lag`` calls."""

    def __init__(self, lag: int, leaderless: int = 0) -> None:
        self.lag, self.leaderless, self.calls = lag, leaderless, 0

    def list_topics(self, timeout: float) -> SimpleNamespace:
        self.calls += 1
        if self.calls <= self.lag:
            return SimpleNamespace(topics={})
        leader = -1 if self.calls <= self.lag + self.leaderless else 1
        partitions = {0: SimpleNamespace(leader=leader)}
        return SimpleNamespace(topics={"q.messages": SimpleNamespace(error=None, partitions=partitions)})


def test_created_topics_are_waited_for_until_the_broker_serves_them() -> None:
    admin = MetadataSequence(lag=2, leaderless=1)
    config = Config(bootstrap_servers="127.0.0.1:9")
    topics._wait_until_served(admin, ["q.messages"], config, timeout_s=10)  # type: ignore[arg-type]
    assert admin.calls == 4


def test_a_created_topic_that_never_gets_a_leader_is_an_error_naming_it() -> None:
    admin = MetadataSequence(lag=0, leaderless=10**6)
    config = Config(bootstrap_servers="127.0.0.1:9")
    with pytest.raises(KafkaClientError, match=r"'q\.messages' were created but have no leader"):
        topics._wait_until_served(admin, ["q.messages"], config, timeout_s=0.3)  # type: ignore[arg-type]


def test_no_module_fetches_committed_offsets_through_the_admin_client() -> None:
    """librdkafka crashes the process when an AdminClient's offset fetch meets a coordinator move (see
    kmq._kafka.offsets.GroupOffsets): committed offsets are read through a consumer of the group's id."""
    import ast
    from pathlib import Path

    root = Path(_kafka.__file__).resolve().parents[1]
    calls = [f"{path.relative_to(root)}:{node.lineno}" for path in root.rglob("*.py")
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Attribute) and node.attr == "list_consumer_group_offsets"]
    assert calls == []
