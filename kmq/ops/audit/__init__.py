"""The Spark lifecycle audit (``kmq audit``; extra ``kmq[spark]``). pyspark is imported only when it runs."""

from __future__ import annotations

from pathlib import Path

from kmq._maven import cache_root, copy_jars

SPARK_VERSION = "4.2.0"  # pyspark is pinned to this: Spark's Kafka source must match it exactly
POM = Path(__file__).with_name("spark-kafka-pom.xml")


def connector_jars(log: bool = True) -> list[Path]:
    """spark-sql-kafka-0-10 and its runtime jars, fetched once with Maven (Ivy is not used at run time)."""
    dest = cache_root() / f"spark-kafka-{SPARK_VERSION}" / "libs"
    copy_jars(POM, {"spark.version": SPARK_VERSION}, dest,
              f"org.apache.spark:spark-sql-kafka-0-10_2.13:{SPARK_VERSION}", log=log)
    return sorted(dest.glob("*.jar"))
