"""A plain confluent-kafka group member for rebalance tests: ``python -m tests.group_member BOOTSTRAP GROUP TOPIC
[STRATEGY]``.

Joins GROUP on TOPIC (cooperative-sticky unless told), prints ``ASSIGNED p,q,…`` after each assignment, keeps
polling and never commits, so whatever it read is read again by the next owner. Stopped by a signal.
"""

from __future__ import annotations

import sys

from confluent_kafka import Consumer, TopicPartition


def main() -> None:
    bootstrap, group, topic = sys.argv[1:4]
    strategy = sys.argv[4] if len(sys.argv) > 4 else "cooperative-sticky"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "partition.assignment.strategy": strategy,
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    held: set[int] = set()

    def on_assign(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
        held.update(p.partition for p in partitions)
        print("ASSIGNED " + ",".join(map(str, sorted(held))), flush=True)

    def on_revoke(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
        held.difference_update(p.partition for p in partitions)

    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    while True:
        consumer.poll(0.2)


if __name__ == "__main__":
    main()
