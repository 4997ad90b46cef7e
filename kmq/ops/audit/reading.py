"""What the audit reads, fixed before it reads: per topic the offset range of each partition, the queues' committed
offsets and purge times; then the three topics as DataFrames over exactly those ranges.

The ranges are taken in the order ``kmq stats`` reads (committed offsets and purge times, markers, messages, dead
letters), so nothing is caught half-way: a record committed past was Started before the markers' end, a tracker's
copy is on the messages topic before its End. With ``from_ms`` each range starts at the first offset whose
timestamp is at or after it (Kafka's time index: ``offsets_for_times``), the markers a little earlier (producer and
broker clocks differ): only the needed offsets are read, never a full scan filtered afterwards. Ranges always end
at the end offsets, since a lifecycle that began in the window goes on after it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import TopicPartition
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from kmq._kafka.metadata import topic_partitions
from kmq._kafka.offsets import watermarks
from kmq._kafka.settings import consumer_settings
from kmq.config import Config
from kmq.ops.audit.decoding import MID_SHIFT, decode_batches, schema
from kmq.ops.stats import committed_offsets, purge_times
from kmq.topic_sets import TopicSet

#: Markers are read from this long before the window: a marker's broker time may trail its message's producer time.
MARKER_SKEW_MS = 5 * 60_000


@dataclass(frozen=True, slots=True)
class TopicRange:
    topic: str
    #: Partition -> (first offset to read, end offset).
    offsets: dict[int, tuple[int, int]]

    @property
    def records(self) -> int:
        return sum(end - start for start, end in self.offsets.values())

    def spark_options(self) -> dict[str, str]:
        return {"assign": json.dumps({self.topic: sorted(self.offsets)}),
                "startingOffsets": json.dumps({self.topic: {str(p): s for p, (s, _) in self.offsets.items()}}),
                "endingOffsets": json.dumps({self.topic: {str(p): e for p, (_, e) in self.offsets.items()}})}


@dataclass(frozen=True, slots=True)
class Snapshot:
    markers: TopicRange
    messages: TopicRange
    dead_letters: TopicRange
    committed: dict[str, dict[int, int]] = field(default_factory=dict)
    purged_before: dict[str, int] = field(default_factory=dict)


def snapshot(config: Config, topics: TopicSet, from_ms: int | None) -> Snapshot:
    """The ranges of one topic set to read, committed offsets and purge times, in the order that keeps them
    consistent."""
    committed = committed_offsets(config, topics)
    purges = purge_times(config, topics)
    consumer = KafkaConsumer(consumer_settings(config.replace(client_id=""), topics.private_group("audit"),
                                               "kmq-audit"))
    try:
        markers = _range(consumer, config, topics, topics.markers,
                         None if from_ms is None else from_ms - MARKER_SKEW_MS)
        messages = _range(consumer, config, topics, topics.messages, from_ms)
        dead = _range(consumer, config, topics, topics.dead_letters, from_ms)
    finally:
        consumer.close()
    return Snapshot(markers, messages, dead, committed, purges)


def _range(consumer: KafkaConsumer, config: Config, topics: TopicSet, topic: str, from_ms: int | None) -> TopicRange:
    timeout_s = config.connect_timeout_ms / 1000
    role = {topics.markers: "markers", topics.dead_letters: "dead-letter"}.get(topic, "message")
    partitions = topic_partitions(consumer, config, topic, role)
    bounds = {p: watermarks(consumer, TopicPartition(topic, p), timeout_s, f"offsets of {topic!r}") for p in partitions}
    starts = {p: low for p, (low, _) in bounds.items()}
    if from_ms is not None:
        found = consumer.offsets_for_times([TopicPartition(topic, p, max(0, from_ms)) for p in partitions],
                                           timeout=timeout_s)
        for tp in found:
            low, high = bounds[tp.partition]
            starts[tp.partition] = high if tp.offset < 0 else max(low, tp.offset)  # -1: nothing that late
    return TopicRange(topic, {p: (starts[p], high) for p, (_, high) in bounds.items()})


@dataclass(slots=True)
class Read:
    """The three topics as DataFrames, and what reading them cost (known once an action ran)."""

    markers: DataFrame
    records: DataFrame
    letters: DataFrame
    observed: dict[str, Observation]
    ranges: dict[str, TopicRange]

    def cost(self) -> dict[str, dict[str, Any]]:
        """Per topic, records and bytes (keys, values, headers) read."""
        out: dict[str, dict[str, Any]] = {}
        for name, obs in self.observed.items():
            if not self.ranges[name].records:
                out[name] = {"records": 0, "bytes": 0}  # nothing read: Spark has no metrics to give
                continue
            try:
                out[name] = dict(obs.get)
            except Exception:  # noqa: BLE001 - the figures are a report, never worth failing the audit
                out[name] = {"records": self.ranges[name].records, "bytes": None}
        return out


def read(spark: SparkSession, config: Config, snap: Snapshot, min_partitions: int) -> Read:
    observed = {name: Observation(name) for name in ("markers", "messages", "dead_letters")}

    def load(topic_range: TopicRange, name: str) -> DataFrame:
        reader = (spark.read.format("kafka").option("kafka.bootstrap.servers", config.bootstrap_servers)
                  .option("includeHeaders", "true").option("minPartitions", str(min_partitions)))
        for key, value in {**topic_range.spark_options(), **{f"kafka.{k}": v for k, v in config.kafka.items()}}.items():
            reader = reader.option(key, value)
        header_bytes = F.aggregate(F.coalesce("headers", F.array()), F.lit(0).cast("long"),
                                   lambda acc, h: acc + F.length(h.key) + F.coalesce(F.length(h.value), F.lit(0)))
        return reader.load().observe(observed[name], F.count(F.lit(1)).alias("records"),
                                     F.sum(F.coalesce(F.length("value"), F.lit(0)) + F.coalesce(F.length("key"),
                                                                                                 F.lit(0))
                                           + header_bytes).alias("bytes"))

    markers = (load(snap.markers, "markers")
               .select("value", F.unix_millis("timestamp").alias("ts"), "offset")
               .mapInArrow(decode_batches, schema()))
    records = load(snap.messages, "messages").select(
        F.shiftleft(F.col("partition").cast("long"), MID_SHIFT).bitwiseOR(F.col("offset")).alias("mid"),
        F.col("key").cast("string").alias("queue"),
        F.unix_millis("timestamp").alias("ts"), "headers", "value")
    letters = load(snap.dead_letters, "dead_letters").select("key", F.unix_millis("timestamp").alias("ts"), "headers")
    return Read(markers, records, letters, observed,
                {"markers": snap.markers, "messages": snap.messages, "dead_letters": snap.dead_letters})
