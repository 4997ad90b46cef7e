"""The lifecycle audit as a Spark job (``kmq audit``): reads the messages, markers and dead-letter topics with
Spark's Kafka source over ranges fixed up front (kmq.ops.audit.reading), classifies every message in the vocabulary
of kmq.wire.vocabulary (kmq.ops.audit.classification: the same facts and state table as ``kmq stats``), and writes
per queue what was acked, redelivered, dead-lettered, expired, purged, still in flight or waiting, and lost.

Partition-parallel; the per-message lifecycle is written by the executors to ``lifecycle.parquet`` and the figures
are aggregated from it: only per-queue aggregates (and acks per minute) reach the driver.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from kmq.config import Config
from kmq.errors import KmqError
from kmq.ops.audit import SPARK_VERSION, chart, connector_jars
from kmq.ops.audit.classification import Facts, lifecycles
from kmq.ops.audit.reading import read, snapshot
from kmq.ops.audit.summary import acked_per_minute, summarise
from kmq.topic_sets import TopicSet
from kmq.wire import now_ms as wire_now_ms


@dataclass(frozen=True, slots=True)
class AuditOptions:
    queues: tuple[str, ...] = ()
    #: Messages enqueued in [from_ms, to_ms) (an incremental run reads only from the window's offsets on).
    from_ms: int | None = None
    to_ms: int | None = None
    #: "" leaves the master to a session that exists already (spark-submit).
    master: str = "local[2]"
    out_dir: Path = Path("audit-out")
    #: The audit's "now" for deadlines; default: the wall clock when the topics' end offsets are taken.
    now_ms: int | None = None
    #: Extra Spark settings (``spark.executor.memory`` …) for a session the audit makes.
    spark_conf: dict[str, str] = field(default_factory=dict)
    #: The topic set to read (an audit reads one); None: the set ``queues`` live in, or the default set.
    topic_set: str | None = None


def audited_set(config: Config, options: AuditOptions) -> TopicSet:
    """The one topic set an audit reads: the one named, or the one every queue named lives in."""
    if options.topic_set is not None:
        return config.topic_set(options.topic_set)
    sets = list(dict.fromkeys(config.topics_for(q) for q in options.queues)) or [config.default_topics]
    if len(sets) > 1:
        raise KmqError(f"the queues named live in topic sets {', '.join(s.name for s in sets)}: an audit reads one "
                       "set (run one per set, with --set)")
    return sets[0]


def session(master: str, conf: dict[str, str] | None = None) -> SparkSession:
    """A Spark session with the Kafka connector's jars (shipped to a cluster's executors by Spark itself)."""
    import pyspark

    if pyspark.__version__ != SPARK_VERSION:
        raise KmqError(f"pyspark {pyspark.__version__} is installed; kmq audit needs {SPARK_VERSION}, the version "
                       "of Spark's Kafka source it uses (pip install 'kmq[spark]')")
    # Executors must run the same interpreter, with kmq importable.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = {
        "spark.jars": ",".join(str(p) for p in connector_jars()),
        "spark.driver.memory": os.environ.get("KMQ_AUDIT_DRIVER_MEMORY", "1g"),
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "16",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "2000",
        **(conf or {}),
    }
    builder = SparkSession.builder.appName("kmq-audit")
    if master:
        builder = builder.master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run(config: Config, options: AuditOptions, spark: SparkSession | None = None) -> dict[str, Any]:
    """Runs the audit; writes lifecycle and summary Parquet, summary.json and audit.png into ``out_dir``. With
    ``spark``, runs in that session and leaves it open."""
    started = time.monotonic()
    # First: a broker that does not answer is one line, before Spark starts.
    snap = snapshot(config, audited_set(config, options), options.from_ms)
    own = spark is None
    spark = spark or session(options.master, options.spark_conf)
    try:
        now_ms = options.now_ms if options.now_ms is not None else wire_now_ms()
        topics = read(spark, config, snap, min_partitions=2 * spark.sparkContext.defaultParallelism)
        window = options.from_ms is not None or options.to_ms is not None
        facts = Facts(now_ms, snap.committed, snap.purged_before, frozenset(config.at_most_once_queues),
                      {p: s for p, (s, _) in snap.messages.offsets.items()} if window else None,
                      options.from_ms, options.to_ms)
        markers = topics.markers.cache()
        malformed = markers.filter("event < 0").count()
        life = lifecycles(spark, markers.filter("event >= 0"), topics.records, topics.letters, facts)
        if options.queues:
            life = life.filter(life.queue.isin(list(options.queues)))
        options.out_dir.mkdir(parents=True, exist_ok=True)
        where = str(options.out_dir / "lifecycle.parquet")
        life.write.mode("overwrite").parquet(where)
        spark.catalog.clearCache()  # the decoded markers and the records the classification kept
        written = spark.read.parquet(where)
        queues = summarise(written)
        minutes = acked_per_minute(written)
        _summary_table(spark, queues, options.out_dir)
        read_cost = topics.cost()
    finally:
        if own:
            spark.stop()
    result = {"queues": queues, "malformed_markers": malformed, "now_ms": now_ms,
              "window": {"from_ms": options.from_ms, "to_ms": options.to_ms} if window else None,
              "topics": {name: {"topic": r.topic, "partitions": {str(p): list(o) for p, o in r.offsets.items()},
                                **read_cost.get(name, {})}
                         for name, r in (("markers", snap.markers), ("messages", snap.messages),
                                         ("dead_letters", snap.dead_letters))},
              "seconds": round(time.monotonic() - started, 1)}
    (options.out_dir / "summary.json").write_text(json.dumps(result, indent=2, default=str))
    chart.draw(options.out_dir / "audit.png", queues, minutes)
    return result


def _summary_table(spark: SparkSession, queues: dict[str, dict[str, Any]], out_dir: Path) -> None:
    rows = [{"queue": q, **{k: v for k, v in d.items() if isinstance(v, int)}} for q, d in queues.items()]
    if rows:
        spark.createDataFrame(rows).write.mode("overwrite").parquet(str(out_dir / "summary.parquet"))
