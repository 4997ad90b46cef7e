"""KafkaGroupAdmin against a broker: how many records wait past a group's committed offsets (a worker's health check
asks it while it holds no partition of its queue)."""

from __future__ import annotations

from confluent_kafka import Consumer as RawConsumer
from confluent_kafka import Producer as RawProducer
from confluent_kafka import TopicPartition

from kmq._kafka.group_view import KafkaGroupAdmin
from tests.helpers import ConfigFactory


def test_waiting_counts_the_records_past_the_committed_offsets_and_all_of_a_partition_never_committed(
        kmq_config: ConfigFactory) -> None:
    config = kmq_config(partitions=3)
    topic, group = config.message_topic, f"{config.consumer_group_prefix}view"
    producer = RawProducer({"bootstrap.servers": config.bootstrap_servers})
    for partition, count in ((0, 5), (1, 3), (2, 4)):
        for _ in range(count):
            producer.produce(topic, b"x", partition=partition)
    assert producer.flush(30) == 0
    committer = RawConsumer({"bootstrap.servers": config.bootstrap_servers, "group.id": group})
    committer.commit(offsets=[TopicPartition(topic, 0, 2), TopicPartition(topic, 1, 3)], asynchronous=False)
    committer.close()

    groups = KafkaGroupAdmin(config)
    assert groups.waiting(group, topic, 10) == (5 - 2) + (3 - 3) + 4
    assert groups.waiting(f"{config.consumer_group_prefix}never", topic, 10) == 12
