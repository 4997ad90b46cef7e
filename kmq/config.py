"""kmq's configuration: one frozen, validated value, loadable from code, YAML (kafka-mq-go's keys too) and env."""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from kmq.errors import ConfigError
from kmq.topic_sets import DEFAULT_SET, Route, Routing, TopicSet, parse_routes, parse_sets, route_data
from kmq.wire import CONSUMER_GROUP_PREFIX, PRIVATE_GROUP_PREFIX, REDRIVE_GROUP_PREFIX, TRACKER_GROUP, consumer_group
from kmq.wire.control import control_topic

MAX_REDELIVERY_TIMEOUT_MS = 12 * 60 * 60 * 1000
#: Bounds of the group session timeout ``session_follows_redelivery`` derives: the broker's default minimum
#: (group.min.session.timeout.ms) and librdkafka's default.
SESSION_TIMEOUT_BOUNDS_MS = (6_000, 45_000)
#: A poison message is dead-lettered after this many deliveries unless told otherwise (Celery's autoretry stops after
#: 3 retries, Dramatiq after 20, RabbitMQ quorum queues after 20 deliveries): with the worker's default backoff
#: (1 s doubling, 300 s at most) the last of 10 deliveries comes about 8 minutes after the first.
DEFAULT_MAX_DELIVERIES = 10
#: ``marker_format`` values: kmq's batched records (default), or kafka-mq-go's one record per marker.
MARKER_FORMAT_KMQ = "kmq"
MARKER_FORMAT_KAFKA_MQ_GO = "kafka-mq-go"
MARKER_FORMATS = (MARKER_FORMAT_KMQ, MARKER_FORMAT_KAFKA_MQ_GO)
#: ``start_markers`` values: Starts that name their record, or that copy its payload.
START_REFERENCE, START_COPY = "reference", "copy"
START_MARKERS = (START_REFERENCE, START_COPY)
#: ``rebalance_protocol`` values. librdkafka cannot offer an eager and a cooperative strategy at once, and members
#: of one group need one in common: kafka-mq-go's consumers and trackers use librdkafka's default (eager).
REBALANCE_AUTO, REBALANCE_COOPERATIVE, REBALANCE_EAGER = "auto", "cooperative", "eager"
REBALANCE_PROTOCOLS = (REBALANCE_AUTO, REBALANCE_COOPERATIVE, REBALANCE_EAGER)
#: The partition.assignment.strategy of each protocol; the eager one is kafka-mq-go's (librdkafka's default).
ASSIGNMENT_STRATEGIES = {REBALANCE_COOPERATIVE: "cooperative-sticky", REBALANCE_EAGER: "range,roundrobin"}
#: ``expired_messages`` values.
EXPIRED_ACTIONS = ("dead-letter", "drop")
ENV_PREFIX = "KMQ_"
#: KMQ_* variables that other parts of kmq read (not configuration fields): anything else is a typo.
OTHER_ENV = frozenset({"KMQ_CONFIG", "KMQ_LOG_LEVEL", "KMQ_CACHE_DIR", "KMQ_BROKER_VERSION", "KMQ_BENCH_QUICK",
                       "KMQ_BENCH_ONLY", "KMQ_DEMO_LOGS", "KMQ_AUDIT_DRIVER_MEMORY", "KMQ_CLUSTER_BOOTSTRAP_SERVERS",
                       "KMQ_FAULT_RATE", "KMQ_FAULT_REDELIVERY_TIMEOUT_MS", "KMQ_FAULT_SESSION_TIMEOUT_MS",
                       "KMQ_FAULT_HANDLER"})
#: The web console's own variables (kmq.console.settings checks them).
CONSOLE_ENV_PREFIX = "KMQ_CONSOLE_"

#: The fields holding librdkafka settings: for every client, for consumers, for the messages producers.
KAFKA_MAPPINGS = ("kafka", "consumer_kafka", "producer_kafka")

# librdkafka settings kmq sets itself; passing them through `kafka` would break its guarantees.
OWNED_KAFKA_KEYS = frozenset({
    "bootstrap.servers", "group.id", "group.instance.id", "enable.auto.commit", "enable.auto.offset.store",
    "auto.offset.reset", "partitioner", "enable.idempotence", "acks", "partition.assignment.strategy",
})
SECRET_KAFKA_KEYS = frozenset({"sasl.password", "sasl.oauthbearer.client.secret", "ssl.key.password",
                               "ssl.keystore.password", "ssl.key.pem", "sasl.oauthbearer.config"})

# kafka-mq-go's YAML keys (durations in ms) → kmq's field names.
GO_KEYS = {
    "bootstrap-servers": "bootstrap_servers",
    "message-topic": "message_topic",
    "marker-topic": "marker_topic",
    "redelivery-timeout": "redelivery_timeout_ms",
    "consumer-receive-buffer-capacity": "receive_buffer_capacity",
    "consumer-next-message-timeout": "next_message_timeout_ms",
    "consumer-max-messages-per-commit": "max_messages_per_commit",
    "redelivery-tracker.use-now-if-no-marker-seen": "use_now_if_no_marker_seen_ms",
    "redelivery-tracker.num-offsets-per-commit": "num_offsets_per_commit",
}


def _positive(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(name, f"must be a positive integer, got {value!r}")


def _non_negative(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(name, f"must be a non-negative integer, got {value!r}")


def _topic(name: str, value: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(name, "must not be empty")
    if len(value) > 249 or not all(c.isalnum() or c in "._-" for c in value):
        raise ConfigError(name, f"{value!r} is not a legal Kafka topic name ([a-zA-Z0-9._-], at most 249)")


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    """Everything the library, the tracker and the CLI need; every field is checked at construction.

    Durations are integer milliseconds (``*_ms``). ``kafka`` passes extra librdkafka settings
    (``security.protocol``, ``sasl.*``, ``ssl.*`` …) to every client kmq creates.
    """

    #: Kafka bootstrap servers (required).
    bootstrap_servers: str
    #: The topic all logical queues share.
    message_topic: str = "kmq.messages"
    #: Start/KeepAlive/End markers; must use LogAppendTime.
    marker_topic: str = "kmq.markers"
    #: Where rejected and over-delivered messages go; "" means ``<message_topic>.dlq``.
    dead_letter_topic: str = ""
    #: Silence after which a message is redelivered (at most 12 h); keep-alives run every half of it.
    redelivery_timeout_ms: int = 60_000
    #: The most messages one Start batch holds; a consumer holds up to ``start_pipeline_depth`` such batches read
    #: from Kafka ahead of ``receive`` (Starting, committing, or Started and committed in the ready buffer).
    receive_buffer_capacity: int = 500
    #: Messages read and not yet settled (Started, buffered or handed out); when reached, no more are Started.
    max_in_flight: int = 2_000
    #: Start batches (each of up to ``receive_buffer_capacity`` records) a consumer holds ahead of ``receive``:
    #: Starting, committing or buffered. Each batch waits two round trips (its Starts durable, its offsets
    #: committed) before a receive may take it; with more batches on their way those waits overlap.
    start_pipeline_depth: int = 3
    #: Records read ahead (fetched, not yet Started) past which fetching pauses: the memory bound while workers are
    #: stalled. While they keep up, read-ahead stays near 4 Start batches and librdkafka's own queue holds the rest.
    max_read_ahead_records: int = 20_000
    #: "kmq": batched marker records (fast; needs kmq trackers). "kafka-mq-go": one record per marker,
    #: byte-compatible with kafka-mq-go; required when any Go consumer or tracker shares the topics.
    marker_format: str = MARKER_FORMAT_KMQ
    #: kmq marker format only: "reference" (a Start names its record on the messages topic, a tracker reads it back
    #: when redelivering; used while the topics' retention allows, see kmq._kafka.retention) or "copy" (a Start
    #: carries the payload, as kafka-mq-go's do).
    start_markers: str = START_REFERENCE
    #: How consumer and tracker groups rebalance: "cooperative" (incremental, kmq's choice), "eager" (what
    #: kafka-mq-go's members use: needed to share a group with them), or "auto": eager with the kafka-mq-go marker
    #: format, cooperative with kmq's.
    rebalance_protocol: str = REBALANCE_AUTO
    #: How long an ack, release or keep-alive may wait to share a markers record with others.
    settle_linger_ms: int = 5
    #: Settles that make the consumer write their record at once, without waiting ``settle_linger_ms``.
    settle_batch_size: int = 500
    #: Commit after this many other queues' records.
    max_messages_per_commit: int = 1_000
    #: One poll's wait.
    next_message_timeout_ms: int = 1_000
    #: Larger payloads are refused with PayloadTooLargeError.
    max_payload_bytes: int = 900_000
    #: Deliveries after which a message is dead-lettered (reason ``failed N time(s), last: …`` from a worker, ``max
    #: deliveries (N) reached`` from a tracker) instead of redelivered: a poison message stops. 0 = never (retried
    #: for ever, as kafka-mq-go does; SQS's maxReceiveCount).
    max_deliveries: int = DEFAULT_MAX_DELIVERIES
    #: Stable consumer identity; becomes ``group.instance.id`` (static membership) when set.
    client_id: str = ""
    #: How long to wait for an unreachable broker before a clear error.
    connect_timeout_ms: int = 10_000
    #: Tracker clock: hold the newest marker time this long before extrapolating (0: always extrapolate).
    use_now_if_no_marker_seen_ms: int = 0
    #: The tracker commits after this many markers ...
    num_offsets_per_commit: int = 1_000
    #: ... or this often.
    tracker_commit_interval_ms: int = 1_000
    #: A worker or tracker holding no partition this long while its group needs it (markers partitions no tracker
    #: holds, records waiting for a queue) says so on /readyz and /healthz (503, with the reason).
    unassigned_unhealthy_ms: int = 30_000
    #: ... and past this, /livez asks for a restart and a tracker exits with status 1 and one line (0 = never).
    unassigned_exit_ms: int = 180_000
    #: Serve /metrics and /healthz on this port (worker and tracker; 0 = off), bound to ``metrics_host``.
    metrics_port: int = 0
    #: The metrics endpoint's interface: loopback unless told otherwise ("0.0.0.0" for all).
    metrics_host: str = "127.0.0.1"
    #: The trackers' consumer group. Two kmq deployments on one cluster need different groups (and topics);
    #: kafka-mq-go's trackers use the default.
    tracker_group: str = TRACKER_GROUP
    #: A queue's consumer group is this prefix and the queue's name (kafka-mq-go's ``kafka-mq-``). Two deployments
    #: on one cluster whose queues share names need different prefixes (and a tracker group each).
    consumer_group_prefix: str = CONSUMER_GROUP_PREFIX
    #: Per queue, the time to live of a message sent without its own ``ttl`` (ms; YAML only). An expired message is
    #: never handed to a handler: see ``expired_messages``.
    queue_ttl_ms: Mapping[str, int] = field(default_factory=dict)
    #: Per queue, how many messages of one message group may be in flight at once (YAML only; default 1: in order,
    #: one at a time). More than 1 gives up order within a group: groups are then fairness keys only.
    group_concurrency: Mapping[str, int] = field(default_factory=dict)
    #: Grouped messages a consumer holds read and not finished (payloads in memory), past which it reads no
    #: further until some finish: the bound on how far a group waiting on a slow message lets others get ahead.
    group_buffer_records: int = 200_000
    #: What a consumer does with an expired message: "dead-letter" it (reason "expired") or "drop" it; both count.
    expired_messages: str = "dead-letter"
    #: Queues whose consumers commit and hand out without a Start marker: never redelivered, so a crash loses what
    #: was handed out and unsettled (at most once). A YAML list, or names separated by commas.
    at_most_once_queues: tuple[str, ...] = ()
    #: A send with a dedup id (``send(dedup_id=…)``, or its content's hash on a ``content_dedup_queues`` queue) is
    #: never handed out when a send with the same id reached its queue less than this before it (SQS's 5 minutes;
    #: docs/concepts/dedup.md). 0 turns the consumers' check off.
    dedup_window_ms: int = 300_000
    #: How far producers' clocks may disagree: a consumer that takes a partition over reads this much more than one
    #: window back to rebuild what it must remember.
    dedup_clock_skew_ms: int = 30_000
    #: Queues whose sends without a ``dedup_id`` are deduplicated by content (SHA-256 of payload and user headers,
    #: as SQS's content-based deduplication). A YAML list, or names separated by commas.
    content_dedup_queues: tuple[str, ...] = ()
    #: A recurring schedule's tick is fired by its primary tracker at its time, and by any other tracker this much
    #: later unless that one has seen the primary's "fired" record (docs/concepts/dedup.md, schedules).
    schedule_standby_delay_ms: int = 500
    #: A tick no tracker could fire within this of its time is missed: its schedule's ``missed`` policy says whether
    #: it is fired late (``fire-last``: the latest missed tick, once) or not (``skip``).
    schedule_misfire_grace_ms: int = 60_000
    #: librdkafka settings for every client (``security.protocol``, ``sasl.*``, ``ssl.*`` …); kmq-owned keys are
    #: refused, secrets never logged.
    kafka: Mapping[str, str] = field(default_factory=dict)
    #: librdkafka settings for consumers only (``session.timeout.ms``, ``max.poll.interval.ms`` …).
    consumer_kafka: Mapping[str, str] = field(default_factory=dict)
    #: Named topic sets: set name → ``{prefix: …}`` (default prefix ``kmq.<name>``); every topic and group of a set
    #: is under its prefix (docs/concepts/topic-sets.md). YAML only.
    topic_sets: Mapping[str, Mapping[str, str] | None] = field(default_factory=dict)
    #: Which queues live in which set: ``{queues: PATTERN | [PATTERN, …], set: NAME, draining: NAME}`` in order,
    #: the first match wins; a queue no route matches is in the default set (the topics above). YAML only.
    routes: Sequence[Route | Mapping[str, Any]] = ()
    _routing: Routing = field(init=False, repr=False, compare=False)
    #: librdkafka settings for the producers of messages only (``linger.ms``: 5 by default, the batching a burst of
    #: sends gets against the latency of one; ``compression.type`` …): the library's, Celery's and Dramatiq's.
    producer_kafka: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.bootstrap_servers, str) or not self.bootstrap_servers.strip():
            raise ConfigError("bootstrap_servers", "must not be empty")
        _topic("message_topic", self.message_topic)
        _topic("marker_topic", self.marker_topic)
        if self.dead_letter_topic:
            _topic("dead_letter_topic", self.dead_letter_topic)
        if self.marker_topic == self.message_topic:
            raise ConfigError("marker_topic", "must differ from message_topic")
        _positive("redelivery_timeout_ms", self.redelivery_timeout_ms)
        if self.redelivery_timeout_ms > MAX_REDELIVERY_TIMEOUT_MS:
            raise ConfigError("redelivery_timeout_ms",
                              f"{self.redelivery_timeout_ms} is more than 12 h ({MAX_REDELIVERY_TIMEOUT_MS})")
        if self.redelivery_timeout_ms < 2:
            raise ConfigError("redelivery_timeout_ms", "must be at least 2 ms (keep-alives run every half)")
        if self.marker_format not in MARKER_FORMATS:
            raise ConfigError("marker_format", f"must be one of {', '.join(MARKER_FORMATS)}, "
                                               f"got {self.marker_format!r}")
        if self.start_markers not in START_MARKERS:
            raise ConfigError("start_markers", f"must be one of {', '.join(START_MARKERS)}, got {self.start_markers!r}")
        if self.rebalance_protocol not in REBALANCE_PROTOCOLS:
            raise ConfigError("rebalance_protocol", f"must be one of {', '.join(REBALANCE_PROTOCOLS)}, "
                                                    f"got {self.rebalance_protocol!r}")
        _non_negative("settle_linger_ms", self.settle_linger_ms)
        for name in ("receive_buffer_capacity", "max_in_flight", "start_pipeline_depth", "max_messages_per_commit",
                     "settle_batch_size", "max_read_ahead_records", "group_buffer_records",
                     "next_message_timeout_ms", "max_payload_bytes", "connect_timeout_ms",
                     "num_offsets_per_commit", "tracker_commit_interval_ms", "unassigned_unhealthy_ms"):
            _positive(name, getattr(self, name))
        for name in ("max_deliveries", "use_now_if_no_marker_seen_ms", "metrics_port", "unassigned_exit_ms",
                     "dedup_window_ms", "dedup_clock_skew_ms", "schedule_standby_delay_ms",
                     "schedule_misfire_grace_ms"):
            _non_negative(name, getattr(self, name))
        if self.metrics_port > 65535:
            raise ConfigError("metrics_port", f"{self.metrics_port} is not a TCP port")
        if not isinstance(self.queue_ttl_ms, Mapping):
            raise ConfigError("queue_ttl_ms", "must be a mapping of queue name to milliseconds")
        for queue, ttl in self.queue_ttl_ms.items():
            _positive(f"queue_ttl_ms.{queue}", ttl)
        object.__setattr__(self, "queue_ttl_ms", MappingProxyType(dict(self.queue_ttl_ms)))
        if not isinstance(self.group_concurrency, Mapping):
            raise ConfigError("group_concurrency", "must be a mapping of queue name to a number of messages")
        for queue, limit in self.group_concurrency.items():
            _positive(f"group_concurrency.{queue}", limit)
        object.__setattr__(self, "group_concurrency", MappingProxyType(dict(self.group_concurrency)))
        if self.expired_messages not in EXPIRED_ACTIONS:
            raise ConfigError("expired_messages", f"must be one of {', '.join(EXPIRED_ACTIONS)}, "
                                                  f"got {self.expired_messages!r}")
        for field_name in ("at_most_once_queues", "content_dedup_queues"):
            object.__setattr__(self, field_name, _queue_names(field_name, getattr(self, field_name)))
        for name in ("metrics_host", "tracker_group", "consumer_group_prefix"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip() or not value.isprintable():
                raise ConfigError(name, f"must be a non-empty printable string, got {value!r}")
        if self.client_id and not self.client_id.isprintable():
            raise ConfigError("client_id", "must be printable")
        self._check_kafka()
        self._check_topic_sets()

    def _check_topic_sets(self) -> None:
        default = TopicSet(name=DEFAULT_SET, messages=self.message_topic, markers=self.marker_topic,
                           dead_letters=self.dlq_topic, control=control_topic(self.message_topic),
                           tracker_group=self.tracker_group, consumer_group_prefix=self.consumer_group_prefix,
                           redrive_group_prefix=REDRIVE_GROUP_PREFIX, private_group_prefix=PRIVATE_GROUP_PREFIX)
        named = parse_sets(self.topic_sets, default)
        routing = Routing(default, named)
        routes = parse_routes(self.routes, routing.sets)
        object.__setattr__(self, "topic_sets", MappingProxyType(
            {s.name: MappingProxyType({"prefix": s.acl_prefix[:-1]}) for s in named}))
        object.__setattr__(self, "routes", tuple(routes))
        object.__setattr__(self, "_routing", Routing(default, named, routes))

    def _check_kafka(self) -> None:
        for name in KAFKA_MAPPINGS:
            settings = getattr(self, name)
            if not isinstance(settings, Mapping):
                raise ConfigError(name, "must be a mapping of librdkafka settings")
            for key, value in settings.items():
                if key in OWNED_KAFKA_KEYS:
                    raise ConfigError(f"{name}.{key}", "is set by kmq itself and cannot be overridden")
                if not isinstance(value, str | int | float | bool):
                    raise ConfigError(f"{name}.{key}", f"must be a scalar, got {type(value).__name__}")
            # A copy, so a caller mutating its dict cannot change a frozen config.
            object.__setattr__(self, name, MappingProxyType({k: _scalar(v) for k, v in settings.items()}))

    @property
    def dlq_topic(self) -> str:
        """The dead-letter topic: ``dead_letter_topic``, or ``<message_topic>.dlq``."""
        return self.dead_letter_topic or f"{self.message_topic}.dlq"

    @property
    def eager_rebalance(self) -> bool:
        """Whether groups use the eager protocol (see ``rebalance_protocol``)."""
        if self.rebalance_protocol == REBALANCE_AUTO:
            return self.marker_format == MARKER_FORMAT_KAFKA_MQ_GO
        return self.rebalance_protocol == REBALANCE_EAGER

    @property
    def assignment_strategy(self) -> str:
        """The librdkafka ``partition.assignment.strategy`` kmq's consumers and trackers use."""
        return ASSIGNMENT_STRATEGIES[REBALANCE_EAGER if self.eager_rebalance else REBALANCE_COOPERATIVE]

    def consumer_group(self, queue: str) -> str:
        """The consumer group of ``queue`` in the default set (see ``consumer_group_prefix``); a routed queue's is
        ``topics_for(queue).consumer_group(queue)``."""
        return consumer_group(queue, self.consumer_group_prefix)

    def topics_for(self, queue: str) -> TopicSet:
        """The topic set ``queue`` lives in (``routes``: the first match; else the default set): where its messages
        are sent, read, tracked, counted and controlled. Every part of kmq asks this, never a ``*_topic`` field."""
        return self._routing.topics_for(queue)

    def reading_sets(self, queue: str) -> tuple[TopicSet, ...]:
        """Every set that may hold ``queue``'s messages: its own, then, while it moves (a route's ``draining``),
        the set it moves from."""
        return self._routing.reading_sets(queue)

    def topic_set(self, name: str) -> TopicSet:
        """The set called ``name`` (``default``, or a name in ``topic_sets``); ConfigError for another."""
        return self._routing.named(name)

    @property
    def all_topic_sets(self) -> tuple[TopicSet, ...]:
        """Every topic set, the default one first."""
        return tuple(self._routing.sets.values())

    @property
    def default_topics(self) -> TopicSet:
        """The default set: ``message_topic``, ``marker_topic`` and the names kafka-mq-go shares."""
        return self._routing.default

    @property
    def keep_alive_interval_ms(self) -> int:
        """How often a consumer writes keep-alives for a message in flight: half the redelivery timeout."""
        return self.redelivery_timeout_ms // 2

    @property
    def session_timeout_ms(self) -> int:
        """The consumer group session timeout (``session.timeout.ms`` in ``consumer_kafka`` or ``kafka``;
        librdkafka's default otherwise)."""
        raw = self.consumer_kafka.get("session.timeout.ms", self.kafka.get("session.timeout.ms", 45_000))
        return int(raw)

    def group_concurrency_of(self, queue: str) -> int:
        """How many messages of one group of ``queue`` may be in flight at once (``group_concurrency``)."""
        return self.group_concurrency.get(queue, 1)

    def redacted_kafka(self) -> dict[str, str]:
        """The passthrough settings with secrets replaced, for logs."""
        return {k: ("***" if k in SECRET_KAFKA_KEYS else v) for k, v in self.kafka.items()}

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        # Picklable (multiprocessing workers), although the passthrough mappings are read-only proxies.
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}
        for name in KAFKA_MAPPINGS:
            fields[name] = dict(getattr(self, name))
        fields["queue_ttl_ms"] = dict(self.queue_ttl_ms)
        fields["group_concurrency"] = dict(self.group_concurrency)
        fields["topic_sets"] = {name: dict(spec or {}) for name, spec in self.topic_sets.items()}
        fields["routes"] = [route_data(r) if isinstance(r, Route) else dict(r) for r in self.routes]
        return (_rebuild, (fields,))

    def replace(self, **changes: Any) -> Config:
        """A copy with ``changes`` applied (and checked)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Config:
        """Builds a config from kmq's field names or kafka-mq-go's YAML keys; unknown keys are errors."""
        return cls(**_normalise(data))

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Config:
        """Loads a YAML file, then applies ``KMQ_*`` environment overrides (``env`` defaults to os.environ)."""
        import yaml

        try:
            text = Path(path).read_text()
        except OSError as err:
            raise ConfigError("config_file", f"cannot read {path}: {err.strerror}") from err
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as err:
            # PyYAML's message spans lines (with a caret drawing): one line, with where.
            problem = getattr(err, "problem", None) or str(err).splitlines()[0]
            mark = getattr(err, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
            raise ConfigError("config_file", f"{path} is not valid YAML: {problem}{where}") from err
        if not isinstance(data, Mapping):
            raise ConfigError("config_file", f"{path} must hold a mapping of settings")
        return cls.load(data, env)

    @classmethod
    def load(cls, data: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> Config:
        """Builds a config from ``data`` with ``KMQ_<FIELD>`` environment variables on top."""
        merged = _normalise(data or {})
        overrides = _from_env(os.environ if env is None else env)
        for name in KAFKA_MAPPINGS:
            if name in overrides:
                overrides[name] = {**merged.get(name, {}), **overrides[name]}
        merged.update(overrides)
        if "bootstrap_servers" not in merged:
            raise ConfigError("bootstrap_servers", "missing: set it in the config file or KMQ_BOOTSTRAP_SERVERS")
        return cls(**merged)


def _queue_names(name: str, names: object) -> tuple[str, ...]:
    """A list of queue names, given as a list or a comma-separated string."""
    if isinstance(names, str):
        names = tuple(n.strip() for n in names.split(",") if n.strip())
    if not isinstance(names, list | tuple) or not all(isinstance(n, str) and n for n in names):
        raise ConfigError(name, f"must be a list of queue names, got {names!r}")
    return tuple(names)
def session_follows_redelivery(config: Config) -> Config:
    """``config`` with its consumers' group session timeout equal to the redelivery timeout (within 6-45 s: the
    broker's default group.min.session.timeout.ms and librdkafka's default), unless ``consumer_kafka`` sets it.

    A worker killed with ``kill -9`` keeps its partitions, and the messages on them (its unread ones, and the
    tracker's copies of what it held that land there) wait, until the group evicts it after the session timeout:
    45 s by default, beside a redelivery timeout of 10 s. A process killed while its group join was pending (a
    pool's second process joins a moment after the first) is even given partitions in the next generation, which
    come back a second session timeout later. The Celery transport and the Dramatiq broker use this; a ``client_id``
    per process (``{process}``) avoids both waits: a restarted process takes its predecessor's place at once.
    """
    if "session.timeout.ms" in config.consumer_kafka:
        return config
    low, high = SESSION_TIMEOUT_BOUNDS_MS
    session_ms = min(max(config.redelivery_timeout_ms, low), high)
    # Members learn of a rebalance by their heartbeat: a tenth of the session (1 s for 10 s; librdkafka's 3 s at
    # most), so a join ends soon and a process killed while its join is pending (it then holds partitions in the
    # next generation, which come back only when its own session ends: the second step of a two-step recovery)
    # has a short window to be.
    heartbeat_ms = config.consumer_kafka.get("heartbeat.interval.ms", str(min(3_000, max(500, session_ms // 10))))
    return config.replace(consumer_kafka={**config.consumer_kafka, "session.timeout.ms": str(session_ms),
                                          "heartbeat.interval.ms": heartbeat_ms})


def _rebuild(fields: dict[str, Any]) -> Config:
    return Config(**fields)


def _scalar(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


_FIELDS = {f.name: f for f in dataclasses.fields(Config) if f.init}
#: Fields whose YAML value is taken whole (a mapping or list of their own), never flattened into dotted keys.
_WHOLE = ("queue_ttl_ms", "group_concurrency", "topic_sets", "routes")


def _normalise(data: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    given_as: dict[str, str] = {}
    for raw_key, value in _flatten(data):
        key = GO_KEYS.get(raw_key, raw_key.replace("-", "_"))
        if key not in _FIELDS:
            names = sorted({*_FIELDS, *GO_KEYS})
            close = difflib.get_close_matches(raw_key, names, n=1) or difflib.get_close_matches(key, names, n=1)
            raise ConfigError(raw_key, "unknown configuration key" + (f" (did you mean {close[0]}?)" if close else ""))
        if key in given_as:  # e.g. bootstrap-servers and bootstrap_servers: one would silently win
            raise ConfigError(raw_key, f"names the same setting as {given_as[key]}: give one of them")
        given_as[key] = raw_key
        out[key] = value
    return out


def _flatten(data: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    items: list[tuple[str, Any]] = []
    for key, value in data.items():
        name = f"{prefix}{key}"
        if name in _WHOLE:
            items.append((name, value))
        elif name in KAFKA_MAPPINGS:
            if value is not None and not isinstance(value, Mapping):
                raise ConfigError(name, f"must be a mapping of librdkafka settings, got {type(value).__name__}")
            items.append((name, dict(value or {})))
        elif isinstance(value, Mapping):
            items.extend(_flatten(value, f"{name}."))
        else:
            items.append((name, value))
    return items


def _from_env(env: Mapping[str, str]) -> dict[str, Any]:
    known = {ENV_PREFIX + name.upper() for name in _FIELDS} | OTHER_ENV
    for name in env:
        if name.startswith(ENV_PREFIX) and name not in known and not name.startswith(
                (*(f"{ENV_PREFIX}{mapping.upper()}_" for mapping in KAFKA_MAPPINGS), CONSOLE_ENV_PREFIX)):
            close = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigError(name, f"unknown environment variable{hint}")
    out: dict[str, Any] = {}
    for name, fld in _FIELDS.items():
        raw = env.get(ENV_PREFIX + name.upper())
        if raw is None or name in KAFKA_MAPPINGS:
            continue
        if fld.type in ("int", int):
            try:
                out[name] = int(raw)
            except ValueError:
                raise ConfigError(name, f"{ENV_PREFIX}{name.upper()}={raw!r} is not an integer") from None
        else:
            out[name] = raw
    for name in KAFKA_MAPPINGS:
        full = f"{ENV_PREFIX}{name.upper()}_"
        settings = _json_settings(name, env.get(f"{ENV_PREFIX}{name.upper()}"))
        settings.update({k[len(full):].lower().replace("_", "."): v for k, v in env.items() if k.startswith(full)})
        if settings:
            out[name] = settings
    return out


def _json_settings(name: str, raw: str | None) -> dict[str, Any]:
    """``KMQ_KAFKA='{"security.protocol": "SSL"}'``: a JSON object of librdkafka settings (``KMQ_KAFKA_<KEY>``
    variables, one a setting, go on top)."""
    if raw is None:
        return {}
    variable = f"{ENV_PREFIX}{name.upper()}"
    example = f'{variable}=\'{{"security.protocol": "SSL"}}\' or {variable}_SECURITY_PROTOCOL=SSL'
    try:
        settings = json.loads(raw)
    except ValueError:
        raise ConfigError(variable, f"must be a JSON object of librdkafka settings ({example}), got {raw!r}") from None
    if not isinstance(settings, dict):
        raise ConfigError(variable, f"must be a JSON object of librdkafka settings ({example}), got {raw!r}")
    return settings
