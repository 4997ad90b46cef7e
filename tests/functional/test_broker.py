"""The session broker is a real Kafka: topics, produce, consume and group commits work through confluent-kafka."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer

from tests.helpers import TopicFactory, unique

pytestmark = pytest.mark.timeout(60)


def test_a_record_produced_to_a_new_topic_is_consumed_and_committed(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    topic = new_topic("broker", partitions=3)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    for i in range(30):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i)
    assert producer.flush(10) == 0

    group = unique("g")
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: dict[bytes, bytes] = {}
    deadline = time.monotonic() + 30
    while len(got) < 30 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None or msg.error():
            continue
        got[msg.key() or b""] = msg.value() or b""
    consumer.commit(asynchronous=False)
    committed = consumer.committed(consumer.assignment(), timeout=10)
    consumer.close()

    assert got == {b"k%d" % i: b"v%d" % i for i in range(30)}
    assert sum(tp.offset for tp in committed) == 30
