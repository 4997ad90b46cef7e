"""Per-queue figures from the lifecycle DataFrame: the vocabulary's states and counters, the duplicate figures, the
delivery-count histogram and wait/processing percentiles. Aggregates only reach the driver."""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from kmq.ops.lifecycle import BEFORE_WINDOW, IN_WINDOW
from kmq.wire import vocabulary as v

PERCENTILES = (0.5, 0.95, 0.99)


def _sum(condition: Column) -> Column:
    return F.sum(F.when(condition, 1).otherwise(0))


def summarise(life: DataFrame) -> dict[str, dict[str, Any]]:
    """Queue -> figures (names from kmq.wire.vocabulary, plus ``lost``, ``before_window``, the histogram and the
    percentiles, which are None when nothing was measured)."""
    pct = F.array(*[F.lit(p) for p in PERCENTILES])
    window = life.filter(F.col("scope") == IN_WINDOW)
    rows = window.groupBy("queue").agg(
        *[_sum(F.col("state") == s).alias(s) for s in v.STATES],
        *[F.sum(c).alias(c) for c in v.COUNTERS],
        F.sum(F.greatest(F.col("acks") - 1, F.lit(0))).alias(v.DUPLICATE_ACKS),
        _sum(F.col("acks") > 1).alias(v.ACKED_MORE_THAN_ONCE),
        _sum(F.col(v.DELIVERED) > 1).alias(v.DELIVERED_MORE_THAN_ONCE),
        F.percentile_approx(F.col("first_start_ms") - F.col("enqueued_ms"), pct).alias("wait_ms_p50_p95_p99"),
        F.percentile_approx("processing_ms", pct).alias("processing_ms_p50_p95_p99"),
    ).collect()
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        data = row.asDict()
        data[v.LOST] = sum(data[s] for s in v.LOST_STATES)
        data["before_window"] = 0
        out[data.pop("queue")] = data
    for row in life.filter(F.col("scope") == BEFORE_WINDOW).groupBy("queue").count().collect():
        out.setdefault(row["queue"], {"before_window": 0})["before_window"] = row["count"]
    for row in window.groupBy("queue", "max_delivery_count").count().collect():
        if row["max_delivery_count"]:
            out[row["queue"]].setdefault("delivery_count_histogram", {})[str(row["max_delivery_count"])] = row["count"]
    return out


def acked_per_minute(life: DataFrame) -> list[dict[str, Any]]:
    """(queue, minute since the epoch, messages first acked in it): the chart's right panel."""
    return [r.asDict() for r in life.filter((F.col("scope") == IN_WINDOW) & F.col("acked_ms").isNotNull())
            .groupBy("queue", (F.col("acked_ms") / 60_000).cast("long").alias("minute")).count()
            .orderBy("queue", "minute").collect()]
