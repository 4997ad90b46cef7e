"""`kmq audit` on a real Spark standalone cluster (a master and two workers, tests/spark_cluster.py): the same
topics give the same figures, message for message, as in local mode, and both equal the generator's ground truth.
Run by `make test-audit-cluster` (not by `make test`: it starts three more JVMs)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from confluent_kafka.admin import AdminClient

from kmq.config import Config
from kmq.ops.audit import generate
from kmq.ops.audit.job import AuditOptions, run, session
from kmq.wire.control import control_topic
from tests.bench.audit_scale import compare
from tests.spark_cluster import SparkCluster

pytestmark = pytest.mark.timeout(900)

MESSAGES = 20_000


@pytest.fixture(scope="module")
def topics(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Config, dict[str, Any]]]:
    """Generated topics of MESSAGES message lives, their config and ground truth."""
    prefix = f"cluster-{uuid.uuid4().hex[:8]}"
    truth_file = tmp_path_factory.mktemp("truth") / "truth.json"
    assert generate.main(["--bootstrap-servers", kafka_bootstrap, "--prefix", prefix, "--messages", str(MESSAGES),
                          "--hours", "1", "--truth", str(truth_file)]) == 0
    truth = json.loads(truth_file.read_text())
    config = Config(bootstrap_servers=kafka_bootstrap, message_topic=f"{prefix}.messages",
                    marker_topic=f"{prefix}.markers", at_most_once_queues=tuple(generate.AT_MOST_ONCE))
    yield config, truth
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.delete_topics([config.message_topic, config.marker_topic, config.dlq_topic,
                                       control_topic(config.message_topic)], operation_timeout=30).values():
        future.result(30)


def _rows(out: Path) -> list[tuple[Any, ...]]:
    table = pq.read_table(out / "lifecycle.parquet").to_pylist()
    return sorted((tuple(sorted(row.items())) for row in table), key=repr)  # cells may be None: no < on them


def _figures(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {q: {k: v for k, v in d.items() if isinstance(v, int | dict)} for q, d in result["queues"].items()}


def test_the_audit_on_a_standalone_cluster_equals_local_mode_and_the_truth(
    topics: tuple[Config, dict[str, Any]], tmp_path: Path,
) -> None:
    config, truth = topics
    local = run(config, AuditOptions(out_dir=tmp_path / "local", now_ms=truth["now_ms"]))
    with SparkCluster(workers=2) as cluster:
        spark = session(cluster.master_url, cluster.driver_conf())
        try:
            assert spark.sparkContext.defaultParallelism == 2  # two executors, one core each
            remote = run(config, AuditOptions(out_dir=tmp_path / "cluster", now_ms=truth["now_ms"]), spark)
        finally:
            spark.stop()
        # And through the command line, as an operator submits it.
        (tmp_path / "kmq.yaml").write_text(
            f"bootstrap_servers: {config.bootstrap_servers}\nmessage_topic: {config.message_topic}\n"
            f"marker_topic: {config.marker_topic}\nat_most_once_queues: [{', '.join(config.at_most_once_queues)}]\n")
        cli = subprocess.run([sys.executable, "-m", "kmq.cli", "audit", "--config", str(tmp_path / "kmq.yaml"),
                              "--master", cluster.master_url, "--out", str(tmp_path / "cli")],
                             capture_output=True, text=True, timeout=600, check=False)
    assert cli.returncode == 0, cli.stderr[-3000:]
    assert "orders" in cli.stdout and "malformed markers: 0" in cli.stdout
    assert compare(local, truth) == []
    assert _figures(remote) == _figures(local)
    assert remote["queues"]["orders"]["processing_ms_p50_p95_p99"] == local["queues"]["orders"][
        "processing_ms_p50_p95_p99"]
    assert _rows(tmp_path / "cluster") == _rows(tmp_path / "local")
