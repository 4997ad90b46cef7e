"""KmqBroker: a Dramatiq broker whose queues are kmq queues.

Each Dramatiq queue is the kmq queue ``queue_prefix + name`` on the shared messages topic. Delays are kmq's delayed
sends (no ``.DQ`` side queues), ``ack`` acks, ``nack`` rejects (dead letter, with the exception as the reason),
``requeue`` gives back (delivery count unchanged), ``flush`` purges, and the tracker redelivers what a dead worker
held. See docs: "Using kmq from Dramatiq".
"""

from __future__ import annotations

import math
import os
import threading
import time
from typing import TYPE_CHECKING, Any

import structlog
from dramatiq.broker import Broker, MessageProxy
from dramatiq.errors import QueueJoinTimeout, QueueNotFound
from dramatiq.message import Message as DramatiqMessage
from dramatiq.middleware import Middleware, TimeLimit

from kmq import Config, Consumer, KmqError, MessageId, Producer, Queue, Service, wire
from kmq.client.process_id import with_process_id
from kmq.config import session_follows_redelivery
from kmq.dramatiq.consumer import KmqConsumer
from kmq.dramatiq.dead_letters import DeadLetterLog
from kmq.dramatiq.queue_watch import shared_watch
from kmq.dramatiq.url import parse_url

if TYPE_CHECKING:
    from dramatiq.worker import Worker

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

#: How long ``close()`` gives each kmq consumer and producer to write what it holds.
CLOSE_TIMEOUT_S = 30.0
#: Headers that name the Dramatiq message on its kmq record, for ``kmq inspect`` and ``kmq dlq list``.
HEADER_ACTOR = "dramatiq-actor"
HEADER_MESSAGE_ID = "dramatiq-message-id"


class KmqBroker(Broker):
    """A Dramatiq broker on kmq queues: ``dramatiq.set_broker(KmqBroker(url="kmq://127.0.0.1:9092"))``.

    Parameters:
      config: a kmq Config; or ``url``, a ``kmq://HOST:PORT[,HOST:PORT]/?field=value`` URL; with neither, the
        config comes from ``$KMQ_CONFIG`` (a YAML file) and ``KMQ_*`` variables, as for the ``kmq`` command.
      middleware: as for every Dramatiq broker (default: Dramatiq's default middleware).
      queue_prefix: prepended to every Dramatiq queue name to make its kmq queue name (several apps on one topic).
      confirm_delivery: ``enqueue`` returns once the message is durable in Kafka (default); False returns at once
        and logs a send that fails (faster, and a failure is then only a log line).
      fail_fast_default: ``join`` raises the exception of a message dead-lettered by this process's consumers, as
        Dramatiq's StubBroker does.
    """

    def __init__(self, config: Config | None = None, *, url: str | None = None,
                 middleware: list[Middleware] | None = None, queue_prefix: str = "", confirm_delivery: bool = True,
                 fail_fast_default: bool = True) -> None:
        if config is not None and url is not None:
            raise ValueError("give a kmq Config or a kmq:// url, not both")
        if url is not None:
            parsed = parse_url(url)
            config, queue_prefix = parsed.config, queue_prefix or parsed.queue_prefix
        elif config is None:
            config = _config_from_environment()
        elif not isinstance(config, Config):
            raise TypeError(f"KmqBroker needs a kmq.Config, got {type(config).__name__}")
        self.config = config
        self.queue_prefix = queue_prefix
        self.confirm_delivery = confirm_delivery
        self.fail_fast_default = fail_fast_default
        self._service = Service(config)
        self._lock = threading.Lock()
        self._producers: dict[str, Producer] = {}
        self._consumers: dict[str, Consumer] = {}
        self._purged_before_ms: dict[str, int] = {}
        self._dead_letters = DeadLetterLog()
        self._running_workers = 0
        super().__init__(middleware)
        self.queues: dict[str, Queue] = {}
        self.add_middleware(_ConsumerLifecycle())

    # --- queues ----------------------------------------------------------------------------------------

    def declare_queue(self, queue_name: str) -> None:
        """Declares ``queue_name`` (idempotent); its kmq queue needs nothing created: all share the topics."""
        if queue_name in self.queues:
            return
        queue = self._service.queue(self.queue_prefix + queue_name)  # checks the name
        self.emit_before("declare_queue", queue_name)
        self.queues[queue_name] = queue
        # Made now: a new idempotent Kafka producer's first send waits ~0.5 s for its producer id unless it has had
        # a moment to connect, and actors are declared well before their first message as a rule.
        self._producer(queue)
        self.emit_after("declare_queue", queue_name)

    def get_declared_delay_queues(self) -> set[str]:
        """None: delays are kmq's delayed sends on the queue itself."""
        return set()

    def _queue(self, queue_name: str) -> Queue:
        try:
            return self.queues[queue_name]
        except KeyError:
            raise QueueNotFound(queue_name) from None  # type: ignore[no-untyped-call]

    # --- sending ---------------------------------------------------------------------------------------

    def enqueue(self, message: DramatiqMessage[Any], *, delay: int | None = None) -> DramatiqMessage[Any]:
        """Sends ``message`` to its queue; ``delay`` (ms) holds it back from every worker until then (kmq's
        delayed send: its delivery count does not grow while it waits). Returns ``message``."""
        queue = self._queue(message.queue_name)
        self.emit_before("enqueue", message, delay)
        producer = self._producer(queue)
        options: dict[str, Any] = {
            "headers": {HEADER_ACTOR: message.actor_name, HEADER_MESSAGE_ID: message.message_id},
            "delay": delay / 1000 if delay is not None and delay > 0 else None,
            "time_limit": self._time_limit_s(message),
            # send_with_options(dedup_id=…): the first send only; a retry re-enqueues the same message to run again.
            "dedup_id": None if message.options.get("retries") else message.options.get("dedup_id"),
        }
        payload = message.encode()
        if self.confirm_delivery:
            producer.send(payload, **options)
        else:
            producer.send_async(payload, on_delivery=_log_failed_send(queue.name, message.message_id), **options)
        self.emit_after("enqueue", message, delay)
        return message

    def _time_limit_s(self, message: DramatiqMessage[Any]) -> float | None:
        """The time limit Dramatiq's TimeLimit middleware will give this message, in kmq's seconds: the kmq record
        carries the same limit (``kmq inspect``, a kmq worker), so both sides agree on it."""
        time_limit = next((m for m in self.middleware if isinstance(m, TimeLimit)), None)
        if time_limit is None:
            return None
        actor = self.actors.get(message.actor_name)
        limit = message.options.get("time_limit") or (
            actor.options.get("time_limit", time_limit.time_limit) if actor else time_limit.time_limit)
        if not isinstance(limit, int | float) or not math.isfinite(limit) or limit <= 0:
            return None
        return float(limit) / 1000

    def _producer(self, queue: Queue) -> Producer:
        producer = self._producers.get(queue.name)
        if producer is None:
            with self._lock:
                producer = self._producers.get(queue.name)
                if producer is None:
                    producer = self._producers[queue.name] = queue.producer()
        return producer

    # --- consuming -------------------------------------------------------------------------------------

    def consume(self, queue_name: str, prefetch: int = 1, timeout: int = 30000) -> KmqConsumer:
        """A consumer of ``queue_name`` over this broker's kmq consumer of it; at most ``prefetch`` messages are
        read and unsettled at a time (kmq's ``max_in_flight``), all kept alive while they wait and run."""
        queue = self._queue(queue_name)
        return KmqConsumer(queue_name, self._consumer(queue, prefetch), timeout, self._dead_letters.add)

    def _consumer(self, queue: Queue, prefetch: int) -> Consumer:
        with self._lock:
            consumer = self._consumers.get(queue.name)
            if consumer is not None and consumer.failure is not None:
                log.warning("consumer_replaced", queue=queue.name, failure=consumer.failure)
                _close_quietly(consumer, 1.0)
                consumer = None
            if consumer is None:
                limit = max(1, prefetch)
                config = self.config.replace(max_in_flight=limit,
                                             receive_buffer_capacity=min(limit, self.config.receive_buffer_capacity))
                # A killed worker's partitions come back when the group evicts it: after the redelivery timeout,
                # not Kafka's 45 s.
                config = session_follows_redelivery(config)
                consumer = self._consumers[queue.name] = with_process_id(
                    config, lambda config: Consumer(config, queue.name))
            return consumer

    def _worker_started(self) -> None:
        with self._lock:
            self._running_workers += 1

    def _worker_stopped(self) -> None:
        """After a worker's shutdown (its handlers done, its unstarted messages given back): with no worker left,
        the kmq consumers close, giving back what they read and nobody received."""
        with self._lock:
            self._running_workers = max(0, self._running_workers - 1)
            if self._running_workers:
                return
            consumers = list(self._consumers.values())
            self._consumers.clear()
        _close_all(consumers)

    # --- dead letters ----------------------------------------------------------------------------------

    @property
    def dead_letters(self) -> list[MessageProxy]:
        """The messages this process's consumers dead-lettered (the last 1,000 per queue); the dead-letter topic
        holds every queue's, from every process: ``kmq dlq list QUEUE``."""
        return [m for messages in self._dead_letters.messages().values() for m in messages]

    @property
    def dead_letters_by_queue(self) -> dict[str, list[MessageProxy]]:
        return self._dead_letters.messages()

    # --- flush, join, close ----------------------------------------------------------------------------

    def flush(self, queue_name: str) -> None:
        """Drops every message of the queue sent until now: kmq's purge (waiting, delayed and in-flight ones; a
        handler's later ack of a purged message is a no-op)."""
        queue = self._queue(queue_name)
        before = queue.purge()
        with self._lock:
            self._purged_before_ms[queue.name] = wire.ms_from_datetime(before)

    def flush_all(self) -> None:
        for queue_name in list(self.queues):
            self.flush(queue_name)
        self._dead_letters.clear()

    def join(self, queue_name: str, *, timeout: int | None = None, fail_fast: bool | None = None,
             interval: int = 20) -> None:
        """Waits until no message of the queue waits, is delayed or in flight, in any process (a testing tool).

        Raises QueueJoinTimeout after ``timeout`` ms; with ``fail_fast`` (default ``fail_fast_default``), raises the
        exception of a message of this queue that this process's consumers dead-lettered.
        """
        queue = self._queue(queue_name)
        deadline = None if timeout is None else time.monotonic() + timeout / 1000
        for producer in list(self._producers.values()):
            producer.flush()  # sends not confirmed yet must count
        watch = shared_watch(self.config)
        with self._lock:
            purges = list(self._purged_before_ms.items())
        for name, before_ms in purges:
            watch.purged(name, before_ms)
        while watch.pending(queue.name):
            if deadline is not None and time.monotonic() >= deadline:
                raise QueueJoinTimeout(queue_name)  # type: ignore[no-untyped-call]
            time.sleep(interval / 1000)
        if fail_fast if fail_fast is not None else self.fail_fast_default:
            for letter in self._dead_letters.of(queue_name):
                raise letter.exception() from None

    def close(self) -> None:
        """Closes the kmq consumers (what they read and nobody received is given back, what was received and not
        settled released) and the producers (waiting for unconfirmed sends)."""
        with self._lock:
            consumers = list(self._consumers.values())
            producers = list(self._producers.values())
            self._consumers.clear()
            self._producers.clear()
        _close_all(consumers)
        for producer in producers:
            producer.close(CLOSE_TIMEOUT_S)


class _ConsumerLifecycle(Middleware):
    """Tells the broker when workers start and stop, so its kmq consumers close with the last worker."""

    def after_worker_boot(self, broker: Broker, worker: Worker) -> None:
        if isinstance(broker, KmqBroker):
            broker._worker_started()

    def after_worker_shutdown(self, broker: Broker, worker: Worker) -> None:
        if isinstance(broker, KmqBroker):
            broker._worker_stopped()


def _config_from_environment() -> Config:
    path = os.environ.get("KMQ_CONFIG")
    return Config.from_yaml(path) if path else Config.load()


def _log_failed_send(queue: str, dramatiq_id: str) -> Any:
    def report(err: KmqError | None, _message_id: MessageId | None) -> None:
        if err is not None:
            log.error("enqueue_failed", queue=queue, dramatiq_message_id=dramatiq_id, error=str(err))
    return report


def _close_all(consumers: list[Consumer]) -> None:
    """Closes consumers side by side: each leaves its group, which takes a broker round trip or more."""
    threads = [threading.Thread(target=_close_quietly, args=(c, CLOSE_TIMEOUT_S), name=f"kmq-close-{c.queue}")
               for c in consumers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _close_quietly(consumer: Consumer, timeout_s: float) -> None:
    try:
        consumer.close(timeout_s)
    except KmqError as err:  # markers (acks among them) not written: those messages will be delivered again
        log.error("consumer_close_failed", queue=consumer.queue, error=str(err))
