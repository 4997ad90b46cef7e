"""What the client refuses before it talks to Kafka (no broker needed): bad payloads, reserved headers, bad queue
names; and an unreachable broker fails within the connect timeout."""

from __future__ import annotations

import time

import pytest

from kmq import Config, Service
from kmq.errors import InvalidQueueNameError, KafkaClientError, PayloadError, PayloadTooLargeError

NOWHERE = "127.0.0.1:1"


@pytest.mark.parametrize(("payload", "error", "match"), [
    ("text", PayloadError, "bytes-like, got str"),
    ({"a": 1}, PayloadError, "got dict"),
    (b"x" * 2001, PayloadTooLargeError, "2001 bytes exceeds max_payload_bytes=2000"),
])
def test_bad_payloads_are_refused_before_sending(payload: object, error: type[Exception], match: str) -> None:
    config = Config(bootstrap_servers=NOWHERE, max_payload_bytes=2000)
    with Service(config).queue("q").producer() as producer, pytest.raises(error, match=match):
        producer.send(payload)  # type: ignore[arg-type]


def test_reserved_headers_are_refused() -> None:
    config = Config(bootstrap_servers=NOWHERE)
    with Service(config).queue("q").producer() as producer, pytest.raises(PayloadError, match="reserved"):
        producer.send(b"x", headers={"kmq-delivery-count": "9"})


@pytest.mark.parametrize(("name", "match"), [("", "empty"), ("x" * 201, "limit is 200"),
                                             ("tab\there", "printable"), (" padded", "printable")])
def test_bad_queue_names_are_refused(name: str, match: str) -> None:
    with pytest.raises(InvalidQueueNameError, match=match):
        Service(Config(bootstrap_servers="127.0.0.1:1")).queue(name)


def test_an_unreachable_broker_fails_within_the_connect_timeout() -> None:
    config = Config(bootstrap_servers="127.0.0.1:1", connect_timeout_ms=1500)
    started = time.monotonic()
    with pytest.raises(KafkaClientError, match=r"cannot reach Kafka at 127\.0\.0\.1:1"):
        Service(config).queue("q").consumer()
    producer = Service(config).queue("q").producer()
    with pytest.raises(KafkaClientError, match="reachable"):
        producer.send(b"x", timeout=1.5)
    producer.close(timeout=0.5)
    assert time.monotonic() - started < 15
