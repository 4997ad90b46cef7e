"""The audit of message groups: from the markers, did every group's messages go out in the order they were written,
and how long did each group's messages take (docs/concepts/groups.md)?

An **order violation** is a Start of a grouped record after a Start of a later record of the same group (a message
handed out again after a later one of its group went out: what groups promise never happens with
``group_concurrency`` 1). A queue's markers are in one partition, so their order is the log's (``seq``); a group's
records are in one messages partition, so their ids compare as offsets. **Latency** is from a message's enqueue to
its first (not late) ack, per group as percentiles. Aggregates only reach the driver.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from kmq import wire
from kmq.ops.audit.classification import _header, without_late_settles
from kmq.wire.vocabulary import MarkerEvent as E

PERCENTILES = (0.5, 0.95, 0.99)
#: The slowest groups a queue's summary names.
SLOWEST = 10


def per_group(markers: DataFrame, raw_records: DataFrame) -> DataFrame:
    """One row per (queue, group): messages, acked, order violations, latency percentiles (ms)."""
    grouped = (raw_records.select("mid", F.coalesce("queue", F.lit("")).alias("queue"), "ts",
                                  _header("headers", wire.HEADER_GROUP).alias("group"))
               .filter(F.col("group").isNotNull()))
    owned = without_late_settles(markers.filter(F.col("owner").isNotNull()))
    starts = (owned.filter(F.col("event") == int(E.START)).select("mid", "seq")
              .join(grouped.select("mid", "queue", "group"), "mid"))
    before = Window.partitionBy("queue", "group").orderBy("seq").rowsBetween(Window.unboundedPreceding, -1)
    violations = (starts.withColumn("latest", F.max("mid").over(before))
                  .groupBy("queue", "group")
                  .agg(F.sum(F.when(F.col("mid") < F.col("latest"), 1).otherwise(0)).alias("order_violations")))
    acks = owned.filter(F.col("event") == int(E.ACK)).groupBy("mid").agg(F.min("ts").alias("acked_ms"))
    pct = F.array(*[F.lit(p) for p in PERCENTILES])
    latency = (grouped.join(acks, "mid", "left").groupBy("queue", "group").agg(
        F.count("*").alias("messages"), F.count("acked_ms").alias("acked"),
        F.percentile_approx(F.col("acked_ms") - F.col("ts"), pct).alias("latency_ms_p50_p95_p99")))
    return (latency.join(violations, ["queue", "group"], "left")
            .withColumn("order_violations", F.coalesce("order_violations", F.lit(0))))


def summarise(groups: DataFrame) -> dict[str, dict[str, Any]]:
    """Queue -> its groups' figures: how many, order violations (0 expected), and the slowest groups by p99."""
    out: dict[str, dict[str, Any]] = {}
    for row in groups.groupBy("queue").agg(
            F.count("*").alias("groups"), F.sum("messages").alias("messages"),
            F.sum("order_violations").alias("order_violations"),
            F.percentile_approx(F.col("latency_ms_p50_p95_p99")[0], F.array(*[F.lit(p) for p in PERCENTILES]))
            .alias("group_p50_latency_ms_p50_p95_p99")).collect():
        data = row.asDict()
        out[data.pop("queue")] = data
    slow = Window.partitionBy("queue").orderBy(F.col("latency_ms_p50_p95_p99")[2].desc_nulls_last())
    for row in (groups.withColumn("rank", F.row_number().over(slow)).filter(F.col("rank") <= SLOWEST)
                .orderBy("queue", "rank").collect()):
        out[row["queue"]].setdefault("slowest_groups", []).append(
            {"group": row["group"], "messages": row["messages"], "order_violations": row["order_violations"],
             "latency_ms_p50_p95_p99": row["latency_ms_p50_p95_p99"]})
    return out
