"""The kombu virtual Channel on kmq: kombu queues are kmq queues, kombu's acks are kmq's settles.

| kombu                                  | kmq                                                                    |
|----------------------------------------|------------------------------------------------------------------------|
| ``_put`` (publish)                     | ``Producer.send`` (durable when it returns), ETA → ``deliver_at``      |
| ``_get`` (consume, ``basic_get``)      | ``Consumer.receive`` of the channel's consumer of that queue            |
| ``basic_ack``                          | ``Message.ack``                                                         |
| ``basic_reject(requeue=False)``        | ``Message.reject``: dead letter                                        |
| ``basic_reject(requeue=True)``         | ``Message.release(0)``: back through the tracker at once, a delivery   |
| unacked at channel close / shutdown    | ``Message.give_back``: redelivered at once, delivery count unchanged   |
| worker process lost                    | the redelivery tracker, after ``visibility_timeout``                   |
| ``basic_qos(prefetch_count)``          | each consumer's ``max_in_flight``: it Starts no more than that         |
| ``queue_purge``                        | ``Queue.purge``                                                        |
| ``_size`` (passive declare)            | this queue's records past its group's committed offset (a topic scan)  |
| fanout exchange, unbound exchange      | the broadcast topic, at most once to live subscribers (broadcast.py)   |

A consumer (a Kafka group member) exists only for queues this channel consumes or gets from: publishing to a
queue never joins its group. It Starts (counts as delivered) no more messages than kombu's prefetch count lets the
channel hold unacked (Celery: ``worker_prefetch_multiplier`` times concurrency), so a worker's kill -9 puts at most that
many back through the tracker as deliveries, and a second worker gets the rest. A requeue counts as a delivery (as
RabbitMQ's quorum queues count one): a task that kills its pool child ends on the dead-letter topic after
``max_deliveries`` instead of looping on its worker.

A queue bound to a fanout exchange, or a transient one (``auto_delete``/``exclusive``, as remote-control replies and
event receivers are) bound to a named exchange, is a broadcast subscriber instead.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from queue import Empty
from typing import Any

import structlog
from kombu.transport import virtual

from kmq import Consumer, ConsumerClosedError, KmqError, Message, MessageSettledError, Service, wire
from kmq.kombu import broadcast, envelope, queue_size
from kmq.kombu.producers import POOL

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

#: How often a synchronous get checks whether a new consumer holds partitions yet.
ASSIGNMENT_POLL_S = 0.05


class QoS(virtual.QoS):
    """kombu's prefetch accounting, with each settle passed on to the kmq message it names."""

    channel: Channel

    def ack(self, delivery_tag: str) -> None:
        self.channel._settle(delivery_tag, "ack")
        super().ack(delivery_tag)

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        # The base class requeues through ``_restore_at_beginning``, which lands in ``_settle`` too.
        if not requeue:
            self.channel._settle(delivery_tag, "reject")
        super().reject(delivery_tag, requeue=requeue)


class Channel(virtual.Channel):
    """One kombu channel: its consumers of kmq queues and the messages it holds unacked."""

    QoS = QoS
    connection: Any  # kmq.kombu.transport.Transport
    supports_fanout = True

    def __init__(self, connection: Any, **kwargs: Any) -> None:
        super().__init__(connection, **kwargs)
        self._config = connection.kmq_config
        self._options = connection.kmq_options
        self._service = Service(self._config)
        self._kmq_consumers: dict[str, Consumer] = {}
        #: Delivered to kombu, not yet settled: delivery tag → (kombu queue, kmq message).
        self._in_hand: dict[str, tuple[str, Message]] = {}
        #: kombu's prefetch count (``basic_qos``): each consumer's in-flight limit; None means kmq's own.
        self._window: int | None = None
        self._noack_queues: set[str] = set()
        self._broadcast_topic = broadcast.topic_for(self._config, self._options.broadcast_topic)
        self._subscribers = broadcast.Subscribers(self._config, self._broadcast_topic,
                                                  self._options.queue_name_prefix)
        self._sizes = queue_size.SizeCache(self._config, self._options.size_scan_limit,
                                           self._options.size_cache_seconds)

    def kmq_queue(self, queue: str) -> str:
        """The kmq queue a kombu queue name stands for."""
        return f"{self._options.queue_name_prefix}{queue}"

    # --- publish -----------------------------------------------------------------------------------------

    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        out = envelope.encode(message, datetime.now(UTC))
        producer = POOL.get(self._config, self.kmq_queue(queue))
        if self._options.confirm_publish:
            producer.send(out.payload, out.headers, deliver_at=out.deliver_at, ttl=out.ttl_s, dedup_id=out.dedup_id)
        else:
            producer.send_async(out.payload, out.headers, on_delivery=_log_failed_publish, deliver_at=out.deliver_at,
                                ttl=out.ttl_s, dedup_id=out.dedup_id)

    def basic_publish(self, message: dict[str, Any], exchange: str, routing_key: str, **kwargs: Any) -> Any:
        """Anonymous exchange and locally bound durable queues: kmq queues. A fanout exchange, and a named exchange
        with no durable queue bound here (the subscriber declared the binding in its own process): broadcast."""
        if not exchange or self.typeof(exchange).type == "fanout":
            return super().basic_publish(message, exchange, routing_key, **kwargs)
        try:
            queues = self.typeof(exchange).lookup(self.get_table(exchange), exchange, routing_key, None)
        except KeyError:
            queues = set()
        durable = [q for q in queues if not self._is_broadcast(q)]
        self._inplace_augment_message(message, exchange, routing_key)
        for queue in durable:
            self._put(queue, message, **kwargs)
        if len(durable) < len(queues) or not queues:
            self._put_fanout(exchange, message, routing_key, **kwargs)

    def _put_fanout(self, exchange: str, message: dict[str, Any], routing_key: str, **kwargs: Any) -> None:
        broadcast.PUBLISHER.publish(self._config, self._broadcast_topic, self.kmq_queue(exchange), routing_key,
                                    message)

    def _queue_bind(self, exchange: str, routing_key: str, pattern: Any, queue: str) -> None:
        """Bindings stay in this process (kombu's state); a subscriber reads broadcasts from when it bound."""
        self.connection.kmq_bound_at.setdefault(queue, wire.now_ms())

    def _new_queue(self, queue: str, **kwargs: Any) -> None:
        if kwargs.get("auto_delete") or kwargs.get("exclusive"):
            self.connection.kmq_transient.add(queue)

    def _is_broadcast(self, queue: str) -> bool:
        bindings = list(self.state.queue_bindings(queue))
        if any(self.typeof(b.exchange).type == "fanout" for b in bindings):
            return True
        return queue in self.connection.kmq_transient and any(b.exchange for b in bindings)

    # --- consume -----------------------------------------------------------------------------------------

    def basic_consume(self, queue: str, no_ack: bool, *args: Any, **kwargs: Any) -> Any:
        if no_ack:
            self._noack_queues.add(queue)
        if self._is_broadcast(queue):
            self._subscription(queue)
        else:
            self._consumer(queue)  # joins the group now, while kombu sets up the rest
        return super().basic_consume(queue, no_ack, *args, **kwargs)

    def basic_cancel(self, consumer_tag: str) -> Any:
        queue = self._tag_to_queue.get(consumer_tag)
        result = super().basic_cancel(consumer_tag)
        if queue is not None and queue not in self._active_queues:
            self._noack_queues.discard(queue)
            self._subscribers.close(queue)
            if not any(q == queue for q, _ in list(self._in_hand.values())):  # acks come from other threads
                self._close_consumer(queue)  # else at channel close: its unacked messages may still be acked
        return result

    def basic_qos(self, prefetch_size: int = 0, prefetch_count: int = 0, apply_global: bool = False) -> None:
        """kombu's prefetch count (Celery's ``worker_prefetch_multiplier`` times concurrency, raised for ETA tasks) is
        also what each kmq consumer of this channel may hold Started and unsettled; 0 is kmq's own limit."""
        super().basic_qos(prefetch_size, prefetch_count, apply_global)
        self._window = prefetch_count or None
        for consumer in list(self._kmq_consumers.values()):
            consumer.max_in_flight = self._window or self._config.max_in_flight

    def basic_get(self, queue: str, no_ack: bool = False, **kwargs: Any) -> Any:
        """A synchronous get: waits up to ``wait_time_seconds`` for a message (a new consumer first waits for
        partitions, up to the connect timeout), as SQS's transport long-polls."""
        if not self._is_broadcast(queue):
            self._await_partitions(queue)
        try:
            payload = self._receive(queue, self._options.wait_time_seconds, no_ack)
        except Empty:
            return None
        message = self.Message(payload, channel=self)
        if not no_ack:
            self.qos.append(message, message.delivery_tag)
        return message

    def _get(self, queue: str, timeout: float | None = None) -> dict[str, Any]:
        return self._receive(queue, timeout or 0.0, queue in self._noack_queues)

    def _receive(self, queue: str, timeout: float, no_ack: bool) -> dict[str, Any]:
        if self._is_broadcast(queue):
            return self._receive_broadcast(queue, timeout)
        deadline = time.monotonic() + timeout
        while True:
            message = self._consumer(queue).receive(max(0.0, deadline - time.monotonic()))
            if message is None:
                raise Empty()
            tag = uuid.uuid4().hex
            try:
                payload = envelope.decode(message.payload, tag, redelivered=message.redelivered,
                                          delivery_count=message.delivery_count, message_id=str(message.message_id))
            except envelope.EnvelopeError as err:
                log.warning("kombu_message_undecodable", queue=message.queue, message_id=str(message.message_id),
                            error=str(err))
                _settle_quietly(message, "reject", f"not a kombu message: {err}")
                continue
            if no_ack:
                _settle_quietly(message, "ack")
            else:
                self._in_hand[tag] = (queue, message)
            return payload

    def _receive_broadcast(self, queue: str, timeout: float) -> dict[str, Any]:
        """The next broadcast this queue's bindings route to it (at most once: nothing to settle)."""
        self._subscription(queue)
        message = self._subscribers.next(queue, self._route, timeout, ASSIGNMENT_POLL_S)
        if message is None:
            raise Empty()
        message.setdefault("properties", {})["delivery_tag"] = uuid.uuid4().hex
        return message

    def _route(self, exchange: str, routing_key: str) -> set[str]:
        try:
            return set(self.typeof(exchange).lookup(self.get_table(exchange), exchange, routing_key, None))
        except KeyError:
            return set()

    def _subscription(self, queue: str) -> None:
        exchanges = {b.exchange for b in self.state.queue_bindings(queue) if b.exchange}
        since_ms = self.connection.kmq_bound_at.get(queue) or wire.now_ms()
        self._subscribers.open(queue, exchanges, since_ms)

    # --- settle --------------------------------------------------------------------------------------------

    def _settle(self, delivery_tag: str, how: str) -> None:
        held = self._in_hand.pop(delivery_tag, None)
        if held is None:
            return  # delivered without ack, or settled already
        _, message = held
        _settle_quietly(message, how, "rejected by the kombu consumer (requeue=False)")

    def _restore_at_beginning(self, message: Any) -> None:
        """``reject(requeue=True)``: a handler had it (Celery requeues a task whose pool child died this way), so
        it comes back as a new delivery, at once through the tracker; ``max_deliveries`` ends a loop."""
        self._settle(message.delivery_tag, "release")

    def _restore(self, message: Any) -> None:
        """Unacked at close or on ``recover``: given back, not counted as a delivery (kombu restores the messages
        a stopping consumer prefetched and never ran; running ones are acked or rejected before it closes)."""
        self._settle(message.delivery_tag, "give_back")

    # --- queue operations -------------------------------------------------------------------------------------

    def _purge(self, queue: str) -> int:
        """Settles every message of the queue enqueued until now, in flight ones included (kmq's purge); returns
        how many were waiting."""
        if self._is_broadcast(queue):
            return self._subscribers.drop_waiting(queue)
        waiting = self._sizes.count(self.kmq_queue(queue), fresh=True)
        self._service.queue(self.kmq_queue(queue)).purge()
        self._sizes.forget(self.kmq_queue(queue))
        return waiting

    def _size(self, queue: str) -> int:
        if self._is_broadcast(queue):
            return self._subscribers.waiting(queue)
        return self._sizes.count(self.kmq_queue(queue))

    def queue_declare(self, queue: str | None = None, passive: bool = False, **kwargs: Any) -> Any:
        """Only a passive declaration counts the queue (a topic scan); others report 0 messages, so that the
        declarations Celery makes on every new connection cost nothing."""
        if passive:
            return super().queue_declare(queue, passive=True, **kwargs)
        from amqp.protocol import queue_declare_ok_t

        name = queue or f"amq.gen-{uuid.uuid4()}"
        self._new_queue(name, **kwargs)
        return queue_declare_ok_t(name, 0, 0)

    def _delete(self, queue: str, *args: Any, **kwargs: Any) -> None:
        if self._is_broadcast(queue):
            self._subscribers.close(queue)
            self.connection.kmq_transient.discard(queue)
            self.connection.kmq_bound_at.pop(queue, None)
            return
        self._close_consumer(queue)
        self._purge(queue)

    # --- consumers ------------------------------------------------------------------------------------------

    def _consumer(self, queue: str) -> Consumer:
        consumer = self._kmq_consumers.get(queue)
        if consumer is None:
            if self.closed:
                raise ConsumerClosedError(f"kombu channel is closed (queue {queue!r})")
            consumer = self._kmq_consumers[queue] = self._service.queue(self.kmq_queue(queue)).consumer(
                max_in_flight=self._window)
        return consumer

    def _await_partitions(self, queue: str) -> None:
        consumer = self._consumer(queue)
        deadline = time.monotonic() + self._config.connect_timeout_ms / 1000
        while not consumer.assignment and time.monotonic() < deadline:
            time.sleep(ASSIGNMENT_POLL_S)

    def _close_consumer(self, queue: str) -> None:
        consumer = self._kmq_consumers.pop(queue, None)
        if consumer is not None:
            try:
                consumer.close()
            except KmqError as err:  # acks not written: those messages come again, which is at least once
                log.warning("kombu_consumer_close_failed", queue=consumer.queue, error=str(err))

    def close(self) -> None:
        if self.closed:
            return
        super().close()  # cancels kombu consumers and restores (gives back) what it holds unacked
        for queue in list(self._kmq_consumers):
            self._close_consumer(queue)
        self._subscribers.close_all()
        self._sizes.close()


def _settle_quietly(message: Message, how: str, reason: str = "") -> None:
    """Settles a kmq message; a message the queue's purge (or the consumer's close) settled first is logged."""
    try:
        if how == "ack":
            message.ack()
        elif how == "reject":
            message.reject(reason)
        elif how == "release":
            message.release(0)
        else:
            message.give_back()
    except (MessageSettledError, ConsumerClosedError) as err:
        log.info("kombu_settle_skipped", queue=message.queue, message_id=str(message.message_id), settle=how,
                 error=str(err))
    except KmqError as err:  # a requeue on an at-most-once queue: nothing would bring the message back
        log.warning("kombu_settle_failed", queue=message.queue, message_id=str(message.message_id), settle=how,
                    error=str(err))


def _log_failed_publish(err: KmqError | None, _message_id: object) -> None:
    if err is not None:
        log.error("kombu_publish_failed", error=str(err))
