"""Synthetic topics at scale for the audit: ``python -m kmq.ops.audit.generate --messages 10000000 …``.

Writes realistic message lives (kmq.ops.audit.synthetic: retries, crashes and tracker copies, give-backs, delay
hops, dead letters, expiry, purges, both marker formats with Go consumers and trackers, an at-most-once queue)
straight to fresh topics through kmq's own encoders, sets each queue's committed offsets and purge time, and writes
the ground truth (per queue: messages per state, counters; optionally per time window) as JSON next to the
config the audit needs. Offsets are predicted as records are produced (one idempotent producer, explicit
partitions, fresh topics) and checked against the topics' end offsets at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)

from kmq._kafka import control
from kmq._kafka.topics import create_topics
from kmq.config import Config
from kmq.ops.audit.synthetic.plans import PlanMaker, QueueSpec
from kmq.ops.audit.synthetic.simulator import Headers, Outcome, Simulator
from kmq.wire import MessageId, now_ms
from kmq.wire.control import PURGE

#: The generated deployment: shares of the traffic per queue.
QUEUES = ((QueueSpec("orders"), 0.40), (QueueSpec("emails", purge=True), 0.30),
          (QueueSpec("legacy", marker_format="kafka-mq-go"), 0.15), (QueueSpec("metrics", at_most_once=True), 0.15))
AT_MOST_ONCE = tuple(q.name for q, _ in QUEUES if q.at_most_once)


class KafkaSink:
    """Produces what the simulator writes, predicting each messages-topic record's offset."""

    def __init__(self, config: Config) -> None:
        self._config = config
        self._topics = config.default_topics
        self._producer = KafkaProducer({
            "bootstrap.servers": config.bootstrap_servers, "enable.idempotence": True, "linger.ms": 100,
            "batch.size": 1_000_000, "compression.type": "lz4", "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 1_048_576, "message.max.bytes": 2_000_000,
            **config.kafka})
        self._next: dict[int, int] = {}
        self.failed = 0
        self.produced = 0

    def _produce(self, topic: str, value: bytes, key: bytes, headers: Any, ts: int,
                 partition: int | None = None) -> None:
        while True:
            try:
                if partition is None:
                    self._producer.produce(topic, value, key, headers=headers or None, timestamp=ts,
                                           on_delivery=self._done)
                else:
                    self._producer.produce(topic, value, key, partition=partition, headers=headers or None,
                                           timestamp=ts, on_delivery=self._done)
                break
            except BufferError:
                self._producer.poll(0.05)
        self.produced += 1
        if self.produced % 10_000 == 0:
            self._producer.poll(0)

    def _done(self, err: Any, _record: Any) -> None:
        if err is not None:
            self.failed += 1

    def message(self, partition: int, key: bytes, value: bytes, headers: Headers, timestamp_ms: int) -> MessageId:
        offset = self._next.get(partition, 0)
        self._next[partition] = offset + 1
        self._produce(self._topics.messages, value, key, headers, timestamp_ms, partition)
        return MessageId(partition, offset)

    def marker(self, partition: int, key: bytes, value: bytes, timestamp_ms: int) -> None:
        self._produce(self._topics.markers, value, key, None, timestamp_ms, partition)

    def dead_letter(self, key: bytes, value: bytes, headers: Headers, timestamp_ms: int) -> None:
        self._produce(self._topics.dead_letters, value, key, headers, timestamp_ms)

    def close(self) -> dict[int, int]:
        """Waits for every record; returns the predicted end offset per messages partition."""
        if self._producer.flush(300) or self.failed:
            raise RuntimeError(f"{self.failed} record(s) failed, {len(self._producer)} not delivered")
        return dict(self._next)


def arrivals(messages: int, hours: float, tick_ms: int, seed: int) -> Iterator[tuple[int, Any]]:
    maker = PlanMaker(seed)
    ticks = max(1, int(hours * 3_600_000 / tick_ms))
    cumulative, total = [], 0.0
    for queue, share in QUEUES:
        total += share
        cumulative.append((total, queue))
    for i in range(messages):
        x = (i * 0.6180339887498949) % 1.0  # spreads queues evenly, deterministically
        queue = next(q for edge, q in cumulative if x < edge)
        yield i * ticks // messages, maker.plan(queue)


def prepare(config: Config, partitions: int, marker_partitions: int) -> None:
    """Fresh topics; the markers topic keeps the producer's timestamps (the simulated times), unlike kmq's."""
    create_topics(config, config.default_topics, partitions=partitions, marker_partitions=marker_partitions)
    admin = AdminClient({"bootstrap.servers": config.bootstrap_servers, **config.kafka})
    resource = ConfigResource(ConfigResource.Type.TOPIC, config.default_topics.markers, incremental_configs=[
        ConfigEntry("message.timestamp.type", "CreateTime", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def _commit(admin: AdminClient, group: str, offsets: list[TopicPartition], timeout_s: float = 60.0) -> None:
    """Sets ``group``'s committed offsets. The answer carries an error per partition instead of raising (on a fresh
    broker: COORDINATOR_LOAD_IN_PROGRESS while __consumer_offsets loads), so each is checked and the request sent
    again until none is left or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, offsets)])[group].result(30)
        failed = [tp for tp in result.topic_partitions or [] if tp.error is not None]
        if not failed:
            return
        if time.monotonic() >= deadline:
            raise RuntimeError(f"cannot commit offsets of group {group}: {failed[0].error}")
        time.sleep(0.5)  # the coordinator is loading: ask again shortly


def finish(config: Config, outcome: Outcome, predicted: dict[int, int]) -> None:
    """Commits each queue's offsets, writes purge times, and checks the predicted offsets."""
    admin = AdminClient({"bootstrap.servers": config.bootstrap_servers, **config.kafka})
    topics = config.default_topics
    for queue, offsets in outcome.committed.items():
        _commit(admin, topics.consumer_group(queue), [TopicPartition(topics.messages, p, o)
                                                      for p, o in sorted(offsets.items())])
    for queue, before_ms in outcome.purged_before.items():
        control.write(config, topics, PURGE + queue, {"before_ms": before_ms})
    meta = admin.list_topics(topics.messages, timeout=30).topics[topics.messages]
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": config.bootstrap_servers, "group.id": "kmq-generate-check"})
    try:
        for p in meta.partitions:
            _, high = consumer.get_watermark_offsets(TopicPartition(topics.messages, p), timeout=30)
            if high != predicted.get(p, 0):
                raise RuntimeError(f"partition {p}: end offset {high}, predicted {predicted.get(p, 0)}")
    finally:
        consumer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kmq.ops.audit.generate", description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--prefix", required=True, help="topics <prefix>.messages, <prefix>.markers, …")
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--hours", type=float, default=24.0, help="simulated time the arrivals spread over")
    parser.add_argument("--tick-ms", type=int, default=1000, help="marker batching period of the consumers")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--marker-partitions", type=int, default=3)
    parser.add_argument("--window", action="append", default=[], metavar="FROM_H:TO_H",
                        help="also count the truth of messages enqueued in these hours of the simulated time")
    parser.add_argument("--truth", type=Path, required=True, help="where to write the ground truth (JSON)")
    args = parser.parse_args(argv)
    config = Config(bootstrap_servers=args.bootstrap_servers, message_topic=f"{args.prefix}.messages",
                    marker_topic=f"{args.prefix}.markers", at_most_once_queues=AT_MOST_ONCE)
    prepare(config, args.partitions, args.marker_partitions)
    started = time.monotonic()
    # The simulated day ends an hour ago: retention keeps it, and "now" (the end plus the final phase) is past.
    start_ms = now_ms() - int(args.hours * 3_600_000) - 3_600_000
    windows = [(start_ms + int(float(a) * 3_600_000), start_ms + int(float(b) * 3_600_000))
               for a, b in (w.split(":") for w in args.window)]
    sink = KafkaSink(config)
    simulator = Simulator(sink, start_ms=start_ms, tick_ms=args.tick_ms, partitions=args.partitions,
                          marker_partitions=args.marker_partitions, seed=args.seed, windows=windows)
    outcome = simulator.run(arrivals(args.messages, args.hours, args.tick_ms, args.seed))
    predicted = sink.close()
    finish(config, outcome, predicted)
    truth = {
        "messages": args.messages, "records_produced": sink.produced, "now_ms": outcome.now_ms,
        "start_ms": start_ms, "seconds": round(time.monotonic() - started, 1),
        "config": {"bootstrap_servers": config.bootstrap_servers, "message_topic": config.default_topics.messages,
                   "marker_topic": config.default_topics.markers, "at_most_once_queues": list(AT_MOST_ONCE)},
        "queues": {q: {"states": dict(outcome.states[q]), "counters": dict(outcome.counters[q])}
                   for q in sorted(outcome.states)},
        "windows": [{"from_ms": a, "to_ms": b, "queues": {q: dict(c) for q, c in sorted(found.items())}}
                    for (a, b), found in zip(windows, outcome.windows, strict=True)],
    }
    args.truth.write_text(json.dumps(truth, indent=2))
    print(f"{args.messages:,} messages, {sink.produced:,} records in {truth['seconds']} s; truth in {args.truth}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
