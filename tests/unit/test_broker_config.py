"""The local broker launcher's generated configuration, without starting a broker."""

from __future__ import annotations

import base64
import socket
from pathlib import Path

import pytest

from kmq.testing import broker
from kmq.testing.broker import BrokerError, LocalKafka


def parse(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def test_server_properties_describe_one_combined_kraft_node_on_loopback(tmp_path: Path) -> None:
    props = parse(broker.render_properties(broker.server_properties(19092, 19093, tmp_path)))
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.bootstrap.servers"] == "127.0.0.1:19093"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert props["log.dirs"] == str(tmp_path)
    assert props["group.initial.rebalance.delay.ms"] == "0"


@pytest.mark.parametrize("prefix", ["offsets.topic", "transaction.state.log", "share.coordinator.state.topic"])
def test_internal_topics_fit_a_single_broker(prefix: str, tmp_path: Path) -> None:
    props = broker.server_properties(1, 2, tmp_path)
    assert props[f"{prefix}.replication.factor"] == "1"
    assert int(props[f"{prefix}.num.partitions"]) <= 5
    if prefix != "offsets.topic":
        assert props[f"{prefix}.min.isr"] == "1"


def test_overrides_win(tmp_path: Path) -> None:
    props = broker.server_properties(1, 2, tmp_path, {"num.partitions": "4"})
    assert props["num.partitions"] == "4"


def test_log4j_config_writes_to_the_given_file(tmp_path: Path) -> None:
    text = broker.log4j2_properties(tmp_path / "b.log")
    assert f"appender.file.fileName = {tmp_path / 'b.log'}" in text


def test_cluster_id_is_16_random_bytes_in_base64url() -> None:
    cid = broker.new_cluster_id()
    assert len(cid) == 22
    assert len(base64.urlsafe_b64decode(cid + "==")) == 16
    assert cid != broker.new_cluster_id()


def test_a_taken_port_is_a_clear_error_before_anything_starts() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(BrokerError, match=f"port {port} .* already in use"):
            LocalKafka(port=port).start()


def test_missing_java_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(BrokerError, match="Java is not on PATH"):
        LocalKafka().start()


def test_missing_maven_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KMQ_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(BrokerError, match="Maven"):
        broker.fetch_jars("4.4.0", log=False)


def test_unresolvable_version_names_the_artifact(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KMQ_CACHE_DIR", str(tmp_path))
    with pytest.raises(BrokerError, match=r"kafka_2\.13:0\.0\.0-nope"):
        broker.fetch_jars("0.0.0-nope", log=False)


@pytest.mark.parametrize(("group", "partition"), [
    # Java's String.hashCode and Kafka's Utils.abs, from `java` on this machine
    ("kmq-orders", 33), ("grüße-😀", 27),  # positive hashes
    ("f-split-5e1d7c-trackers", 13), ("kafka-mq-redelivery-orders", 13),  # negative: abs, not the sign bit cleared
    ("polygenelubricants", 0),  # Integer.MIN_VALUE
])
def test_a_groups_offsets_partition_is_kafkas(group: str, partition: int) -> None:
    from kmq.testing.cluster_admin import offsets_partition

    assert offsets_partition(group, 50) == partition
