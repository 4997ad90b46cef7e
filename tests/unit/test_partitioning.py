"""kmq.wire.partitioning: the Python murmur2 equals Kafka's (values from org.apache.kafka.common.utils.Utils)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kmq.wire.partitioning import murmur2, partition_for, partition_key

# Utils.murmur2 and Utils.toPositive(h) % 6 / % 7 from kafka-clients 4.4.0, computed with Java.
JAVA = [
    (b"21", -973932308, 0, 3),
    (b"foobar", -790332482, 0, 0),
    (b"a-little-bit-long-string", -985981536, 2, 1),
    (b"abc", 479470107, 3, 4),
    (b"", 275646681, 3, 2),
    (b"emails\x00account-7", 2075332874, 2, 6),
    (b"q\x00order-991", 456155564, 2, 4),
    ("été\x00x".encode(), 1243590104, 2, 1),
]


@pytest.mark.parametrize(("data", "java_hash", "of_6", "of_7"), JAVA)
def test_murmur2_equals_kafkas_java_partitioner(data: bytes, java_hash: int, of_6: int, of_7: int) -> None:
    assert murmur2(data) == java_hash
    assert (murmur2(data) & 0x7FFFFFFF) % 6 == of_6
    assert (murmur2(data) & 0x7FFFFFFF) % 7 == of_7


def test_a_group_partition_is_the_murmur2_of_queue_zero_group() -> None:
    assert partition_key("emails", "account-7") == b"emails\x00account-7"
    assert partition_for("emails", "account-7", 7) == 6
    assert partition_for("q", "order-991", 6) == 2


@given(st.text(min_size=1, max_size=50), st.text(max_size=50), st.integers(min_value=1, max_value=1000))
def test_a_partition_is_always_within_the_topic(queue: str, key: str, partitions: int) -> None:
    assert 0 <= partition_for(queue, key, partitions) < partitions


def test_a_topic_without_partitions_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one partition"):
        partition_for("q", "g", 0)
