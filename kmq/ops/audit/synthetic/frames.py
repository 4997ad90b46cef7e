"""Synthetic topics (kmq.ops.audit.synthetic.memory) as the DataFrames the audit's classification takes, built in
memory: the markers go through the audit's own decoding, as they would from Kafka."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from kmq.ops.audit.decoding import decode_batches, mid_long, schema
from kmq.ops.audit.synthetic.memory import MemorySink

HEADERS = T.ArrayType(T.StructType([T.StructField("key", T.StringType()), T.StructField("value", T.BinaryType())]))


def frames(spark: SparkSession, sink: MemorySink) -> tuple[DataFrame, DataFrame, DataFrame]:
    """(decoded markers, records, dead letters)."""
    raw_markers = spark.createDataFrame(
        [(r.value, r.timestamp_ms, r.offset) for r in sink.markers],
        T.StructType([T.StructField("value", T.BinaryType()), T.StructField("ts", T.LongType()),
                      T.StructField("offset", T.LongType())]))
    markers = raw_markers.mapInArrow(decode_batches, schema())
    records = spark.createDataFrame(
        [(mid_long(r.partition, r.offset), r.key.decode(), r.timestamp_ms, [(k, v) for k, v in r.headers], r.value)
         for r in sink.messages],
        T.StructType([T.StructField("mid", T.LongType()), T.StructField("queue", T.StringType()),
                      T.StructField("ts", T.LongType()), T.StructField("headers", HEADERS),
                      T.StructField("value", T.BinaryType())]))
    letters = spark.createDataFrame(
        [(r.key, r.timestamp_ms, [(k, v) for k, v in r.headers]) for r in sink.dead_letters],
        T.StructType([T.StructField("key", T.BinaryType()), T.StructField("ts", T.LongType()),
                      T.StructField("headers", HEADERS)]))
    return markers, records, letters
