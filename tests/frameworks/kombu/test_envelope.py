"""The kombu message ↔ kmq payload mapping and the transport's settings: pure logic, no broker."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kmq import Config, ConfigError
from kmq.kombu import envelope, settings

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)

json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                           max_leaves=10)


@given(body=st.text(), headers=st.dictionaries(st.text(), json_values, max_size=4))
def test_a_kombu_message_comes_back_as_it_was_sent_with_a_new_delivery_tag(body: str, headers: dict[str, object]
                                                                          ) -> None:
    message = {"body": body, "content-type": "application/json", "content-encoding": "utf-8", "headers": headers,
               "properties": {"delivery_tag": "publisher-tag", "delivery_info": {"exchange": "", "routing_key": "q"}}}
    out = envelope.encode(json.loads(json.dumps(message)), NOW)
    back = envelope.decode(out.payload, "tag-2", redelivered=False, delivery_count=1, message_id="0:1")
    assert back["body"] == body and back["headers"] == headers
    assert back["properties"]["delivery_tag"] == "tag-2"
    assert back["properties"]["delivery_info"] == {"exchange": "", "routing_key": "q", "redelivered": False,
                                                   "kmq_delivery_count": 1, "kmq_message_id": "0:1"}


def test_a_celery_eta_ahead_becomes_kmqs_due_time_and_one_behind_is_sent_at_once() -> None:
    ahead = (NOW + timedelta(seconds=30)).isoformat()
    assert envelope.encode({"headers": {"eta": ahead}, "properties": {}}, NOW).deliver_at == NOW + timedelta(
        seconds=30)
    assert envelope.encode({"headers": {"eta": (NOW - timedelta(seconds=1)).isoformat()}, "properties": {}},
                           NOW).deliver_at is None
    naive = (NOW + timedelta(seconds=5)).replace(tzinfo=None).isoformat()
    assert envelope.due_time(naive, NOW) == NOW + timedelta(seconds=5)  # naive: UTC, Celery's default
    assert envelope.due_time("not a time", NOW) is None


def test_kombus_expiration_in_milliseconds_becomes_a_ttl_in_seconds() -> None:
    assert envelope.encode({"properties": {"expiration": "2000"}}, NOW).ttl_s == 2.0
    assert envelope.ttl_seconds("0") == 0.001  # already expired: the smallest ttl kmq takes
    assert envelope.ttl_seconds(None) is None


def test_the_task_name_and_id_travel_as_kmq_headers_for_the_dead_letter_tools() -> None:
    out = envelope.encode({"headers": {"task": "app.add", "id": "abc"}, "properties": {}}, NOW)
    assert out.headers == {envelope.HEADER_TASK: "app.add", envelope.HEADER_TASK_ID: "abc"}


@pytest.mark.parametrize("payload", [b"\xff\xfe", b"[1, 2]", b'{"body": "x"}', b"plain text"])
def test_a_payload_that_is_not_a_kombu_message_is_refused(payload: bytes) -> None:
    with pytest.raises(envelope.EnvelopeError):
        envelope.decode(payload, "t", redelivered=False, delivery_count=1, message_id="0:0")


@pytest.mark.parametrize(("hostname", "port", "expected"), [
    ("broker", 9093, "broker:9093"), ("broker", None, "broker:9092"), ("localhost", None, ""), (None, None, ""),
    ("a:1,b", None, "a:1,b:9092"), ("localhost", 9092, "localhost:9092"),
])
def test_the_url_names_the_brokers_or_leaves_them_to_the_kmq_config(hostname: str | None, port: int | None,
                                                                      expected: str) -> None:
    assert settings.bootstrap_from_url(hostname, port) == expected


def test_the_kmq_config_comes_from_options_then_environment_then_url_and_visibility_timeout() -> None:
    config = settings.config_from("broker", 9093, {"kmq": {"message_topic": "jobs"}, "visibility_timeout": 90},
                                  env={"KMQ_MARKER_TOPIC": "jobs.markers"})
    assert (config.bootstrap_servers, config.message_topic, config.marker_topic) == ("broker:9093", "jobs",
                                                                                     "jobs.markers")
    assert config.redelivery_timeout_ms == 90_000
    assert config.consumer_kafka == {"session.timeout.ms": "45000", "heartbeat.interval.ms": "3000"}
    given_config = Config(bootstrap_servers="x:1", message_topic="m", consumer_kafka={"session.timeout.ms": "7000"})
    assert settings.config_from(None, None, {"kmq": given_config}, env={}) is given_config


def test_the_group_session_timeout_follows_the_visibility_timeout_within_kafkas_bounds() -> None:
    def session(visibility_s: float) -> str:
        return settings.config_from("b", 1, {"visibility_timeout": visibility_s}, env={}).consumer_kafka[
            "session.timeout.ms"]

    assert (session(2), session(10), session(600)) == ("6000", "10000", "45000")


@pytest.mark.parametrize("options", [{"visibility_timout": 3}, {"visibility_timeout": -1}, {"kmq": "x"},
                                     {"wait_time_seconds": -1}])
def test_a_bad_transport_option_is_a_config_error_naming_it(options: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        settings.options_from(options)
        settings.config_from(None, None, options, env={})


def test_a_dedup_id_header_deduplicates_a_tasks_first_send_but_never_its_retries() -> None:
    first = {"body": "", "headers": {"id": "t1", "task": "charge", "dedup_id": "order-991", "retries": 0}}
    assert envelope.encode(first, NOW).dedup_id == "order-991"
    retry = {**first, "headers": {**first["headers"], "retries": 1}}  # Celery's Task.retry re-sends the task
    assert envelope.encode(retry, NOW).dedup_id is None
    assert envelope.encode({"body": "", "headers": {"id": "t2"}}, NOW).dedup_id is None
