"""Which messages-topic partition a keyed send goes to: Kafka's own murmur2 partitioner, in Python.

A message group's messages, and every send of one dedup key, must land on one partition so that one consumer of the
queue owns them all (docs/concepts/groups.md, docs/concepts/dedup.md). The record key stays the queue id (consumers
tell their queue's records by it), so kmq picks the partition itself from the *partition key*
``queue ‖ 0x00 ‖ group-or-dedup-id``, with the hash Java clients and librdkafka's ``murmur2`` partitioner use: a
producer in another language that hashes the same bytes the same way picks the same partition. Pure: no Kafka.
"""

from __future__ import annotations

import struct

__all__ = ["murmur2", "partition_for", "partition_key"]

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` of ``data``: a signed 32-bit int, equal to Java's for every input. (Every keyed send
    computes one: the 4-byte words are unpacked in one call, not sliced one by one.)"""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length >> 2
    for k in struct.unpack_from(f"<{whole}I", data) if whole else ():
        k = (k * _M) & _MASK
        k ^= k >> 24
        h = ((h * _M) ^ ((k * _M) & _MASK)) & _MASK
    tail = length & 3
    if tail:
        i = whole << 2
        if tail == 3:
            h ^= data[i + 2] << 16
        if tail >= 2:
            h ^= data[i + 1] << 8
        h ^= data[i]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_key(queue: str, key: str) -> bytes:
    """The bytes a keyed send is partitioned by: the queue, a zero byte, the group or dedup id (UTF-8)."""
    return queue.encode() + b"\x00" + key.encode()


def partition_for(queue: str, key: str, partitions: int) -> int:
    """The messages-topic partition of ``key`` (a group, or a dedup id) in ``queue``, out of ``partitions``:
    ``toPositive(murmur2(partition_key)) % partitions``, as Kafka's default partitioner computes it."""
    if partitions < 1:
        raise ValueError(f"a topic has at least one partition, got {partitions}")
    return (murmur2(partition_key(queue, key)) & 0x7FFFFFFF) % partitions
