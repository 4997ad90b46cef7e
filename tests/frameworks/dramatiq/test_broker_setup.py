"""KmqBroker's construction (config, kmq:// URL, environment) and its in-process dead-letter log: no Kafka needed."""

from __future__ import annotations

import pytest
from dramatiq import Message, MessageProxy

from kmq import Config, ConfigError
from kmq.dramatiq import KmqBroker, parse_url
from kmq.dramatiq.dead_letters import DeadLetterLog


def test_a_url_names_the_bootstrap_servers_config_fields_librdkafka_settings_and_the_queue_prefix() -> None:
    parsed = parse_url("kmq://a:9092,b:9092/?message_topic=app.messages&redelivery_timeout_ms=30000"
                       "&kafka.security.protocol=SSL&consumer_kafka.session.timeout.ms=6000&queue_prefix=app.")
    assert parsed.config.bootstrap_servers == "a:9092,b:9092"
    assert parsed.config.message_topic == "app.messages"
    assert parsed.config.redelivery_timeout_ms == 30000
    assert dict(parsed.config.kafka) == {"security.protocol": "SSL"}
    assert dict(parsed.config.consumer_kafka) == {"session.timeout.ms": "6000"}
    assert parsed.queue_prefix == "app."


@pytest.mark.parametrize(("url", "error"), [
    ("redis://localhost:6379", "must start with kmq://"),
    ("kmq:///?message_topic=x", "names no bootstrap servers"),
    ("kmq://h:9092/?redelivery_timout_ms=5", "did you mean redelivery_timeout_ms"),
    ("kmq://h:9092/?redelivery_timeout_ms=soon", "is not an integer"),
])
def test_a_bad_url_is_a_config_error_naming_what_is_wrong(url: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        parse_url(url)


def test_the_broker_takes_a_config_a_url_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    config = Config(bootstrap_servers="h:9092")
    assert KmqBroker(config).config is config
    assert KmqBroker(url="kmq://h:9093/?queue_prefix=p.").queue_prefix == "p."
    with pytest.raises(ValueError, match="not both"):
        KmqBroker(config, url="kmq://h:9092")
    monkeypatch.delenv("KMQ_CONFIG", raising=False)
    monkeypatch.setenv("KMQ_BOOTSTRAP_SERVERS", "env-host:9092")
    assert KmqBroker().config.bootstrap_servers == "env-host:9092"


def test_a_queue_name_kmq_cannot_take_is_refused_when_declared() -> None:
    broker = KmqBroker(Config(bootstrap_servers="h:9092"), queue_prefix="x" * 200)
    with pytest.raises(ValueError, match="the limit is"):
        broker.declare_queue("default")


def test_dead_letters_keep_the_exception_type_and_args_not_the_exception() -> None:
    class Refused(Exception):
        def __init__(self, what: str, code: int) -> None:
            super().__init__(what, code)

    proxy = MessageProxy(Message(queue_name="q", actor_name="a", args=(), kwargs={}, options={}))
    proxy.stuff_exception(Refused("no", 7))
    log = DeadLetterLog()
    log.add(proxy)
    proxy.clear_exception()
    made = log.of("q")[0].exception()
    assert isinstance(made, Refused) and made.args == ("no", 7)
    assert log.messages() == {"q": [proxy]}
