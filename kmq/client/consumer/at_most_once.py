"""AtMostOnceMessages: the settler of an at-most-once queue's messages, and the dead-letter write both settlers use."""

from __future__ import annotations

import threading
from collections.abc import Iterable

from kmq import otel, wire
from kmq._kafka.producer import MarkerProducer
from kmq.client.message import Message
from kmq.config import Config
from kmq.errors import DeliveryError, KmqError
from kmq.topic_sets import TopicSet


def write_dead_letter(producer: MarkerProducer, config: Config, topics: TopicSet, message: Message,
                      reason: str) -> None:
    """Writes ``message`` to the dead-letter topic with its delivery headers and why; waits until it is durable."""
    delivery = wire.DeliveryHeaders(message.delivery_count, message.first_message_id, message.enqueued_at_ms)
    headers = wire.DeadLetterHeaders(reason, message.queue.encode(), delivery).encode(
        list(message.record_headers.items()))
    try:
        producer.produce_future(topics.dead_letters, message.payload, message.queue.encode(), headers).result(
            config.connect_timeout_ms / 1000 + 20)
    except Exception as err:
        raise DeliveryError(f"cannot dead-letter message {message.message_id} of queue {message.queue!r} "
                            f"to {topics.dead_letters!r}: {err}") from err
    if message._span is not None:
        otel.dead_lettered(message._span, topics.dead_letters, reason or "rejected")


class AtMostOnceMessages:
    """The Settler of an at-most-once queue's Messages: no Start was written, so there is nothing to end or keep
    alive; an ack only marks the message, a reject dead-letters it, a release is refused (nothing would bring the
    message back)."""

    def __init__(self, config: Config, topics: TopicSet, dlq_producer: MarkerProducer) -> None:
        self._config = config
        self._topics = topics
        self._dlq_producer = dlq_producer
        self._lock = threading.Lock()

    def _settle(self, message: Message, how: str) -> None:
        with self._lock:  # no in-flight table to pop from: the flag itself is the claim
            if message.settled:
                raise message._already_settled(how)
            message._settled_as = how

    def _ack(self, message: Message) -> None:
        self._settle(message, "ack")

    def _ack_many(self, messages: Iterable[Message]) -> None:
        refused: KmqError | None = None
        for message in messages:
            try:
                self._settle(message, "ack")
            except KmqError as err:
                refused = refused or err
        if refused is not None:
            raise refused

    def _release(self, message: Message, delay_ms: int) -> None:
        raise self._cannot(message, "released")

    def _give_back(self, message: Message) -> None:
        raise self._cannot(message, "given back")

    @staticmethod
    def _cannot(message: Message, what: str) -> KmqError:
        return KmqError(f"queue {message.queue!r} is at-most-once: message {message.message_id} cannot be {what} "
                        "(nothing would deliver it again); ack or reject it")

    def _reject(self, message: Message, reason: str) -> None:
        self._settle(message, "reject")
        write_dead_letter(self._dlq_producer, self._config, self._topics, message, reason)

    def _keep_alive(self, message: Message) -> None:
        pass

    def purge(self, message: Message) -> bool:
        try:
            self._settle(message, "purge")
        except KmqError:
            return False
        return True

    def expire(self, message: Message, dead_letter: bool) -> None:
        self._settle(message, "expire")
        if dead_letter:
            write_dead_letter(self._dlq_producer, self._config, self._topics, message, wire.EXPIRED_REASON)
