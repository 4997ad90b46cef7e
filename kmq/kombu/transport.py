"""The kombu Transport: one per kombu Connection; builds the kmq Config and checks the broker on connect."""

from __future__ import annotations

import socket
import threading
from typing import Any

import confluent_kafka
import structlog
from confluent_kafka.admin import AdminClient
from kombu.transport import virtual

from kmq import Config, KafkaClientError, KmqError, Service, TopicError
from kmq.kombu import settings
from kmq.kombu.channel import Channel

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

#: Seconds between polls of an idle channel's consumers: the latency an idle worker adds to a new task. kmq's
#: consumers fetch in their own threads, so a poll is a look at a local buffer.
DEFAULT_POLLING_INTERVAL_S = 0.02

_checked_lock = threading.Lock()
_checked: list[Config] = []  # configs whose topics this process has checked (Config is not hashable)


class Transport(virtual.Transport):
    """kmq as a kombu transport: ``Connection('kmq://host:9092')`` (after ``import kmq.kombu``) or
    ``Connection('kmq://host:9092', transport='kmq.kombu:Transport')``; Celery: ``broker_url='kmq://host:9092'``.

    kombu parses the URL (one host); ``kmq://`` alone takes the brokers from the kmq config (``transport_options
    ['kmq']``, ``config_file``) or ``KMQ_BOOTSTRAP_SERVERS``, which may list several.
    """

    Channel = Channel
    #: None, so that kombu leaves a URL without a port portless: ``kmq://`` (kombu's "localhost", no port) then
    #: means "the brokers of the kmq config"; a host without a port gets 9092 in ``settings.bootstrap_from_url``.
    default_port = None
    polling_interval = DEFAULT_POLLING_INTERVAL_S
    driver_type = "kafka"
    driver_name = "kmq"
    connection_errors = (*virtual.Transport.connection_errors, KafkaClientError)
    channel_errors = (*virtual.Transport.channel_errors, KmqError)
    implements = virtual.Transport.implements.extend(
        asynchronous=False, exchange_type=frozenset(["direct", "topic", "fanout"]), heartbeats=False)

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        options = client.transport_options or {}
        self.kmq_options = settings.options_from(options)
        self.kmq_config = settings.config_from(client.hostname, client.port, options)
        #: Kept with kombu's bindings (its BrokerState is per connection too): when each queue was first bound
        #: (a broadcast subscriber reads from then), and the queues declared auto_delete or exclusive.
        self.kmq_bound_at: dict[str, int] = {}
        self.kmq_transient: set[str] = set()

    def establish_connection(self) -> Any:
        """Fails within the connection's ``connect_timeout`` when no broker answers, and with a TopicError when
        kmq's topics are missing (unless ``create_topics``)."""
        timeout_s = float(self.client.connect_timeout or 5)
        config = self.kmq_config
        _any_accepts(config.bootstrap_servers, timeout_s)
        # Quiet: its failure is the error raised below, and a refused connection would be logged every 50 ms
        # for as long as the exception (which holds this frame) lives.
        admin = AdminClient({"bootstrap.servers": config.bootstrap_servers, **config.kafka, "log_level": 0})
        try:
            admin.list_topics(timeout=timeout_s)
        except confluent_kafka.KafkaException as exc:
            raise KafkaClientError(f"no Kafka broker answers at {config.bootstrap_servers} within {timeout_s:g}s: "
                                   f"{exc.args[0]}", retriable=True) from exc
        _check_topics(config, self.kmq_options)
        return super().establish_connection()

    def driver_version(self) -> str:
        return str(confluent_kafka.version()[0])


def _any_accepts(bootstrap_servers: str, timeout_s: float) -> None:
    """Fails at once when no bootstrap server accepts a TCP connection (librdkafka would retry for the whole
    timeout, which leaves kombu's failover no time to try the next URL)."""
    errors = []
    for server in bootstrap_servers.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
            return
        except (OSError, ValueError) as err:
            errors.append(f"{server}: {err}")
    raise KafkaClientError(f"no Kafka broker accepts connections: {'; '.join(errors)}", retriable=True)


def _check_topics(config: Config, options: settings.TransportOptions) -> None:
    with _checked_lock:
        if any(known == config for known in _checked):
            return
        service = Service(config)
        try:
            service.check_topics()
        except TopicError:
            if not options.create_topics:
                raise
            service.create_topics(partitions=options.partitions)
            log.info("kombu_topics_created", message_topic=config.default_topics.messages)
        _checked.append(config)
