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


#: A request to a broker that answers nothing (frozen, or cut off: its connection still looks up) waits librdkafka's
#: socket.timeout.ms, 60 s, before it fails and the connection is taken down; only then do a produce request's messages
#: go to the new leader (``request.timeout.ms`` is not that: it is the broker's own wait for its replicas). Meanwhile a
#: Start batch behind it is not acknowledged (the worker's hand-out stops), an idempotent producer's broker thread
#: wakes again and again for the messages queued behind its five requests in flight, and a consumer's offset commit
#: holds a member whose assignment was lost out of its group (librdkafka rejoins only once every commit in flight is
#: answered). 10 s bounds each of these; group requests (join, sync, heartbeat) keep their own session-based
#: timeouts, and a fetch waits this plus fetch.wait.max.ms. ``kafka`` in the config overrides it.
#: A produce request given up on is sent again, and idempotence keeps the broker from writing it twice.
CLIENT_DEFAULTS: dict[str, Any] = {"socket.timeout.ms": 10_000}

#: Once a consumer's prefetched records pass queued.max.messages.kbytes (64 MB: ~250,000 records of 256 B, a backlog
#: any busy queue has), librdkafka postpones the partition's next fetch by fetch.queue.backoff.ms, 1 s by default, and
#: does not wake when the application drains the queue meanwhile: a consumer reading a backlog stalled up to a second
#: every ~64 MB (300,000 records of 256 B, one consumer: 114-119k msgs/s with stalls of 0.3-0.5 s, 177-284k at 20 ms).
#: The fetcher's check every 20 ms while the queue stays full is within noise (a consumer nobody receives from:
#: 0.75-0.98% of a core at 1 s, 1.06-1.11% at 20 ms). The same rule holds the tracker's read-back (16 MB of prefetch).
CONSUMER_DEFAULTS: dict[str, Any] = {"fetch.queue.backoff.ms": 20}


def messages_producer_settings(config: Config, client_id: str) -> dict[str, Any]:
    return {
        **CLIENT_DEFAULTS,
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
        **CLIENT_DEFAULTS,
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
        **CLIENT_DEFAULTS,
        **CONSUMER_DEFAULTS,
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
        "enable.partition.eof": True,  # a record still past the end when a round gives up: the reason says so
        "auto.offset.reset": "error",  # never read from elsewhere than asked
        "fetch.wait.max.ms": 20,  # a range's end is read at once, not after the broker's half-second hold
        # Memory stays within what one round reads ahead, whatever the payloads.
        "queued.max.messages.kbytes": 16384,
        "fetch.max.bytes": 16 * 1024 * 1024,
    }


def instance_id() -> str:
    """Who writes a marker: host and process, short and set once per process."""
    return f"{socket.gethostname()[:32]}:{os.getpid()}"


