"""Many consumer groups' committed offsets against a broker: more groups than are read at once, each read by a reader
of its own (kmq._kafka.offsets.committed_of_groups), as kmq stats and the console's groups round read them."""

from __future__ import annotations

from confluent_kafka import Consumer as RawConsumer
from confluent_kafka import TopicPartition

from kmq._kafka.offsets import GROUPS_AT_ONCE, committed_of_groups
from kmq.console import topics as console_topics
from kmq.ops import stats
from tests.helpers import ConfigFactory

QUEUES = [f"q{i:02d}" for i in range(GROUPS_AT_ONCE + 5)]


def _commit(bootstrap: str, group: str, offsets: list[TopicPartition]) -> None:
    committer = RawConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    committer.commit(offsets=offsets, asynchronous=False)
    committer.close()


def test_every_queues_committed_offsets_are_read_under_its_name_with_more_groups_than_read_at_once(
        kmq_config: ConfigFactory) -> None:
    # Given more queues than are read at once, each having committed its own offsets (the last: none)
    config = kmq_config(partitions=3)
    topics = config.default_topics
    expected = {q: {0: 10 + i, 2: 20 + i} for i, q in enumerate(QUEUES[:-1])}
    for i, (queue, offsets) in enumerate(expected.items()):
        _commit(config.bootstrap_servers, topics.consumer_group(queue),
                [TopicPartition(topics.messages, p, o, metadata=f"m{i}") for p, o in offsets.items()])

    # When kmq stats reads them, Then each queue has its own (a queue that never committed: none)
    assert stats.committed_offsets(config, topics, QUEUES) == expected
    assert stats.committed_offsets(config, topics) == expected  # its groups found by listing them

    # and with each commit's metadata, partitions never committed left out
    groups = [topics.consumer_group(q) for q in QUEUES]
    found = committed_of_groups(config, "test", groups, topics.messages)
    assert found == {**{topics.consumer_group(q): {p: (o, f"m{i}") for p, o in expected[q].items()}
                        for i, q in enumerate(QUEUES[:-1])}, topics.consumer_group(QUEUES[-1]): {}}


def test_the_consoles_redrive_offsets_are_each_queues_redrive_groups(kmq_config: ConfigFactory) -> None:
    config = kmq_config(partitions=2)
    topics = config.default_topics
    for i, queue in enumerate(QUEUES):
        _commit(config.bootstrap_servers, topics.redrive_group(queue), [TopicPartition(topics.dead_letters, 1, i + 1)])

    assert console_topics.redrive_offsets(config, topics, QUEUES) == {q: {1: i + 1} for i, q in enumerate(QUEUES)}


def test_a_topic_that_does_not_exist_has_nothing_committed_on_it(kmq_config: ConfigFactory) -> None:
    config = kmq_config(partitions=1)
    assert committed_of_groups(config, "test", ["a", "b"], f"{config.message_topic}.absent") == {"a": {}, "b": {}}
