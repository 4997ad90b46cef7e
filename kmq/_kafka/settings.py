"""Client settings kmq relies on: every kmq client starts from these (librdkafka's own keys pass through ``kafka``)."""

from __future__ import annotations

import os
import socket
from typing import Any

from kmq import logs
from kmq._kafka.errors import Credentials
from kmq.config import Config


def base_settings(config: Config, client_id: str) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "bootstrap.servers": config.bootstrap_servers, "client.id": client_id, "logger": logs.librdkafka_logger(),
        # Refused credentials reach only error_cb: recorded, so a wait fails at once naming them (metadata.py).
        "error_cb": Credentials.watcher(config.bootstrap_servers, config.kafka.get("sasl.username", "")),
    }
    settings.update(config.kafka)
    return settings


#: librdkafka's broker thread spins while a partition's messages wait behind the idempotent producer's five in-flight
#: requests to a leader that answers nothing (a broker cut off, not crashed: the connection looks up), until the first
#: of them times out and the connection is taken down (socket.max.fails 1). 10 s instead of 30 s bounds that spin,
#: and sends the writes to the new leader 20 s sooner; a broker taking longer than 10 s to acknowledge a produce
#: request is retried, with no duplicate (idempotence). ``kafka`` in the config overrides it.
PRODUCER_DEFAULTS: dict[str, Any] = {"request.timeout.ms": 10_000}


def messages_producer_settings(config: Config, client_id: str) -> dict[str, Any]:
    return {
        **PRODUCER_DEFAULTS,
        **base_settings(config, client_id),
        "enable.idempotence": True,
        # kafka-mq-go spreads one queue over all partitions; Python's default would pin a queue to one. A Producer
        # takes them in turn once it knows how many there are (PolledProducer.next_partition): this until then.
        "partitioner": "random",
        "linger.ms": 5,
        "message.max.bytes": config.max_payload_bytes + 100_000,
        **config.producer_kafka,
    }


def markers_producer_settings(config: Config, client_id: str) -> dict[str, Any]:
    return {
        **PRODUCER_DEFAULTS,
        **base_settings(config, client_id),
        "enable.idempotence": True,  # implies acks=all and keeps a queue's markers in order across retries
        "partitioner": "murmur2_random",  # Java-compatible: a queue's markers share one partition with Go's
        # kmq batches markers itself (a Start record per poll batch, settles every settle_linger_ms): a linger here
        # only delays the Start a hand-out waits for (2 ms cost ~25% of consumer throughput).
        "linger.ms": 0,
        # A Start carries the payload plus its headers and the marker fields.
        "message.max.bytes": config.max_payload_bytes + 200_000,
    }


def consumer_settings(config: Config, group: str, client_id: str) -> dict[str, Any]:
    settings = {
        **base_settings(config, client_id),
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "partition.assignment.strategy": config.assignment_strategy,
        "enable.partition.eof": False,
        **config.consumer_kafka,
    }
    if config.client_id:
        settings["group.instance.id"] = config.client_id
    return settings


def reader_settings(config: Config, group: str, client_id: str) -> dict[str, Any]:
    """A consumer that reads given offsets back (no group membership, no commits): the tracker's read-back."""
    return {
        **consumer_settings(config.replace(client_id=""), group, client_id),
        "enable.partition.eof": True,  # the end of a partition ends a range: what it did not hold is not there
        "auto.offset.reset": "error",  # never read from elsewhere than asked
        "fetch.wait.max.ms": 20,  # a range's end is read at once, not after the broker's half-second hold
        # Memory stays within what one round reads ahead, whatever the payloads.
        "queued.max.messages.kbytes": 16384,
        "fetch.max.bytes": 16 * 1024 * 1024,
    }


def instance_id() -> str:
    """Who writes a marker: host and process, short and set once per process."""
    return f"{socket.gethostname()[:32]}:{os.getpid()}"


