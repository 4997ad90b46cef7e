"""ClientFactory: the one seam through which the consumer and the tracker get their Kafka clients.

The facades build no client themselves; they ask a factory (kafka-mq-go's ``pkg/kafka`` ClientFactory is the model),
so their own logic (rebalances in both protocols, a client failing inside a callback, close with the broker gone,
pause across a revoke) is unit-tested with fakes (tests/unit/fakes.py) and runs on confluent-kafka in production.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import structlog
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka.admin import AdminClient

from kmq._kafka.control import ControlFollower
from kmq._kafka.group_view import GroupAdmin, KafkaGroupAdmin
from kmq._kafka.producer import PolledProducer
from kmq._kafka.retention import Retention, check_retention
from kmq._kafka.settings import base_settings
from kmq.config import Config
from kmq.delivery import Delivery
from kmq.errors import KmqError
from kmq.topic_sets import TopicSet
from kmq.wire import MessageId
from kmq.wire.control import ControlState

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)


class GroupClient(Protocol):
    """The calls kmq makes on a group member (confluent_kafka.Consumer has them all)."""

    def subscribe(self, topics: list[str], on_assign: Callable[..., None] = ..., on_revoke: Callable[..., None] = ...,
                  on_lost: Callable[..., None] = ...) -> None: ...
    def poll(self, timeout: float = ...) -> Any: ...
    def consume(self, num_messages: int = ..., timeout: float = ...) -> list[Any]: ...
    def assign(self, partitions: list[Any]) -> None: ...
    def incremental_assign(self, partitions: list[Any]) -> None: ...
    def unassign(self) -> None: ...
    def seek(self, partition: Any) -> None: ...
    def incremental_unassign(self, partitions: list[Any]) -> None: ...
    def assignment(self) -> list[Any]: ...
    def pause(self, partitions: list[Any]) -> None: ...
    def resume(self, partitions: list[Any]) -> None: ...
    def commit(self, message: Any = ..., offsets: Any = ..., asynchronous: bool = ...) -> Any: ...
    def committed(self, partitions: list[Any], timeout: float = ...) -> list[Any]: ...
    def get_watermark_offsets(self, partition: Any, timeout: float = ..., cached: bool = ...) -> Any: ...
    def list_topics(self, topic: str | None = ..., timeout: float = ...) -> Any: ...
    def memberid(self) -> str | None: ...
    def offsets_for_times(self, partitions: list[Any], timeout: float = ...) -> list[Any]: ...
    def close(self) -> None: ...


class ProducerClient(Protocol):
    """What kmq asks of a producer (PolledProducer has it): records with delivery callbacks or futures."""

    def produce(self, topic: str, value: bytes, key: bytes | None, headers: Sequence[tuple[str, bytes]] | None = ...,
                on_done: Callable[[Any, Any], None] | None = ..., partition: int | None = ...) -> None: ...
    def produce_future(self, topic: str, value: bytes, key: bytes | None,
                       headers: Sequence[tuple[str, bytes]] | None = ...,
                       on_record: Callable[[Any], None] | None = ..., block: bool = ...,
                       partition: int | None = ...) -> Delivery[MessageId]: ...
    def produce_many(self, topic: str, values: Sequence[bytes], key: bytes | None,
                     on_done: Callable[[Any, Any], None]) -> None: ...
    def flush(self, timeout_s: float) -> int: ...
    def close(self, timeout_s: float = ...) -> int: ...
    def stalled_s(self) -> float: ...
    @property
    def client(self) -> Any: ...


class ControlClient(Protocol):
    """A follower of the control topic (pause, purge): ControlFollower."""

    state: ControlState

    @property
    def available(self) -> bool: ...
    @property
    def topic(self) -> str: ...
    def start(self) -> ControlClient: ...
    def close(self) -> None: ...


class ClientFactory(Protocol):
    """Builds the Kafka clients of a consumer or a tracker from the settings kmq chose."""

    def group_consumer(self, settings: dict[str, Any]) -> GroupClient: ...
    def reader(self, settings: dict[str, Any]) -> GroupClient: ...
    def producer(self, settings: dict[str, Any], name: str, warm_topic: str | None = None) -> ProducerClient: ...
    def control(self, config: Config, topics: TopicSet,
                on_change: Callable[[ControlState], None] | None) -> ControlClient: ...
    def retention(self, config: Config, topics: TopicSet) -> Retention | None: ...
    def group_admin(self, config: Config) -> GroupAdmin: ...


class KafkaClients:
    """The production factory: confluent-kafka clients."""

    def group_consumer(self, settings: dict[str, Any]) -> GroupClient:
        return KafkaConsumer(settings)  # type: ignore[return-value]

    def reader(self, settings: dict[str, Any]) -> GroupClient:
        """A consumer that assigns partitions and seeks (the tracker's read-back of Starts by reference)."""
        return KafkaConsumer(settings)  # type: ignore[return-value]

    def producer(self, settings: dict[str, Any], name: str, warm_topic: str | None = None) -> ProducerClient:
        return PolledProducer(settings, name, warm_topic)

    def control(self, config: Config, topics: TopicSet,
                on_change: Callable[[ControlState], None] | None) -> ControlClient:
        return ControlFollower(config, topics, on_change=on_change)

    def retention(self, config: Config, topics: TopicSet) -> Retention | None:
        """The topics' retention when the consumer may write Starts by reference, else None (it copies)."""
        try:
            retention = check_retention(AdminClient(base_settings(config, "kmq-retention")), config, topics,
                                        config.connect_timeout_ms / 1000)
        except KmqError as err:
            log.warning("start_references_off", error=str(err),
                        note="the topics' retention could not be read: Starts copy their payloads")
            return None
        return None if retention is None or retention.problems() else retention

    def group_admin(self, config: Config) -> GroupAdmin:
        """What the group coordinator says about a group (a member checking that it is still in it)."""
        return KafkaGroupAdmin(config)
