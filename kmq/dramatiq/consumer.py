"""The Dramatiq side of a kmq queue: the consumer a Dramatiq worker iterates, and the message proxy it settles.

A Dramatiq worker opens and closes consumers freely (a paused worker closes its consumer and opens a new one on
resume, while messages the old one handed out still wait in the worker's memory), so a ``KmqConsumer`` is only a
view: the kmq Consumer that Started the messages belongs to the broker, one per queue, and outlives the views.
Each message settles through its own kmq Message (``ack`` → ack, ``nack`` → reject, ``requeue`` → give back), so
it does not matter which view the worker calls.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import structlog
from dramatiq.broker import Consumer as DramatiqConsumer
from dramatiq.broker import MessageProxy
from dramatiq.errors import ConnectionClosed, ConnectionFailed, DecodeError
from dramatiq.message import Message as DramatiqMessage

from kmq import Consumer, ConsumerClosedError, KmqError, MessageSettledError
from kmq import Message as KmqMessage

log: structlog.typing.FilteringBoundLogger = structlog.get_logger(__name__)

#: The longest a dead-letter reason may be (it travels in a header of the dead-letter record).
MAX_REASON_CHARS = 500


class KmqMessageProxy(MessageProxy):
    """A Dramatiq message handed out by a kmq consumer. Besides the Dramatiq message's fields (through the proxy),
    ``kmq_message`` is the kmq delivery: ``delivery_count`` (handler runs, this one included: > 1 after a worker
    crash or a release), ``message_id`` / ``first_message_id`` (partition and offset), ``enqueued_at``, ``headers``.
    Actors reach it through Dramatiq's ``CurrentMessage`` middleware."""

    def __init__(self, message: DramatiqMessage[object], kmq_message: KmqMessage) -> None:
        super().__init__(message)
        self.kmq_message = kmq_message

    @property
    def delivery_count(self) -> int:
        return self.kmq_message.delivery_count

    @property
    def redelivered(self) -> bool:
        """True when a handler had this message before (kmq's count, not Dramatiq's ``retries`` option: a retry is
        a new message)."""
        return self.kmq_message.redelivered


def dead_letter_reason(proxy: MessageProxy) -> str:
    """Why a message is dead-lettered, as the dead-letter record's reason: the exception that failed it."""
    exc = proxy._exception
    if exc is None:
        return "failed"
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text[:MAX_REASON_CHARS]


class KmqConsumer(DramatiqConsumer):
    """What ``KmqBroker.consume`` returns: iterates one queue's messages, returning None after ``timeout_ms`` idle."""

    def __init__(self, queue_name: str, consumer: Consumer, timeout_ms: int,
                 on_nack: Callable[[KmqMessageProxy], None]) -> None:
        self.queue_name = queue_name
        self._consumer = consumer
        self._timeout_s = timeout_ms / 1000
        self._on_nack = on_nack

    def __next__(self) -> MessageProxy | None:
        try:
            received = self._consumer.receive(self._timeout_s)
        except ConsumerClosedError as err:
            raise ConnectionClosed(err) from err  # type: ignore[no-untyped-call]
        except KmqError as err:  # a fatal Kafka error: the worker's consumer thread restarts us in 3 s
            raise ConnectionFailed(err) from err  # type: ignore[no-untyped-call]
        if received is None:
            return None
        try:
            message = DramatiqMessage.decode(received.payload)
        except DecodeError as err:
            # Not a Dramatiq message (something else sent to this queue): never redelivered, kept for inspection.
            reason = f"not a Dramatiq message: {err.__cause__ or err}"[:MAX_REASON_CHARS]
            log.error("undecodable_message_dead_lettered", queue=self.queue_name, message_id=str(received.message_id),
                      reason=reason)
            received.reject(reason)
            return None
        return KmqMessageProxy(message, received)

    def ack(self, message: MessageProxy) -> None:
        _settle(message, "ack", lambda m: m.ack())

    def nack(self, message: MessageProxy) -> None:
        reason = dead_letter_reason(message)
        if _settle(message, "reject", lambda m: m.reject(reason)):
            self._on_nack(_kmq_proxy(message))

    def requeue(self, messages: Iterable[MessageProxy]) -> None:
        """The worker's unstarted messages at shutdown: given back, redelivered at once with their delivery count
        unchanged (no handler ran them)."""
        for message in messages:
            _settle(message, "give back", lambda m: m.give_back())

    def close(self) -> None:
        """Nothing to do: the broker's kmq consumer stays, for this queue's next view and for the settles of what
        this one handed out."""


def _kmq_proxy(message: MessageProxy) -> KmqMessageProxy:
    if not isinstance(message, KmqMessageProxy):
        raise TypeError(f"a kmq consumer can only settle messages it handed out, got {type(message).__name__}")
    return message


def _settle(message: MessageProxy, how: str, settle: Callable[[KmqMessage], None]) -> bool:
    """Settles through the message's own kmq delivery; False (logged) when that is no longer possible."""
    kmq_message = _kmq_proxy(message).kmq_message
    try:
        settle(kmq_message)
    except MessageSettledError as err:
        # Purged (broker.flush) while a handler ran, or settled before: nothing is left to do.
        log.info("settle_skipped", how=how, queue=kmq_message.queue, message_id=str(kmq_message.message_id),
                 reason=str(err))
        return False
    except ConsumerClosedError:
        # Its consumer closed (the broker closed, or it failed and was replaced): the tracker redelivers it.
        log.warning("settle_after_close", how=how, queue=kmq_message.queue,
                    message_id=str(kmq_message.message_id), outcome="delivered again")
        return False
    except KmqError as err:  # give_back on an at-most-once queue: nothing would bring the message back
        log.warning("settle_failed", how=how, queue=kmq_message.queue, message_id=str(kmq_message.message_id),
                    error=str(err))
        return False
    return True
