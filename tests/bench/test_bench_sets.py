"""Topic sets in the bench (`make bench`): 1,000 queues on one set, and the same 1,000 queues on ten sets, in the
same run: records read per delivered message, consumer CPU and delivered throughput.

Each of the 1,000 queues gets PER_QUEUE messages. A queue's consumer is alone in its group and reads its set's
whole messages topic, so every consumer does the same work: a sample of SAMPLE queues (the same queues in both
layouts, spread over the ten sets) is consumed, each by a consumer of its own, in one process whose consumers hold
their partitions before the messages are written. Its figures run from the moment all hold their partitions to
the last ack (the process's CPU over that time): consumer start-up and group joins, the same in both layouts, are
not measured. A thousand consumers at once (three librdkafka clients each) do not fit a 2-core machine. No tracker
runs (nothing is redelivered). Writes bench-results/<timestamp>-sets/ and prints the table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer as RawProducer

from kmq import Config, logs
from kmq._kafka.topics import create_topics
from tests.bench import workloads as w
from tests.bench.results import Case, markdown, write
from tests.helpers import ROOT, config_file

QUICK = bool(os.environ.get("KMQ_BENCH_QUICK"))
QUEUES = 1_000
PER_QUEUE = 20 if QUICK else 50
SETS = 10
SAMPLE = 50
PARTITIONS = 6

pytestmark = [pytest.mark.bench, pytest.mark.timeout(3600)]


def _config(bootstrap: str, sets: int) -> Config:
    """The deployment: queues bq-0000 … bq-0999, on the default set only, or spread over ``sets`` named sets by the
    last digit of their number (routes ``*0`` … ``*9``)."""
    base = w.group("sets")
    named = {f"s{d}": {"prefix": f"{base}-s{d}"} for d in range(sets)} if sets > 1 else {}
    routes = [{"queues": f"*{d}", "set": f"s{d}"} for d in range(sets)] if sets > 1 else []
    config = Config(bootstrap_servers=bootstrap, message_topic=f"{base}.m", marker_topic=f"{base}.mk",
                    tracker_group=f"{base}.t", consumer_group_prefix=f"{base}.", topic_sets=named, routes=routes)
    for topics in config.all_topic_sets:
        create_topics(config, topics, partitions=PARTITIONS, marker_partitions=3)
    return config


def _preload(config: Config, queues: list[str]) -> None:
    """PER_QUEUE records of 256 B per queue, interleaved, each on its queue's set (partitions at random, as kmq's
    producer spreads a queue)."""
    producer = RawProducer({"bootstrap.servers": config.bootstrap_servers, "partitioner": "random",
                            "linger.ms": 20, "enable.idempotence": True})
    payload = b"x" * 256
    for _ in range(PER_QUEUE):
        for queue in queues:
            producer.produce(config.topics_for(queue).messages, payload, queue.encode())
            producer.poll(0)
    assert producer.flush(120) == 0


def _sample() -> list[str]:
    """SAMPLE queues spread over the numbers and over the ten sets (the last digits 0-9 in turn)."""
    step = QUEUES // SAMPLE
    return [f"bq-{i * step + i % 10:04d}" for i in range(SAMPLE)]


def _consume(config: Config, queues: list[str], folder: Path) -> dict[str, float]:
    """The sample's consumers, ready first; then every queue's messages are written and the sample's delivered."""
    consumers = subprocess.Popen([sys.executable, "-m", "tests.bench.sets_consumer", str(config_file(config, folder)),
                                  str(PER_QUEUE), *_sample()], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert consumers.stdout is not None
        assert consumers.stdout.readline().strip() == "READY", consumers.stderr.read()[-2000:]  # type: ignore[union-attr]
        _preload(config, queues)
        out, err = consumers.communicate(timeout=900)
    finally:
        if consumers.poll() is None:
            consumers.kill()
    assert consumers.returncode == 0, err[-2000:]
    measured: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    assert measured["delivered"] == SAMPLE * PER_QUEUE, measured
    return measured


def test_bench_topic_sets(kafka_bootstrap: str, tmp_path: Path) -> None:
    logs.configure("error")
    started = time.monotonic()
    queues = [f"bq-{i:04d}" for i in range(QUEUES)]
    measured: dict[int, dict[str, float]] = {}
    for sets in (1, SETS):
        measured[sets] = _consume(_config(kafka_bootstrap, sets), queues, tmp_path)
    ten, one = measured[SETS], measured[1]
    setup = {"queues": QUEUES, "messages": QUEUES * PER_QUEUE, "payload": 256, "partitions": PARTITIONS,
             "consumers": f"{SAMPLE} (a sample: one per queue, each in its own group)"}
    name, base = f"{QUEUES:,} queues on {SETS} topic sets", f"{QUEUES:,} queues on 1 topic set"
    figures = [("delivered", "msgs/s", lambda m: m["delivered"] / m["seconds"]),
               ("delivered per consumer CPU second", "msgs/s", lambda m: m["delivered"] / m["cpu_s"]),
               ("records read per delivered", "records", lambda m: m["records_read"] / m["delivered"]),
               ("consumer CPU per 1,000 delivered", "CPU s", lambda m: 1000 * m["cpu_s"] / m["delivered"])]
    cases = [Case(f"{name}: {what}", unit, figure(ten), figure(one), base, setup)
             for what, unit, figure in figures]
    out = write(ROOT / "bench-results" / f"{time.strftime('%Y%m%dT%H%M%S')}-sets", cases,
                {"quick": QUICK, "seconds": round(time.monotonic() - started)})
    print("\n" + markdown(cases) + f"\n\nresults in {out}")
    assert measured[SETS]["records_read"] < measured[1]["records_read"]
