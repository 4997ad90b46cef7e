"""The kmq Config and transport options of a kombu connection: ``kmq://host:9092,host2:9092`` plus
``transport_options``. Pure (reads a YAML file if one is named)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kmq import Config, ConfigError
from kmq.config import session_follows_redelivery

DEFAULT_PORT = 9092
#: kombu's Connection fills in this hostname when none was given: it means "not said", not "this host".
KOMBU_DEFAULT_HOST = "localhost"


@dataclass(frozen=True, slots=True, kw_only=True)
class TransportOptions:
    """The transport's own options (``broker_transport_options`` in Celery), checked once."""

    #: Prepended to every kombu queue name to form the kmq queue (tenants, test isolation), as SQS's option.
    queue_name_prefix: str = ""
    #: How long a synchronous get (``basic_get``, ``SimpleQueue.get_nowait``) waits for a message, as SQS's
    #: option of the same name; a consumer created by the call first waits (up to connect timeout) for partitions.
    wait_time_seconds: float = 1.0
    #: False: ``publish`` returns once the record is queued in the client, not durable (failures are logged).
    confirm_publish: bool = True
    #: Create kmq's topics (``kmq topics create`` defaults) when they are missing, instead of failing.
    create_topics: bool = False
    #: Partitions of topics this transport creates (messages topic; broadcast topic has one).
    partitions: int = 6
    #: The topic carrying fanout (and unbound-exchange) publishes to live subscribers; "" means
    #: ``<message_topic>.broadcast``.
    broadcast_topic: str = ""
    #: At most this many records are read to count a queue's waiting messages (``_size``); past it the count is a
    #: lower bound.
    size_scan_limit: int = 100_000
    #: Seconds a queue's size is reused before it is counted again (queue declarations ask for it each time).
    size_cache_seconds: float = 2.0


TRANSPORT_OPTION_NAMES = frozenset(TransportOptions.__dataclass_fields__) | {
    "kmq", "config_file", "visibility_timeout", "polling_interval",
    # kombu and Celery set these on every transport; they mean nothing here.
    "body_encoding", "deadletter_queue", "max_retries", "interval_start", "interval_step", "interval_max",
    "confirm_timeout", "hub", "fanout_prefix", "fanout_patterns", "connect_retries_timeout", "errback",
}


def bootstrap_from_url(hostname: str | None, port: int | None) -> str:
    """The bootstrap servers a kombu connection names (kombu parsed ``kmq://host:port``), or "" when it names
    none: ``kmq://`` alone, or kombu's default host without a port (then the kmq config or
    ``KMQ_BOOTSTRAP_SERVERS`` decides). A comma-separated list (``transport=`` given with a plain host) is kept."""
    text = (hostname or "").strip()
    if not text or (text == KOMBU_DEFAULT_HOST and not port):
        return ""
    hosts = [h.strip() for h in text.split(",") if h.strip()]
    default_port = port or DEFAULT_PORT
    return ",".join(h if _has_port(h) else f"{h}:{default_port}" for h in hosts)


def _has_port(host: str) -> bool:
    if host.startswith("["):  # [::1]:9092
        return "]:" in host
    return ":" in host


def options_from(transport_options: Mapping[str, Any]) -> TransportOptions:
    unknown = sorted(set(transport_options) - TRANSPORT_OPTION_NAMES)
    if unknown:
        raise ConfigError("transport_options", f"unknown kmq transport option(s): {', '.join(unknown)}")
    fields = {k: v for k, v in transport_options.items() if k in TransportOptions.__dataclass_fields__}
    options = TransportOptions(**fields)
    if options.wait_time_seconds < 0:
        raise ConfigError("wait_time_seconds", f"must be >= 0, got {options.wait_time_seconds!r}")
    if options.size_scan_limit < 1 or options.partitions < 1:
        raise ConfigError("size_scan_limit/partitions", "must be positive")
    return options


def config_from(hostname: str | None, port: int | None, transport_options: Mapping[str, Any],
                env: Mapping[str, str] | None = None) -> Config:
    """The kmq Config: ``transport_options['kmq']`` (a Config, or a mapping of kmq's keys) over the YAML file
    ``config_file``, then ``KMQ_*`` variables, then the URL's hosts and ``visibility_timeout`` (seconds)."""
    given = transport_options.get("kmq")
    if isinstance(given, Config):
        config = given
    else:
        if given is not None and not isinstance(given, Mapping):
            raise ConfigError("transport_options.kmq", f"must be a kmq.Config or a mapping, got {type(given).__name__}")
        data: dict[str, Any] = {"bootstrap_servers": f"{KOMBU_DEFAULT_HOST}:{DEFAULT_PORT}"}
        path = transport_options.get("config_file")
        if path:
            data.update(_yaml(str(path)))
        data.update(given or {})
        config = Config.load(data, env)
    hosts = bootstrap_from_url(hostname, port)
    changes: dict[str, Any] = {}
    if hosts:
        changes["bootstrap_servers"] = hosts
    timeout = transport_options.get("visibility_timeout")
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ConfigError("visibility_timeout", f"must be a positive number of seconds, got {timeout!r}")
        changes["redelivery_timeout_ms"] = max(2, round(timeout * 1000))
    config = config.replace(**changes) if changes else config
    # A dead worker's partitions (and the tracker's copies of its tasks that land there) wait for the group to evict
    # it: as long as the visibility timeout, not Kafka's 45 s.
    return session_follows_redelivery(config)


def _yaml(path: str) -> dict[str, Any]:
    import yaml

    try:
        with open(path) as handle:
            data = yaml.safe_load(handle) or {}
    except OSError as err:
        raise ConfigError("config_file", f"cannot read {path}: {err.strerror}") from err
    except yaml.YAMLError as err:
        raise ConfigError("config_file", f"{path} is not valid YAML: {str(err).splitlines()[0]}") from err
    if not isinstance(data, dict):
        raise ConfigError("config_file", f"{path} must hold a mapping of settings")
    return data
