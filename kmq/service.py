"""Service and Queue: the entry points that hand out producers and consumers of named logical queues."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from kmq._kafka.topics import TopicStatus, check_topics, create_topics
from kmq.aio import AsyncConsumer, AsyncProducer
from kmq.client.consumer import Consumer
from kmq.client.process_id import with_process_id
from kmq.client.producer import Producer
from kmq.config import Config
from kmq.ops.schedules import Schedules
from kmq.wire import datetime_from_ms, ms_from_datetime, validate_queue_name
from kmq.worker import Handler, Worker


class Queue:
    """One logical queue on the shared messages topic."""

    def __init__(self, config: Config, name: str) -> None:
        self.config = config
        #: The queue's name: the record key of its messages and markers.
        self.name = validate_queue_name(name)

    def producer(self) -> Producer:
        """A producer for this queue (thread-safe; close it, or use it as a context manager)."""
        return Producer(self.config, self.name)

    def consumer(self, *, max_in_flight: int | None = None) -> Consumer:
        """A consumer in group ``kafka-mq-<name>``; it starts fetching at once. ``max_in_flight``: the most messages
        it holds Started and unsettled, if fewer than ``config.max_in_flight`` (a framework's prefetch). A
        ``client_id`` with ``{process}`` in it gets this process's index (``kmq.client.process_id``)."""
        return with_process_id(self.config, lambda config: Consumer(config, self.name, max_in_flight=max_in_flight))

    def async_producer(self) -> AsyncProducer:
        """A producer for asyncio code (``await send(...)``); close it, or use it with ``async with``."""
        return AsyncProducer(self.config, self.name)

    def async_consumer(self) -> AsyncConsumer:
        """A consumer for asyncio code, started by ``async with`` (or ``await start()``, or the first receive)."""
        return AsyncConsumer(self.config, self.name)

    def worker(self, concurrency: int = 1, **options: Any) -> Callable[[Handler], Worker]:
        """Decorator: ``@queue.worker(concurrency=8)`` turns a handler into a Worker; call ``.run()`` on it. The
        Worker stays callable (it runs the handler), and ``kmq worker module:name`` runs it too. An ``async def``
        handler runs on one event loop with at most ``concurrency`` runs at once."""
        def wrap(handler: Handler) -> Worker:
            return Worker(self.config, [self.name], handler, concurrency, **options)
        return wrap

    def pause(self, until: datetime | None = None) -> None:
        """Its consumers take no new messages until ``resume()`` (or ``until``); kept in the control topic."""
        from kmq._kafka import control

        control.pause(self.config, self.name, None if until is None else ms_from_datetime(until))

    def resume(self) -> None:
        """Lets the queue's consumers take messages again (ends a ``pause``)."""
        from kmq._kafka import control

        control.resume(self.config, self.name)

    def purge(self, before: datetime | None = None) -> datetime:
        """Settles, without a handler, every message enqueued before ``before`` (default now), in flight ones
        included, as consumers and trackers reach them; returns the time used. Idempotent."""
        from kmq._kafka import control

        before_ms = control.purge(self.config, self.name, None if before is None else ms_from_datetime(before))
        return datetime_from_ms(before_ms)

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
        """The queue called ``name`` (the same object each time); raises InvalidQueueNameError for a bad name."""
        if name not in self._queues:
            self._queues[name] = Queue(self.config, name)
        return self._queues[name]

    def create_topics(self, *, partitions: int = 6, marker_partitions: int = 3,
                      replication_factor: int | None = None) -> list[TopicStatus]:
        """Creates the messages, markers (LogAppendTime), dead-letter and control topics of every topic set that
        do not exist yet, as ``kmq topics create`` does (replication factor None: 3 where the cluster has three or
        more brokers); existing topics are kept as they are."""
        return [status for topics in self.config.all_topic_sets
                for status in create_topics(self.config, topics, partitions=partitions,
                                            marker_partitions=marker_partitions,
                                            replication_factor=replication_factor)]

    @property
    def schedules(self) -> Schedules:
        """The recurring schedules (``kmq schedule``): add, list, pause, resume, remove, run now. The tracker group
        fires them."""
        return Schedules(self.config)

    def check_topics(self) -> dict[str, int]:
        """Checks every topic set's topics as ``kmq topics check`` does; returns each topic's partition count, or
        raises TopicError."""
        return {name: count for topics in self.config.all_topic_sets
                for name, count in check_topics(self.config, topics).items()}
