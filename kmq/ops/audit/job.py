"""The lifecycle audit as a Spark job: reads the messages, markers and dead-letter topics with Spark's Kafka
source, rebuilds every message's lifecycle per queue, and reports what was acked, redelivered, dead-lettered,
still in flight, overdue, waiting, or lost. Partition-parallel; only per-queue aggregates reach the driver.

Statuses of a message (keyed by its first delivery's id, so redelivered copies fold into the original):
acked, rejected, dead_lettered (terminal); in_flight (an open delivery, deadline ahead); waiting (its newest
copy is on the messages topic, not yet started); overdue (an open delivery past its deadline with no
redelivery: nobody will bring it back); lost = overdue + enqueued copies that vanished (ended as redelivered
but no copy exists).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from kmq import wire
from kmq.config import Config
from kmq.errors import KmqError
from kmq.ops.audit import SPARK_VERSION, connector_jars

STATUSES = ("acked", "expired", "purged", "rejected", "dead_lettered", "ended_by_go", "delayed", "in_flight",
            "waiting", "overdue", "orphaned")
#: ``end_reason`` of a bare End (kafka-mq-go's: a Go consumer's ack or a Go tracker's redelivery; kmq.ops.lifecycle).
GO_END = "GO_END"

MARKER_SCHEMA = T.StructType([
    T.StructField("queue", T.StringType()), T.StructField("kind", T.StringType()),
    T.StructField("mid", T.StringType()), T.StructField("first_id", T.StringType()),
    T.StructField("redeliver_after_ms", T.LongType()), T.StructField("delivery_count", T.IntegerType()),
    T.StructField("end_reason", T.StringType()), T.StructField("reason", T.StringType()),
    T.StructField("ts", T.LongType()), T.StructField("malformed", T.BooleanType()),
])


@dataclass(frozen=True, slots=True)
class AuditOptions:
    queues: tuple[str, ...] = ()
    from_ms: int | None = None
    to_ms: int | None = None
    master: str = "local[2]"
    out_dir: Path = Path("audit-out")
    now_ms: int | None = None  # the audit's "now" for deadlines; default: the newest marker's timestamp


def session(master: str) -> SparkSession:
    import pyspark

    if pyspark.__version__ != SPARK_VERSION:
        raise KmqError(f"pyspark {pyspark.__version__} is installed; kmq audit needs {SPARK_VERSION}, the version "
                       "of Spark's Kafka source it uses (pip install 'kmq[spark]')")
    # Executors must run the same interpreter, with kmq importable.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    jars = ",".join(str(p) for p in connector_jars())
    return (SparkSession.builder.master(master).appName("kmq-audit")
            .config("spark.jars", jars)
            .config("spark.driver.memory", os.environ.get("KMQ_AUDIT_DRIVER_MEMORY", "1g"))
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "8")
            .getOrCreate())


def _read(spark: SparkSession, config: Config, topic: str) -> DataFrame:
    reader = (spark.read.format("kafka").option("kafka.bootstrap.servers", config.bootstrap_servers)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("endingOffsets", "latest").option("includeHeaders", "true"))
    for key, value in config.kafka.items():
        reader = reader.option(f"kafka.{key}", value)
    return reader.load()


def _decode_batches(batches: Iterator[Any]) -> Iterator[Any]:
    """Runs on the executors: protobuf markers → rows; undecodable ones are flagged, never fatal."""
    import pandas as pd

    from kmq.errors import MarkerDecodeError
    from kmq.ops.lifecycle import is_kafka_mq_go_end
    from kmq.wire.marker_batch import decode_record

    for batch in batches:
        rows: list[tuple[object, ...]] = []
        for value, ts in zip(batch["value"], batch["ts"], strict=True):
            try:
                markers = decode_record(bytes(value) if value is not None else None)
            except MarkerDecodeError:
                rows.append((None, None, None, None, 0, 0, None, None, int(ts), True))
                continue
            rows.extend((m.queue, m.type.name, str(m.message_id), str(m.first_id), m.redeliver_after_ms,
                         m.delivery_count or 1, GO_END if is_kafka_mq_go_end(m) else m.end_reason.name,
                         m.reason, int(ts), False) for m in markers)
        yield pd.DataFrame(rows, columns=MARKER_SCHEMA.fieldNames())


def _ms(col: str) -> Any:
    return (F.col(col).cast("double") * 1000).cast("long")


def _header(name: str) -> Any:
    """A header's value, null when the record lacks it (try_element_at: [0] fails on an empty match in ANSI mode,
    which every record with other headers but not this one is)."""
    return F.expr(f"CAST(try_element_at(filter(headers, h -> h.key = '{name}'), 1).value AS STRING)")


def lifecycles(spark: SparkSession, config: Config, options: AuditOptions) -> tuple[DataFrame, int, int]:
    """Per-message lifecycle rows, the number of malformed markers, and the audit's "now" in ms."""
    raw_markers = _read(spark, config, config.marker_topic).select("value", _ms("timestamp").alias("ts"))
    markers = raw_markers.mapInPandas(_decode_batches, MARKER_SCHEMA).cache()
    malformed = markers.filter("malformed").count()
    markers = markers.filter("NOT malformed")
    newest = markers.agg(F.max("ts")).first()
    now_ms = options.now_ms or (newest[0] if newest is not None and newest[0] is not None else 0)

    records = _read(spark, config, config.message_topic).select(
        F.col("key").cast("string").alias("queue"),
        F.concat_ws(":", "partition", "offset").alias("mid"),
        _ms("timestamp").alias("enqueued_ts"),
        _header(wire.HEADER_FIRST_ID).alias("first_id_header"),
        F.sha2(F.col("value"), 256).alias("content"),
    )
    go_copies = _go_copies(records, markers)
    records = (records.join(go_copies.select(F.col("copy_mid").alias("mid"), "linked_first_id"), "mid", "left")
               .withColumn("first_id", F.coalesce("linked_first_id", "first_id_header", "mid"))
               # A linked copy is not a new message: it has no enqueue time of its own.
               .withColumn("first_id_header", F.coalesce("first_id_header", "linked_first_id")))
    copies = records.groupBy("queue", "first_id").agg(
        F.min(F.when(F.col("first_id_header").isNull(), F.col("enqueued_ts"))).alias("enqueued_ts"),
        F.count("*").alias("copies"), F.collect_set("mid").alias("copy_ids"))

    starts = markers.filter("kind = 'START'").groupBy("mid").agg(
        F.first("queue").alias("queue"), F.first("first_id").alias("first_id"), F.min("ts").alias("start_ts"),
        F.max("delivery_count").alias("delivery_count"))
    last_beat = markers.filter("kind != 'END'").groupBy("mid").agg(
        F.max(F.col("ts") + F.col("redeliver_after_ms")).alias("deadline_ts"),
        F.sum(F.when(F.col("reason") == wire.RELEASE_REASON, 1).otherwise(0)).alias("released"),
        F.max((F.col("reason") == wire.RETURN_REASON).cast("int")).alias("returned"),
        F.max((F.col("reason") == wire.DELAY_REASON).cast("int")).alias("delayed"))

    def ended(reason: str) -> Any:
        return F.col("end_reason") == reason

    # Every End counts: a tracker's REDELIVERED End and the worker's late ACKED End of one delivery (the documented
    # race) are both facts; keeping only the first would hide that the message was processed twice.
    ends = markers.filter("kind = 'END'").groupBy("mid").agg(
        F.sum(ended("ACKED").cast("int")).alias("delivery_acks"),
        F.min(F.when(ended("ACKED"), F.col("ts"))).alias("ack_ts"),
        F.max((ended("REJECTED") & ~F.col("reason").isin(wire.EXPIRED_REASON, wire.PURGED_REASON)).cast("int"))
        .alias("delivery_rejected"),
        F.max((ended("REJECTED") & (F.col("reason") == wire.PURGED_REASON)).cast("int")).alias("delivery_purged"),
        F.max((ended("REJECTED") & (F.col("reason") == wire.EXPIRED_REASON)).cast("int")).alias("delivery_expired"),
        F.max(ended("DEAD_LETTERED").cast("int")).alias("delivery_dead"),
        F.sum(ended("REDELIVERED").cast("int")).alias("delivery_redelivered"),
        F.sum(ended(GO_END).cast("int")).alias("delivery_go_ends"),
        F.min("ts").alias("end_ts"))
    linked = go_copies.select(F.col("copy_mid").alias("mid"), "linked_first_id")
    go_redelivered = go_copies.select(F.col("original_mid").alias("mid"), F.lit(1).alias("go_redelivered"))
    deliveries = (starts.join(last_beat, "mid", "left").join(ends, "mid", "left").join(linked, "mid", "left")
                  .withColumn("first_id", F.coalesce("linked_first_id", "first_id"))
                  .join(go_redelivered, "mid", "left")
                  .withColumn("go_redelivered", F.coalesce("go_redelivered", F.lit(0)))
                  # A bare End with no copy: a Go consumer's ack, or a Go redelivery not read yet.
                  .withColumn("go_end", ((F.col("delivery_go_ends") > 0) & (F.col("go_redelivered") == 0))
                              .cast("int")))

    dead = _read(spark, config, config.dlq_topic).select(
        F.col("key").cast("string").alias("queue"), _header(wire.HEADER_FIRST_ID).alias("first_id")
    ).withColumn("in_dlq", F.lit(True)).dropDuplicates(["queue", "first_id"])

    per_message = deliveries.groupBy("queue", "first_id").agg(
        F.count("*").alias("deliveries"),
        # Deliveries a handler saw: a delivery given back unprocessed (consumer close, worker shutdown) did not.
        F.sum(1 - F.greatest(F.coalesce(F.col("returned"), F.lit(0)), F.coalesce(F.col("delayed"), F.lit(0))))
        .alias("handler_deliveries"),
        # Read before its due time, and waiting for it (its hop's deadline is the due time).
        F.sum(F.when(F.col("end_ts").isNull() & (F.col("delayed") == 1), 1).otherwise(0)).alias("open_delayed"),
        F.max("delivery_count").alias("max_delivery_count"),
        F.min("start_ts").alias("first_start_ts"),
        F.sum(F.coalesce(F.col("delivery_acks"), F.lit(0))).alias("acks"),
        # From the ACKED End of the same delivery, whatever other End it also has.
        F.max(F.col("ack_ts") - F.col("start_ts")).alias("processing_ms"),
        F.max("ack_ts").alias("acked_ts"),
        F.max("delivery_rejected").alias("rejected"),
        F.max("delivery_expired").alias("expired_end"),
        F.max("delivery_purged").alias("purged_end"),
        F.max("delivery_dead").alias("dead_by_tracker"),
        F.sum(F.coalesce("delivery_redelivered", F.lit(0)) + F.col("go_redelivered")).alias("redelivered"),
        F.sum("go_redelivered").alias("go_redelivered"),
        F.sum("go_end").alias("go_ends"),
        F.sum("released").alias("released"),
        F.sum(F.when(F.col("end_ts").isNull() & (F.col("deadline_ts") >= now_ms), 1).otherwise(0))
        .alias("open_alive"),
        F.sum(F.when(F.col("end_ts").isNull() & (F.col("deadline_ts") < now_ms), 1).otherwise(0))
        .alias("open_overdue"),
    )
    life = (copies.join(per_message, ["queue", "first_id"], "full_outer").join(dead, ["queue", "first_id"], "left")
            .fillna({"deliveries": 0, "handler_deliveries": 0, "acks": 0, "redelivered": 0, "released": 0,
                     "open_alive": 0, "go_redelivered": 0, "go_ends": 0, "expired_end": 0, "purged_end": 0,
                     "open_delayed": 0, "open_overdue": 0, "rejected": 0, "dead_by_tracker": 0, "copies": 0,
                     "in_dlq": False}))
    started_copies = F.coalesce(F.col("deliveries"), F.lit(0))
    life = life.withColumn("status", F.when(F.col("acks") > 0, "acked")
                           .when(F.col("expired_end") > 0, "expired")
                           .when(F.col("purged_end") > 0, "purged")
                           .when(F.col("rejected") > 0, "rejected")
                           .when((F.col("dead_by_tracker") > 0) | F.col("in_dlq"), "dead_lettered")
                           .when(F.col("go_ends") > 0, "ended_by_go")
                           .when((F.col("open_delayed") > 0) & (F.col("open_alive") > 0), "delayed")
                           .when(F.col("open_alive") > 0, "in_flight")
                           .when(F.col("open_overdue") > 0, "overdue")
                           .when(F.col("copies") > started_copies, "waiting")
                           .otherwise("orphaned"))
    life = life.withColumn("wait_ms", F.col("first_start_ts") - F.col("enqueued_ts"))
    if options.queues:
        life = life.filter(F.col("queue").isin(list(options.queues)))
    if options.from_ms is not None:
        life = life.filter(F.col("enqueued_ts") >= options.from_ms)
    if options.to_ms is not None:
        life = life.filter(F.col("enqueued_ts") < options.to_ms)
    return life.drop("copy_ids"), int(malformed), int(now_ms)


def _go_copies(records: DataFrame, markers: DataFrame) -> DataFrame:
    """kafka-mq-go trackers' copies: a record without a first-id header with the queue and payload of an earlier
    record whose delivery got a bare End. One copy per original, the earliest after it; columns copy_mid,
    original_mid, linked_first_id."""
    bare = markers.filter(F.col("end_reason") == GO_END).select("mid").distinct()
    originals = records.join(bare, "mid").select(
        "queue", "content", F.col("mid").alias("original_mid"), F.col("enqueued_ts").alias("original_ts"),
        F.coalesce("first_id_header", "mid").alias("linked_first_id"))
    candidates = records.filter(F.col("first_id_header").isNull()).select(
        "queue", "content", F.col("mid").alias("copy_mid"), F.col("enqueued_ts").alias("copy_ts"))
    pairs = candidates.join(originals, ["queue", "content"]).filter(
        (F.col("copy_mid") != F.col("original_mid")) & (F.col("copy_ts") >= F.col("original_ts")))
    earliest = Window.partitionBy("original_mid").orderBy("copy_ts", "copy_mid")
    latest = Window.partitionBy("copy_mid").orderBy(F.col("original_ts").desc(), F.col("original_mid").desc())
    return (pairs.withColumn("n", F.row_number().over(earliest)).filter("n = 1")
            .withColumn("m", F.row_number().over(latest)).filter("m = 1")
            .select("copy_mid", "original_mid", "linked_first_id"))


def summarise(life: DataFrame) -> dict[str, dict[str, Any]]:
    """Per-queue counts, percentiles and the delivery-count histogram (small: collected to the driver)."""
    pct = F.array(F.lit(0.5), F.lit(0.95), F.lit(0.99))
    rows = life.groupBy("queue").agg(
        F.count(F.when(F.col("enqueued_ts").isNotNull(), 1)).alias("produced"),
        F.sum(F.when(F.col("deliveries") > 0, 1).otherwise(0)).alias("delivered"),
        F.sum("deliveries").alias("deliveries"),
        F.sum("released").alias("released"),
        F.sum("redelivered").alias("redelivered"),
        F.sum("go_redelivered").alias("go_redelivered"),
        F.sum("go_ends").alias("go_ends"),
        F.sum(F.greatest(F.col("acks") - 1, F.lit(0))).alias("duplicate_acks"),
        # A handler that finished more than once (its side effects happened twice).
        F.sum(F.when(F.col("acks") > 1, 1).otherwise(0)).alias("acked_more_than_once"),
        # A handler that was started more than once (retries included): what idempotency has to cover.
        F.sum(F.when(F.col("handler_deliveries") > 1, 1).otherwise(0)).alias("delivered_more_than_once"),
        *[F.sum(F.when(F.col("status") == s, 1).otherwise(0)).alias(s) for s in STATUSES],
        F.percentile_approx("wait_ms", pct).alias("wait_ms_p50_p95_p99"),
        F.percentile_approx("processing_ms", pct).alias("processing_ms_p50_p95_p99"),
    ).collect()
    histogram = life.groupBy("queue", "max_delivery_count").count().collect()
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        data = row.asDict()
        data["lost"] = data["overdue"] + data["orphaned"]
        out[data.pop("queue")] = data
    for row in histogram:
        if row["queue"] in out and row["max_delivery_count"] is not None:
            out[row["queue"]].setdefault("delivery_count_histogram", {})[str(row["max_delivery_count"])] = row["count"]
    return out


def per_minute(life: DataFrame) -> list[dict[str, Any]]:
    return [r.asDict() for r in life.filter("acked_ts IS NOT NULL")
            .groupBy("queue", (F.col("acked_ts") / 60000).cast("long").alias("minute")).count()
            .orderBy("queue", "minute").collect()]


def run(config: Config, options: AuditOptions) -> dict[str, Any]:
    """Runs the audit; writes lifecycle and summary Parquet, summary.json and a chart into ``out_dir``."""
    spark = session(options.master)
    try:
        life, malformed, now_ms = lifecycles(spark, config, options)
        life = life.cache()
        options.out_dir.mkdir(parents=True, exist_ok=True)
        life.write.mode("overwrite").parquet(str(options.out_dir / "lifecycle.parquet"))
        queues = summarise(life)
        spark.createDataFrame([{"queue": q, **{k: v for k, v in d.items() if isinstance(v, int)}}
                               for q, d in queues.items()] or [{"queue": ""}]) \
            .write.mode("overwrite").parquet(str(options.out_dir / "summary.parquet"))
        minutes = per_minute(life)
    finally:
        spark.stop()
    result = {"queues": queues, "malformed_markers": malformed, "now_ms": now_ms,
              "topics": [config.message_topic, config.marker_topic, config.dlq_topic]}
    (options.out_dir / "summary.json").write_text(json.dumps(result, indent=2, default=str))
    _chart(options.out_dir, queues, minutes)
    return result


def _chart(out_dir: Path, queues: dict[str, dict[str, Any]], minutes: list[dict[str, Any]]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for name, data in queues.items():
        values = data.get("processing_ms_p50_p95_p99") or []
        if values:
            left.plot(["p50", "p95", "p99"], values, marker="o", label=name)
        points = [m for m in minutes if m["queue"] == name]
        right.plot([m["minute"] for m in points], [m["count"] for m in points], marker=".", label=name)
    left.set_title("processing time (ms)")
    right.set_title("acked per minute")
    for axes in (left, right):
        if axes.get_legend_handles_labels()[0]:  # nothing acked: no line to name
            axes.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out_dir / "audit.png")
    plt.close(fig)
