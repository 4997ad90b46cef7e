"""Config validation and loading (kmq keys, kafka-mq-go YAML keys, environment overrides)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kmq.config import Config
from kmq.errors import ConfigError

BASE = {"bootstrap_servers": "127.0.0.1:9092"}


@pytest.mark.parametrize(("field", "value"), [
    ("bootstrap_servers", ""),
    ("message_topic", ""),
    ("message_topic", "has space"),
    ("marker_topic", "x" * 250),
    ("redelivery_timeout_ms", 0),
    ("redelivery_timeout_ms", 12 * 3600 * 1000 + 1),
    ("receive_buffer_capacity", 0),
    ("max_in_flight", -1),
    ("max_messages_per_commit", 0),
    ("next_message_timeout_ms", 0),
    ("max_payload_bytes", 0),
    ("max_deliveries", -1),
    ("num_offsets_per_commit", 0),
    ("use_now_if_no_marker_seen_ms", -5),
    ("metrics_port", 70000),
    ("redelivery_timeout_ms", True),
    ("redelivery_timeout_ms", "100"),
    ("dedup_window_ms", -1),
    ("dedup_clock_skew_ms", -1),
    ("content_dedup_queues", [""]),
    ("schedule_standby_delay_ms", -1),
    ("schedule_misfire_grace_ms", -1),
])
def test_each_invalid_value_is_a_config_error_naming_its_field(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=field) as caught:
        Config(**{**BASE, field: value})  # type: ignore[arg-type]
    assert caught.value.field == field


def test_twelve_hours_exactly_is_accepted() -> None:
    assert Config(**BASE, redelivery_timeout_ms=12 * 3600 * 1000).keep_alive_interval_ms == 6 * 3600 * 1000


@given(st.integers(2, 12 * 3600 * 1000), st.integers(1, 10**6), st.integers(0, 100))
def test_valid_values_build_a_config(timeout: int, capacity: int, deliveries: int) -> None:
    config = Config(**BASE, redelivery_timeout_ms=timeout, receive_buffer_capacity=capacity,
                    max_deliveries=deliveries)
    assert config.keep_alive_interval_ms == timeout // 2


def test_kmq_owned_librdkafka_keys_cannot_be_passed_through() -> None:
    with pytest.raises(ConfigError, match=r"kafka\.enable\.auto\.commit"):
        Config(**BASE, kafka={"enable.auto.commit": "true"})


def test_passthrough_is_copied_and_secrets_are_redacted() -> None:
    settings = {"security.protocol": "SASL_SSL", "sasl.password": "hunter2"}
    config = Config(**BASE, kafka=settings)
    settings["security.protocol"] = "PLAINTEXT"
    assert config.kafka["security.protocol"] == "SASL_SSL"
    assert config.redacted_kafka() == {"security.protocol": "SASL_SSL", "sasl.password": "***"}
    assert "hunter2" not in repr(config.redacted_kafka())


def test_the_dead_letter_topic_defaults_to_the_messages_topic_dot_dlq() -> None:
    assert Config(**BASE, message_topic="jobs").dlq_topic == "jobs.dlq"
    assert Config(**BASE, dead_letter_topic="dead").dlq_topic == "dead"


def test_kafka_mq_go_yaml_keys_load(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "bootstrap-servers: localhost:9092\nmessage-topic: messages\nmarker-topic: markers\n"
        "redelivery-timeout: 1000\nconsumer-receive-buffer-capacity: 1\nconsumer-next-message-timeout: 500\n"
        "consumer-max-messages-per-commit: 1000\n"
        "redelivery-tracker:\n  use-now-if-no-marker-seen: 500\n  num-offsets-per-commit: 1000\n")
    config = Config.from_yaml(path, env={})
    assert (config.bootstrap_servers, config.message_topic, config.marker_topic) == (
        "localhost:9092", "messages", "markers")
    assert (config.redelivery_timeout_ms, config.receive_buffer_capacity, config.next_message_timeout_ms) == (
        1000, 1, 500)
    assert (config.use_now_if_no_marker_seen_ms, config.num_offsets_per_commit) == (500, 1000)


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("bootstrap_servers: a:1\nkafka:\n  client.rack: r1\n")
    config = Config.from_yaml(path, env={"KMQ_BOOTSTRAP_SERVERS": "b:2", "KMQ_MAX_DELIVERIES": "4",
                                         "KMQ_KAFKA_SECURITY_PROTOCOL": "SSL",
                                         "KMQ_CONSUMER_KAFKA_SESSION_TIMEOUT_MS": "6000"})
    assert config.bootstrap_servers == "b:2" and config.max_deliveries == 4
    assert dict(config.kafka) == {"client.rack": "r1", "security.protocol": "SSL"}
    assert dict(config.consumer_kafka) == {"session.timeout.ms": "6000"}


def test_a_whole_librdkafka_mapping_in_one_variable_is_json_and_single_settings_go_on_top(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("bootstrap_servers: a:1\nkafka:\n  client.rack: r1\n")
    config = Config.from_yaml(path, env={"KMQ_KAFKA": '{"security.protocol": "SSL", "client.rack": "r2"}',
                                         "KMQ_CONSUMER_KAFKA": '{"session.timeout.ms": 6000}',
                                         "KMQ_PRODUCER_KAFKA": '{"linger.ms": 20}',
                                         "KMQ_PRODUCER_KAFKA_LINGER_MS": "0"})
    assert dict(config.kafka) == {"client.rack": "r2", "security.protocol": "SSL"}
    assert dict(config.consumer_kafka) == {"session.timeout.ms": "6000"}
    assert dict(config.producer_kafka) == {"linger.ms": "0"}


@pytest.mark.parametrize("value", ["security.protocol=SSL", "[1, 2]", "{bad"])
def test_a_librdkafka_mapping_variable_that_is_no_json_object_is_an_error_not_ignored(value: str) -> None:
    with pytest.raises(ConfigError, match=r"KMQ_KAFKA: must be a JSON object of librdkafka settings "
                                          r"\(KMQ_KAFKA='\{\"security.protocol\": \"SSL\"\}' or "
                                          r"KMQ_KAFKA_SECURITY_PROTOCOL=SSL\)"):
        Config.load(env={"KMQ_BOOTSTRAP_SERVERS": "x:1", "KMQ_KAFKA": value})


def test_the_messages_producers_take_producer_kafka_and_it_cannot_override_what_kmq_owns() -> None:
    from kmq._kafka.settings import markers_producer_settings, messages_producer_settings

    config = Config(**BASE, producer_kafka={"linger.ms": 0, "compression.type": "zstd"})
    assert (messages_producer_settings(config, "p")["linger.ms"], markers_producer_settings(config, "m")["linger.ms"]) \
        == ("0", 0)
    with pytest.raises(ConfigError, match=r"producer_kafka\.enable\.idempotence: is set by kmq itself"):
        Config(**BASE, producer_kafka={"enable.idempotence": False})


def test_producers_give_a_request_up_after_10_s_unless_the_config_says_otherwise() -> None:
    from kmq._kafka.settings import markers_producer_settings, messages_producer_settings

    for make in (markers_producer_settings, messages_producer_settings):
        assert make(Config(**BASE), "p")["socket.timeout.ms"] == 10_000
        assert make(Config(**BASE, kafka={"socket.timeout.ms": "30000"}), "p")["socket.timeout.ms"] == "30000"
        assert "request.timeout.ms" not in make(Config(**BASE), "p"), "the broker's own ack timeout: not this"


def test_consumers_give_a_commit_up_after_10_s_unless_the_config_says_otherwise() -> None:
    from kmq._kafka.settings import consumer_settings, reader_settings

    for make in (consumer_settings, reader_settings):
        assert make(Config(**BASE), "g", "c")["socket.timeout.ms"] == 10_000
        assert make(Config(**BASE, kafka={"socket.timeout.ms": "60000"}), "g", "c")["socket.timeout.ms"] == "60000"
        consumer = Config(**BASE, consumer_kafka={"socket.timeout.ms": "20000"})
        assert make(consumer, "g", "c")["socket.timeout.ms"] == "20000"


def test_consumers_fetch_again_20_ms_after_their_queue_was_full_unless_the_config_says_otherwise() -> None:
    from kmq._kafka.settings import consumer_settings, reader_settings

    for make in (consumer_settings, reader_settings):
        assert make(Config(**BASE), "g", "c")["fetch.queue.backoff.ms"] == 20, "librdkafka's 1 s stalls a backlog"
        consumer = Config(**BASE, consumer_kafka={"fetch.queue.backoff.ms": "1000"})
        assert make(consumer, "g", "c")["fetch.queue.backoff.ms"] == "1000"


@pytest.mark.parametrize(("text", "match"), [
    ("bootstrap_servers: a:1\nno_such_key: 1\n", "no_such_key: unknown configuration key"),
    ("bootstrap_servers: [a\n", "not valid YAML"),
    ("- a\n- b\n", "must hold a mapping"),
    ("message_topic: m\n", "bootstrap_servers: missing"),
])
def test_bad_files_name_what_is_wrong(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match):
        Config.from_yaml(path, env={})


def test_a_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        Config.from_yaml(tmp_path / "nope.yaml", env={})


def test_a_non_integer_environment_value_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="KMQ_MAX_IN_FLIGHT='lots'"):
        Config.load(BASE, env={"KMQ_MAX_IN_FLIGHT": "lots"})


def test_a_config_survives_pickling_for_worker_processes() -> None:
    import pickle

    config = Config(**BASE, kafka={"client.rack": "r1"}, max_deliveries=3)
    assert pickle.loads(pickle.dumps(config)) == config


def test_a_mistyped_environment_variable_is_an_error_naming_the_closest_one() -> None:
    with pytest.raises(ConfigError, match=r"KMQ_MAX_DELIVERY: unknown environment variable \(did you mean "
                                          r"KMQ_MAX_DELIVERIES\?\)"):
        Config.load(env={"KMQ_BOOTSTRAP_SERVERS": "x:1", "KMQ_MAX_DELIVERY": "3"})


def test_librdkafka_passthrough_and_other_kmq_variables_are_not_typos() -> None:
    config = Config.load(env={"KMQ_BOOTSTRAP_SERVERS": "x:1", "KMQ_KAFKA_SECURITY_PROTOCOL": "SSL",
                              "KMQ_CONFIG": "kmq.yaml", "KMQ_LOG_LEVEL": "info", "KMQ_TRACKER_GROUP": "g2"})
    assert config.kafka["security.protocol"] == "SSL" and config.tracker_group == "g2"


@pytest.mark.parametrize("value", [[1, 2], "security.protocol=SSL", 7])
def test_a_kafka_section_that_is_not_a_mapping_is_a_config_error(value: object) -> None:
    with pytest.raises(ConfigError, match="kafka: must be a mapping of librdkafka settings"):
        Config.from_mapping({"bootstrap_servers": "x:1", "kafka": value})


def test_content_dedup_queues_are_a_list_or_names_separated_by_commas() -> None:
    assert Config(**BASE, content_dedup_queues="hooks, imports").content_dedup_queues == ("hooks", "imports")
    assert Config.load({**BASE}, env={"KMQ_CONTENT_DEDUP_QUEUES": "hooks"}).content_dedup_queues == ("hooks",)
    assert Config(**BASE).dedup_window_ms == 300_000, "SQS's five minutes"
