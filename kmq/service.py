"""Service and Queue: the entry points that hand out producers and consumers of named logical queues."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kmq._kafka.topics import TopicStatus, check_topics, create_topics
from kmq.client.consumer import Consumer
from kmq.client.producer import Producer
from kmq.config import Config
from kmq.wire import validate_queue_name
from kmq.worker import Handler, Worker


class Queue:
    """One logical queue on the shared messages topic."""

    def __init__(self, config: Config, name: str) -> None:
        self.config = config
        self.name = validate_queue_name(name)

    def producer(self) -> Producer:
        return Producer(self.config, self.name)

    def consumer(self) -> Consumer:
        """A consumer in group ``kafka-mq-<name>``; it starts fetching at once."""
        return Consumer(self.config, self.name)

    def worker(self, concurrency: int = 1, **options: Any) -> Callable[[Handler], Worker]:
        """Decorator: ``@queue.worker(concurrency=8)`` turns a handler into a Worker; call ``.run()`` on it."""
        def wrap(handler: Handler) -> Worker:
            return Worker(self.config, [self.name], handler, concurrency, **options)
        return wrap

    def pause(self, until: datetime | None = None) -> None:
        """Its consumers take no new messages until ``resume()`` (or ``until``); kept in the control topic."""
        from kmq._kafka import control

        control.pause(self.config, self.name, None if until is None else int(until.timestamp() * 1000))

    def resume(self) -> None:
        from kmq._kafka import control

        control.resume(self.config, self.name)

    def purge(self, before: datetime | None = None) -> datetime:
        """Settles, without a handler, every message enqueued before ``before`` (default now), in flight ones
        included, as consumers and trackers reach them; returns the time used. Idempotent."""
        from kmq._kafka import control

        before_ms = control.purge(self.config, self.name, None if before is None else int(before.timestamp() * 1000))
        return datetime.fromtimestamp(before_ms / 1000, UTC)

    def __repr__(self) -> str:
        return f"Queue({self.name!r})"


class Service:
    """Hands out queues that share one configuration (broker, topics, timeouts)."""

    def __init__(self, config: Config) -> None:
        if not isinstance(config, Config):
            raise TypeError(f"Service needs a kmq.Config, got {type(config).__name__}")
        self.config = config
        self._queues: dict[str, Queue] = {}

    def queue(self, name: str) -> Queue:
        if name not in self._queues:
            self._queues[name] = Queue(self.config, name)
        return self._queues[name]

    def create_topics(self, *, partitions: int = 6, marker_partitions: int = 3,
                      replication_factor: int | None = None) -> list[TopicStatus]:
        return create_topics(self.config, partitions=partitions, marker_partitions=marker_partitions,
                             replication_factor=replication_factor)

    def check_topics(self) -> dict[str, int]:
        return check_topics(self.config)
