"""Message lifecycles in Spark: the same facts, states and counters as kmq.ops.lifecycle (``kmq stats``), computed
with DataFrame operations so only per-queue aggregates ever reach the driver.

Inputs are DataFrames, so the classification can be fed from Kafka (kmq.ops.audit.reading) or from memory (tests):
- ``markers``: decoded markers (kmq.ops.audit.decoding.COLUMNS);
- ``records``: messages-topic records: mid (long), queue, ts, headers (array of key/value structs), value;
- ``letters``: dead letters: key, headers;
- ``Facts``: committed offsets, purge times, at-most-once queues, now, and an optional window.
The result has one row per message: queue, first_id, the facts of kmq.wire.vocabulary.FACTS, its state, its
counters, and the audit's extras (enqueue time, first Start, delivery count, processing time, window scope).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from kmq import wire
from kmq.ops.audit.decoding import MID_SHIFT
from kmq.ops.lifecycle import AFTER_WINDOW, BEFORE_WINDOW, IN_WINDOW
from kmq.wire import vocabulary as v
from kmq.wire.vocabulary import MarkerEvent as E

#: Per-delivery and per-message count columns (summed into each message).
DELIVERY_FACTS = ("acks", "open_in_flight", "open_delayed", "open_overdue", "purge_ends", "expire_ends", "dead_ends",
                  "dedup_ends", "go_ends", "refused_ends")
DELIVERY_COUNTERS = (v.DELIVERED, v.RELEASED, v.RETURNED, v.REDELIVERED, v.GO_REDELIVERED, v.RECOVERED)
RECORD_FACTS = ("waiting_records", "purged_records", "consumed_records", v.PRODUCED)
LETTER_FACTS = ("expired_letters", "dead_letters", "refused_letters")
#: Facts of final Ends, each with when its newest marker was written (kmq.wire.vocabulary.UNDONE_BY_A_LATER_START).
ENDS = ("purge_ends", "expire_ends", "dead_ends")
SUMS = (*DELIVERY_FACTS, *DELIVERY_COUNTERS, *RECORD_FACTS, *LETTER_FACTS)


@dataclass(frozen=True, slots=True)
class Facts:
    """What the classification needs besides the topics (the same as kmq.ops.lifecycle.Context)."""

    now_ms: int
    committed: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    purged_before: Mapping[str, int] = field(default_factory=dict)
    at_most_once: frozenset[str] = frozenset()
    #: An incremental audit's window: per messages partition the first offset read, and [from_ms, to_ms).
    start_offsets: Mapping[int, int] | None = None
    from_ms: int | None = None
    to_ms: int | None = None


def _count(event: E) -> Column:
    return F.sum(F.when(F.col("event") == int(event), 1).otherwise(0))


def deliveries(markers: DataFrame, now_ms: int) -> DataFrame:
    """One row per Started record, or Ended duplicate (never Started): its counts of each marker event, first
    Start, deadline, and what it adds to its message's facts and counters."""
    ends = [int(e) for e in v.END_EVENTS]
    start = F.col("event") == int(E.START)
    # Aggregates of fixed-width values only, so Spark aggregates by hash, not by sorting: the queue as a hash of
    # its name (a record's Starts all name its queue), named again through a small table.
    agg = markers.groupBy("mid").agg(
        _count(E.START).alias("starts"),
        F.min(F.when(start, F.xxhash64("queue"))).alias("queue_id"),
        F.min(F.when(start, F.col("first_id"))).alias("first_id"),
        F.min(F.when(start, F.col("ts"))).alias("start_ms"),
        F.max(F.when(start, F.col("delivery_count"))).alias("delivery_count"),
        F.max_by(F.when(~F.col("event").isin(ends), F.col("deadline")),
                 F.when(~F.col("event").isin(ends), F.col("seq"))).alias("deadline"),
        F.min(F.when(F.col("event") == int(E.ACK), F.col("ts"))).alias("first_ack_ms"),
        F.max(F.when(F.col("event").isin([int(e) for e in v.FINAL_END_EVENTS]), F.col("ts"))).alias("final_end_ms"),
        *[_count(e).alias(f"n_{e.name.lower()}") for e in E if e is not E.START],
    ).filter("starts > 0 OR n_deduplicate > 0")
    names = markers.filter(start).select(F.xxhash64("queue").alias("queue_id"), "queue").distinct()
    # A duplicate has no Start, so no queue here: its record names it (a duplicate whose record is not read is left
    # out, as kmq.ops.lifecycle leaves it).
    agg = agg.join(F.broadcast(names), "queue_id", "left").drop("queue_id")
    n: dict[E, Column] = {e: F.col(f"n_{e.name.lower()}") for e in E if e is not E.START}
    ended = sum((n[E(e)] for e in ends), F.lit(0)) > 0
    unhandled = sum((n[e] for e in v.UNHANDLED_EVENTS), F.lit(0)) > 0
    uncounted = sum((n[e] for e in v.UNCOUNTED_COPY_EVENTS), F.lit(0)) > 0
    is_open = ~ended

    def flag(condition: Column) -> Column:
        return condition.cast("long")

    return agg.select(
        "mid", "queue", "first_id", "start_ms",
        "delivery_count", "first_ack_ms", "final_end_ms", n[E.GO_END].alias("n_go_end"),
        n[E.ACK].alias("acks"),
        flag(is_open & (F.col("deadline") >= now_ms) & (n[E.DELAY] == 0)).alias("open_in_flight"),
        flag(is_open & (F.col("deadline") >= now_ms) & (n[E.DELAY] > 0)).alias("open_delayed"),
        flag(is_open & (F.col("deadline") < now_ms)).alias("open_overdue"),
        (n[E.PURGE] + n[E.TRACKER_PURGE]).alias("purge_ends"),
        n[E.EXPIRE].alias("expire_ends"),
        (n[E.REJECT] + n[E.DEAD_LETTER]).alias("dead_ends"),
        n[E.DEDUPLICATE].alias("dedup_ends"),
        n[E.REJECT].alias("refused_ends"),
        flag(~unhandled).alias(v.DELIVERED),
        n[E.RELEASE].alias(v.RELEASED),
        n[E.RETURN].alias(v.RETURNED),
        F.when(uncounted, 0).otherwise(n[E.REDELIVER]).alias("copies"),
        uncounted.alias("uncounted"),
        (n[E.RELEASE] > 0).alias("released_once"),
    )


def records(raw: DataFrame) -> DataFrame:
    """Messages-topic records: mid, queue, ts, the first-id header (as a long) and enqueued-at header, content."""
    first = _header("headers", wire.HEADER_FIRST_ID)
    parts = F.split(first, ":")
    return raw.select(
        "mid", F.coalesce("queue", F.lit("")).alias("queue"), "ts",
        F.when(first.isNotNull(), F.shiftleft(parts.getItem(0).cast("long"), MID_SHIFT)
               .bitwiseOR(parts.getItem(1).cast("long"))).alias("first_id_header"),
        F.coalesce(_header("headers", wire.HEADER_ENQUEUED_AT).cast("long"), F.lit(0)).alias("enqueued_at"),
        # What links a Go tracker's copy to its original: the payload's 64-bit hash (kmq stats compares a 128-bit
        # digest; they differ only if two payloads of one queue collide in 64 bits).
        F.xxhash64("value").alias("content"),
    )


def _header(column: str, name: str) -> Column:
    """A header's value as a string, null when the record lacks it (most records have no headers at all: their
    empty list is not searched)."""
    found = F.expr(f"CAST(try_element_at(filter({column}, h -> h.key = '{name}'), 1).value AS STRING)")
    return F.when(F.size(column) > 0, found)


def go_links(recs: DataFrame, bare: DataFrame) -> DataFrame:
    """kafka-mq-go trackers' copies (kmq.ops.lifecycle.go_links, the same rule): columns copy_mid, linked (the first
    id of the message copied), original_mid. ``bare``: ids (``mid``) of Started records with a bare End (few)."""
    originals = recs.join(F.broadcast(bare), "mid").select(
        "queue", "content", F.col("mid").alias("original_mid"), F.col("ts").alias("original_ts"),
        F.coalesce("first_id_header", "mid").alias("linked")).cache()
    # Only records with an original's queue and payload can be its copy: filtered before anything moves.
    candidates = (recs.filter(F.col("first_id_header").isNull())
                  .join(F.broadcast(originals.select("queue", "content").distinct()), ["queue", "content"], "left_semi")
                  .select("queue", "content", F.col("mid").alias("copy_mid"), F.col("ts").alias("copy_ts")))
    pairs = candidates.join(originals, ["queue", "content"]).filter(
        (F.col("copy_ts") > F.col("original_ts"))
        | ((F.col("copy_ts") == F.col("original_ts")) & (F.col("copy_mid") > F.col("original_mid"))))
    earliest = Window.partitionBy("original_mid").orderBy("copy_ts", "copy_mid")
    latest = Window.partitionBy("copy_mid").orderBy(F.col("original_ts").desc(), F.col("original_mid").desc())
    links = (pairs.withColumn("n", F.row_number().over(earliest)).filter("n = 1")
             .withColumn("m", F.row_number().over(latest)).filter("m = 1")
             .select("copy_mid", "linked", "original_mid")).cache()
    # A copy of a copy: follow the chain to the first original (a few rounds at most; chains go back in time).
    for _ in range(64):
        hop = (links.alias("a").join(links.select(F.col("copy_mid").alias("via"), F.col("linked").alias("root")),
                                     F.col("a.linked") == F.col("via"), "left")
               .select("copy_mid", F.coalesce("root", "a.linked").alias("linked"), "original_mid",
                       F.col("via").isNotNull().alias("moved"))).cache()
        if hop.filter("moved").isEmpty():
            hop.unpersist()
            break
        links.unpersist()
        links = hop.drop("moved")
    return links


def lifecycles(spark: SparkSession, markers: DataFrame, raw_records: DataFrame, raw_letters: DataFrame,
               facts: Facts) -> DataFrame:
    """One row per message (see the module docstring)."""
    recs = records(raw_records).cache()  # read once: the Go links and the classification both go through it
    go_ends = markers.filter(F.col("event") == int(E.GO_END)).select("mid").distinct().cache()
    if go_ends.isEmpty():
        links = spark.createDataFrame([], "copy_mid long, linked long, original_mid long")
    else:
        bare = markers.filter(F.col("event") == int(E.START)).join(F.broadcast(go_ends), "mid", "left_semi")
        links = go_links(recs, bare.select("mid").distinct())
    link = F.broadcast(links.select(F.col("copy_mid").alias("link_key"), "linked"))
    followed = F.broadcast(links.select(F.col("original_mid").alias("mid"), F.lit(1).alias("go_copied")).distinct())
    dels = (deliveries(markers, facts.now_ms).withColumnRenamed("first_id", "start_first_id")
            .withColumnRenamed("queue", "start_queue").join(followed, "mid", "left"))
    # One row per record or Started record: a delivery belongs to the message of its record (the first-id header
    # its Start copied), or, its record not read, to its Start's first id.
    rows = recs.join(dels, "mid", "full_outer")
    read = F.col("ts").isNotNull()
    rows = rows.filter(read | F.col("start_ms").isNotNull())  # a duplicate's End alone, its record not read
    rows = (rows.withColumn("queue", F.when(read, F.col("queue")).otherwise(F.col("start_queue")))
            .withColumn("key_id", F.when(read, F.coalesce("first_id_header", "mid"))
                        .otherwise(F.col("start_first_id")))
            .join(link, F.col("key_id") == F.col("link_key"), "left")
            .withColumn("first_id", F.coalesce("linked", "key_id")))
    letters = dead_letters(raw_letters).join(link, F.col("letter_first_id") == F.col("link_key"), "left")
    letters = _letter_rows(letters.withColumn("first_id", F.coalesce("linked", "letter_first_id")))
    per_row = _row_facts(spark, rows, facts).unionByName(letters, allowMissingColumns=True)
    per_message = per_row.groupBy("queue", "first_id").agg(
        *[F.sum(F.coalesce(F.col(c), F.lit(0))).alias(c) for c in SUMS],
        F.min("enqueued_ms").alias("enqueued_ms"), F.min("start_ms").alias("first_start_ms"),
        F.max("delivery_count").alias("max_delivery_count"), F.min("in_flight_since").alias("in_flight_since"),
        F.min("waiting_since").alias("waiting_since"), F.max("processing_ms").alias("processing_ms"),
        F.min("first_ack_ms").alias("acked_ms"), F.max("start_ms").alias("last_start_ms"),
        *[F.max(f"{name}_ms").alias(f"{name}_ms") for name in v.UNDONE_BY_A_LATER_START])
    return _classify(per_message, facts)


def _row_facts(spark: SparkSession, r: DataFrame, facts: Facts) -> DataFrame:
    """What a record and its delivery (either may be missing) add to their message's facts and counters."""
    committed = spark.createDataFrame(
        [(q, p, o) for q, parts in facts.committed.items() for p, o in parts.items()] or [("", -1, 0)],
        "c_queue string, c_partition long, committed long")
    purges = spark.createDataFrame(list(facts.purged_before.items()) or [("", 0)], "p_queue string, purge_ms long")
    partition, offset = F.shiftright("mid", MID_SHIFT), F.col("mid").bitwiseAND((1 << MID_SHIFT) - 1)
    r = (r.join(F.broadcast(committed), (F.col("queue") == F.col("c_queue")) & (partition == F.col("c_partition")),
                "left")
         .join(F.broadcast(purges), F.col("queue") == F.col("p_queue"), "left"))
    read = F.col("ts").isNotNull()
    started = F.col("start_ms").isNotNull()
    unstarted = read & ~started & ~F.coalesce(F.col("dedup_ends") > 0, F.lit(False))
    below = F.coalesce(offset < F.col("committed"), F.lit(False))
    enqueued = F.when(F.col("enqueued_at") > 0, F.col("enqueued_at")).otherwise(F.col("ts"))
    purged = F.coalesce(enqueued < F.col("purge_ms"), F.lit(False))
    amo = F.col("queue").isin(sorted(facts.at_most_once)) if facts.at_most_once else F.lit(False)
    produced = read & F.col("first_id_header").isNull() & F.col("linked").isNull()
    waiting = unstarted & ~below & ~purged
    counted = ~F.coalesce(F.col("uncounted"), F.lit(False))
    go_copied = F.coalesce(F.col("go_copied"), F.lit(0))
    go_copy = F.when(counted, go_copied).otherwise(0)
    copies = F.coalesce(F.col("copies"), F.lit(0)) + go_copy
    return r.select(
        "queue", "first_id", "acks", "open_in_flight", "open_delayed", "open_overdue", "purge_ends", "expire_ends",
        "dead_ends", "dedup_ends", "refused_ends",
        ((F.col("n_go_end") > 0) & (go_copied == 0)).cast("long").alias("go_ends"),
        v.DELIVERED, v.RELEASED, v.RETURNED, copies.alias(v.REDELIVERED), go_copy.alias(v.GO_REDELIVERED),
        (started & counted & (copies > 0) & ~F.col("released_once")).cast("long").alias(v.RECOVERED),
        "start_ms", "delivery_count", "first_ack_ms",
        *[F.when(F.col(name) > 0, F.col("final_end_ms")).alias(f"{name}_ms") for name in ENDS],
        F.when(F.col("open_in_flight") > 0, F.col("start_ms")).alias("in_flight_since"),
        (F.col("first_ack_ms") - F.col("start_ms")).alias("processing_ms"),
        waiting.cast("long").alias("waiting_records"),
        (unstarted & ~below & purged).cast("long").alias("purged_records"),
        (unstarted & below & amo).cast("long").alias("consumed_records"),
        produced.cast("long").alias(v.PRODUCED),
        F.when(produced, F.col("ts")).alias("enqueued_ms"),
        F.when(waiting, F.col("ts")).alias("waiting_since"),
    )


def dead_letters(raw: DataFrame) -> DataFrame:
    """Dead letters: queue, the first id (long), reason."""
    first = _header("headers", wire.HEADER_FIRST_ID)
    parts = F.split(first, ":")
    return raw.select(
        F.coalesce(_header("headers", wire.HEADER_DLQ_QUEUE), F.col("key").cast("string")).alias("queue"),
        F.shiftleft(parts.getItem(0).cast("long"), MID_SHIFT).bitwiseOR(parts.getItem(1).cast("long"))
        .alias("letter_first_id"),
        F.coalesce(_header("headers", wire.HEADER_DLQ_REASON), F.lit("")).alias("reason"), "ts",
    ).filter(F.col("letter_first_id").isNotNull())


def _letter_rows(letters: DataFrame) -> DataFrame:
    expired = F.col("reason") == wire.EXPIRED_REASON
    refused = ~expired & (F.col("reason") != wire.PURGED_REASON) & ~F.col("reason").rlike(v.MAX_DELIVERIES_PATTERN)
    return letters.select("queue", "first_id", expired.cast("long").alias("expired_letters"),
                          (~expired).cast("long").alias("dead_letters"), refused.cast("long").alias("refused_letters"),
                          F.when(expired, F.col("ts")).alias("expired_letters_ms"),
                          F.when(~expired, F.col("ts")).alias("dead_letters_ms"))


def _classify(m: DataFrame, facts: Facts) -> DataFrame:
    """The state (kmq.wire.vocabulary.STATE_RULES), ``rejected``, and the message's place in a window."""
    for name in v.UNDONE_BY_A_LATER_START:  # a later delivery (a redrive Started) undoes an ending
        behind = F.coalesce(F.col(f"{name}_ms") < F.col("last_start_ms"), F.lit(False))
        m = m.withColumn(name, F.when(behind, F.lit(0).cast("long")).otherwise(F.col(name)))
    m = m.drop("last_start_ms", *[f"{name}_ms" for name in v.UNDONE_BY_A_LATER_START])
    state: Any = F
    for name, names in v.STATE_RULES:
        state = state.when(sum((F.col(n) for n in names), F.lit(0)) > 0, F.lit(name))
    m = m.withColumn("state", state.otherwise(F.lit(v.VANISHED)))
    m = m.withColumn(v.REJECTED, F.greatest(F.coalesce("refused_ends", F.lit(0)),
                                            F.coalesce("refused_letters", F.lit(0))).cast("long"))
    m = m.withColumn("max_delivery_count", F.coalesce("max_delivery_count", F.lit(0)))
    return m.withColumn("scope", _scope(facts))


def _scope(facts: Facts) -> Column:
    if facts.start_offsets is None:
        return F.lit(IN_WINDOW)
    starts = F.create_map(*[F.lit(x) for p, o in sorted(facts.start_offsets.items()) for x in (p, o)])
    first_offset = F.col("first_id").bitwiseAND((1 << MID_SHIFT) - 1)
    start = F.coalesce(F.element_at(starts, F.shiftright("first_id", MID_SHIFT).cast("int")), F.lit(0))
    before = first_offset < start
    if facts.from_ms is not None:
        before = before | F.coalesce(F.col("enqueued_ms") < facts.from_ms, F.lit(False))
    after = F.coalesce(F.col("enqueued_ms") >= facts.to_ms, F.lit(False)) if facts.to_ms is not None else F.lit(False)
    return F.when(before, F.lit(BEFORE_WINDOW)).when(after, F.lit(AFTER_WINDOW)).otherwise(F.lit(IN_WINDOW))
