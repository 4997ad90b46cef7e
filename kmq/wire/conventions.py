"""kmq's wire conventions, spelled once: message ids, queue names, header names, marker reasons, group names.

Everything another process reads back (a consumer, a tracker, the dead-letter tools, the audit, a kafka-mq-go
component) is named here. Pure: no Kafka imports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from kmq.errors import InvalidQueueNameError

__all__ = [
    "CLOCK_PROBE_KEY",
    "DELAY_REASON",
    "EXPIRED_REASON",
    "HEADER_DELIVERY_COUNT",
    "HEADER_DELIVER_AT",
    "HEADER_DLQ_QUEUE",
    "HEADER_DLQ_REASON",
    "HEADER_ENQUEUED_AT",
    "HEADER_EXPIRES_AT",
    "HEADER_FIRST_ID",
    "HEADER_TIME_LIMIT",
    "INTERNAL_HEADERS",
    "MAX_QUEUE_NAME_LENGTH",
    "PURGED_REASON",
    "RELEASE_REASON",
    "RESERVED_HEADER_PREFIX",
    "RETURN_REASON",
    "TRACKER_GROUP",
    "UNCOUNTED_REASONS",
    "DeliveryHeaders",
    "MessageId",
    "consumer_group",
    "validate_queue_name",
]


class MessageId(NamedTuple):
    """Where a record sits on the messages topic: (partition, offset). A tuple, so hashing and comparing it (once
    per message in the consumer's in-flight table and the tracker's state) run in C."""

    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.partition}:{self.offset}"

    @classmethod
    def parse(cls, text: str) -> MessageId:
        partition, _, offset = text.partition(":")
        return cls(int(partition), int(offset))


# --- queue names: a queue's id is the record key of its messages and markers ----------------------------------

MAX_QUEUE_NAME_LENGTH = 200


def validate_queue_name(name: object) -> str:
    """``name`` if it can be a queue id; else InvalidQueueNameError saying why."""
    if not isinstance(name, str):
        raise InvalidQueueNameError(f"queue name must be a string, got {type(name).__name__}")
    if not name:
        raise InvalidQueueNameError("queue name must not be empty")
    if len(name.encode()) > MAX_QUEUE_NAME_LENGTH:
        raise InvalidQueueNameError(f"queue name {name[:20]!r}… is {len(name.encode())} bytes; "
                                    f"the limit is {MAX_QUEUE_NAME_LENGTH}")
    if not name.isprintable() or name != name.strip():
        raise InvalidQueueNameError(f"queue name {name!r} must be printable, without surrounding spaces")
    return name


# --- headers of messages-topic and dead-letter records ---------------------------------------------------------

#: Headers with this prefix are kmq's; user headers may not use it.
RESERVED_HEADER_PREFIX = "kmq-"
#: On a redelivered copy or a dead letter: how many times a handler has had the message.
HEADER_DELIVERY_COUNT = "kmq-delivery-count"
#: On a redelivered copy or a dead letter: the first delivery's MessageId, which links every copy to the original.
HEADER_FIRST_ID = "kmq-first-message-id"
#: On a redelivered copy or a dead letter: when the original was produced (ms since the epoch).
HEADER_ENQUEUED_AT = "kmq-enqueued-at-ms"
#: Optional, set by the producer: the handler's time limit for this message (ms), overriding the worker's.
HEADER_TIME_LIMIT = "kmq-time-limit-ms"
#: Optional, set by the producer: no handler gets the message before this time (ms since the epoch).
HEADER_DELIVER_AT = "kmq-deliver-at-ms"
#: Optional, set by the producer (``ttl``, or the queue's default): no handler gets the message after this time.
HEADER_EXPIRES_AT = "kmq-expires-at-ms"
#: On a dead letter: why it was dead-lettered, and the queue it came from.
HEADER_DLQ_REASON = "kmq-dead-letter-reason"
HEADER_DLQ_QUEUE = "kmq-queue"
#: kmq's own headers, which a handler never sees in ``Message.headers`` (the time limit and the due time stay
#: visible: they travel with the payload through Starts and redelivered copies).
INTERNAL_HEADERS = frozenset({HEADER_DELIVERY_COUNT, HEADER_FIRST_ID, HEADER_ENQUEUED_AT, HEADER_DLQ_REASON,
                              HEADER_DLQ_QUEUE})


class DeliveryHeaders(NamedTuple):
    """The kmq header triple of a record; ``first_message_id`` None and ``enqueued_at_ms`` 0 when absent."""

    delivery_count: int
    first_message_id: MessageId | None
    enqueued_at_ms: int

    @classmethod
    def parse(cls, headers: Mapping[str, bytes]) -> DeliveryHeaders:
        first = headers.get(HEADER_FIRST_ID)
        enqueued = headers.get(HEADER_ENQUEUED_AT)
        return cls(int(headers.get(HEADER_DELIVERY_COUNT) or b"1"),
                   MessageId.parse(first.decode()) if first else None,
                   int(enqueued) if enqueued else 0)

    def encode(self) -> list[tuple[str, bytes]]:
        headers = [(HEADER_DELIVERY_COUNT, str(self.delivery_count).encode())]
        if self.first_message_id is not None:
            headers.append((HEADER_FIRST_ID, str(self.first_message_id).encode()))
        if self.enqueued_at_ms:
            headers.append((HEADER_ENQUEUED_AT, str(self.enqueued_at_ms).encode()))
        return headers


# --- marker reasons ------------------------------------------------------------------------------------------

#: ``reason`` of the KeepAlive that gives a message back after a handler had it (release): tells it from a
#: keep-alive. The copy counts one more delivery.
RELEASE_REASON = "released"
#: ``reason`` of the KeepAlive that gives back a message no handler saw (a consumer's close or a worker's
#: shutdown returns its prefetched messages): the copy keeps the delivery count.
RETURN_REASON = "returned"
#: ``reason`` of the KeepAlive a consumer writes for a message it read before its due time (``deliver_at``): the
#: tracker redelivers it then, with its delivery count unchanged (a hop of a delayed message, not a delivery).
DELAY_REASON = "delayed"
#: ``reason`` of the End (REJECTED) of a message read after its expiry time: never handed to a handler.
EXPIRED_REASON = "expired"
#: ``reason`` of the End (REJECTED) of a message settled by ``kmq purge``: never (again) handed to a handler.
PURGED_REASON = "purged"
#: Reasons after which the tracker's copy keeps the delivery count: no handler had the message.
UNCOUNTED_REASONS = frozenset({RETURN_REASON, DELAY_REASON})

# --- markers-topic record keys -------------------------------------------------------------------------------

#: Key of a tracker's clock probe (``marker_batch.encode_clock_probe``): a batch with no entries, so no queue's
#: figures move; a batch needs a key, and markers keys are queue ids, so this name is taken.
CLOCK_PROBE_KEY = b"kmq-clock-probe"

# --- consumer groups -----------------------------------------------------------------------------------------

#: kafka-mq-go's tracker group; ``Config.tracker_group`` defaults to it.
TRACKER_GROUP = "kafka-mq-redelivery"


def consumer_group(queue: str) -> str:
    """kafka-mq-go's group name, so Go and Python consumers of one queue share a group."""
    return f"kafka-mq-{queue}"
