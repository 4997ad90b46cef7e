"""kmq's wire conventions, spelled once: message ids, queue names, header names, marker reasons, group names.

Everything another process reads back (a consumer, a tracker, the dead-letter tools, the audit, a kafka-mq-go
component) is named here. Pure: no Kafka imports.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import NamedTuple, cast

from kmq.errors import InvalidQueueNameError

__all__ = [
    "CLOCK_PROBE_KEY",
    "CONSUMER_GROUP_PREFIX",
    "DEDUPLICATED_REASON",
    "DELAY_REASON",
    "DLQ_SUFFIX",
    "EXPIRED_REASON",
    "HEADER_DEDUP_ID",
    "HEADER_DELIVERY_COUNT",
    "HEADER_DELIVER_AT",
    "HEADER_DLQ_QUEUE",
    "HEADER_DLQ_REASON",
    "HEADER_ENQUEUED_AT",
    "HEADER_EXPIRES_AT",
    "HEADER_FIRST_ID",
    "HEADER_TIME_LIMIT",
    "INTERNAL_HEADERS",
    "MAX_DEDUP_ID_LENGTH",
    "MAX_QUEUE_NAME_LENGTH",
    "OPTION_HEADERS",
    "PRIVATE_GROUP_PREFIX",
    "PURGED_REASON",
    "REDRIVE_GROUP_PREFIX",
    "REJECTED_REASON",
    "RELEASE_REASON",
    "RESERVED_HEADER_PREFIX",
    "RETURN_REASON",
    "SET_CONSUMER_GROUP",
    "SET_MARKERS_TOPIC",
    "SET_MESSAGES_TOPIC",
    "SET_REDRIVE_GROUP",
    "SET_TRACKER_GROUP",
    "TRACKER_CLIENT_ID",
    "TRACKER_GROUP",
    "UNCOUNTED_REASONS",
    "UNREADABLE_REASON",
    "DeadLetterHeaders",
    "DeliveryHeaders",
    "MessageId",
    "consumer_group",
    "content_dedup_id",
    "datetime_from_ms",
    "deduplicated_reason",
    "duplicate_of",
    "is_deduplicated",
    "max_deliveries_reason",
    "ms_after",
    "ms_from_datetime",
    "ms_from_seconds",
    "now_ms",
    "private_group",
    "redrive_group",
    "user_headers",
    "validate_dedup_id",
    "validate_queue_name",
]


class MessageId(NamedTuple):
    """Where a record sits on the messages topic: (partition, offset). A tuple, so hashing and comparing it (once
    per message in the consumer's in-flight table and the tracker's state) run in C."""

    #: The messages-topic partition.
    partition: int
    #: The record's offset in that partition.
    offset: int

    def __str__(self) -> str:
        return f"{self.partition}:{self.offset}"

    @classmethod
    def parse(cls, text: str) -> MessageId:
        """The id written ``PARTITION:OFFSET`` (as ``str()`` gives it and ``kmq inspect`` takes it)."""
        partition, _, offset = text.partition(":")
        return cls(int(partition), int(offset))


# --- queue names: a queue's id is the record key of its messages and markers ----------------------------------

MAX_QUEUE_NAME_LENGTH = 200


def _name_problem(what: str, name: object, limit: int, *, stripped: bool) -> str | None:
    """Why ``name`` cannot be a ``what`` (a non-empty printable string of at most ``limit`` UTF-8 bytes, without
    surrounding spaces if ``stripped``), or None."""
    if not isinstance(name, str):
        return f"{what} must be a string, got {type(name).__name__}"
    if not name:
        return f"{what} must not be empty"
    if len(name.encode()) > limit:
        return f"{what} {name[:20]!r}… is {len(name.encode())} bytes; the limit is {limit}"
    if not name.isprintable() or (stripped and name != name.strip()):
        return f"{what} {name!r} must be printable" + (", without surrounding spaces" if stripped else "")
    return None


def validate_queue_name(name: object) -> str:
    """``name`` if it can be a queue id; else InvalidQueueNameError saying why."""
    problem = _name_problem("queue name", name, MAX_QUEUE_NAME_LENGTH, stripped=True)
    if problem is not None:
        raise InvalidQueueNameError(problem)
    return cast(str, name)  # a str: _name_problem said so


# --- deduplication ids -------------------------------------------------------------------------------------------

#: The longest dedup id, in UTF-8 bytes (SQS allows 128 characters; a schedule's default id is longer).
MAX_DEDUP_ID_LENGTH = 256


def validate_dedup_id(dedup_id: object) -> str:
    """``dedup_id`` if it can be a send's dedup id (a non-empty printable string of at most
    ``MAX_DEDUP_ID_LENGTH`` bytes); else ValueError saying why."""
    problem = _name_problem("dedup_id", dedup_id, MAX_DEDUP_ID_LENGTH, stripped=False)
    if problem is not None:
        raise ValueError(problem)
    return cast(str, dedup_id)  # a str: _name_problem said so


def content_dedup_id(payload: bytes, headers: Sequence[tuple[str, bytes]]) -> str:
    """The dedup id of a send on a ``content_dedup_queues`` queue: SHA-256 of its payload and user headers (in
    name order, each length-prefixed, so no two different sends encode alike), hex, prefixed ``sha256:``. kmq's own
    option headers are left out: a retried send's due time or expiry differs, its content does not."""
    digest = hashlib.sha256()
    digest.update(len(payload).to_bytes(8, "big"))
    digest.update(payload)
    for name, value in sorted(headers):
        encoded = name.encode()
        digest.update(len(encoded).to_bytes(4, "big") + encoded + len(value).to_bytes(8, "big"))
        digest.update(value)
    return "sha256:" + digest.hexdigest()


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
#: Optional, set by the producer (``send(dedup_id=…)``, or a hash of the content on a ``content_dedup_queues``
#: queue): the send's deduplication id. A handler sees it; a redelivered copy keeps it but is never checked again.
HEADER_DEDUP_ID = "kmq-dedup-id"
#: On a dead letter: why it was dead-lettered, and the queue it came from.
HEADER_DLQ_REASON = "kmq-dead-letter-reason"
HEADER_DLQ_QUEUE = "kmq-queue"
#: kmq's own headers of a delivery, which a Message reads into its fields (``delivery_count``,
#: ``first_message_id``, ``enqueued_at_ms``) and never carries.
INTERNAL_HEADERS = frozenset({HEADER_DELIVERY_COUNT, HEADER_FIRST_ID, HEADER_ENQUEUED_AT, HEADER_DLQ_REASON,
                              HEADER_DLQ_QUEUE})
#: The send options a producer writes as headers: a Message carries them (they travel with the payload through
#: Starts and redelivered copies) and shows them as ``time_limit``, ``deliver_at`` and ``expires_at``, not in
#: ``Message.headers``.
OPTION_HEADERS = frozenset({HEADER_TIME_LIMIT, HEADER_DELIVER_AT, HEADER_EXPIRES_AT})


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
#: ``reason`` of the End (REJECTED) of a duplicate send (docs/concepts/dedup.md): never Started, never handed out.
#: The End's full reason names the message it repeats: ``deduplicated: duplicate of P:O``.
DEDUPLICATED_REASON = "deduplicated"
#: Reasons after which the tracker's copy keeps the delivery count: no handler had the message.
UNCOUNTED_REASONS = frozenset({RETURN_REASON, DELAY_REASON})
#: The dead-letter reason of a ``reject()`` that gave none.
REJECTED_REASON = "rejected"
#: The dead-letter reason (and the tracker's End reason) of a message whose Start named its record (a Start by
#: reference) when the tracker could not read that record back: deleted by retention, compacted away, or the topic
#: recreated. The dead letter has no payload; its headers keep the ids, the delivery count and the queue.
UNREADABLE_REASON = "record unreadable"


def deduplicated_reason(original: MessageId) -> str:
    """The End reason of a duplicate of ``original`` (the send of its id that was let through)."""
    return f"{DEDUPLICATED_REASON}: duplicate of {original}"


def duplicate_of(reason: str) -> MessageId | None:
    """The message a deduplicated End names (``deduplicated_reason``), or None if ``reason`` is not one; an End
    reason ``deduplicated`` without a readable id names none (None too: ``is_deduplicated`` tells it)."""
    prefix = DEDUPLICATED_REASON + ": duplicate of "
    if not reason.startswith(prefix):
        return None
    try:
        return MessageId.parse(reason[len(prefix):])
    except ValueError:
        return None


def is_deduplicated(reason: str) -> bool:
    """Whether an End's reason says it ended a duplicate send (``deduplicated_reason``)."""
    return reason == DEDUPLICATED_REASON or reason.startswith(DEDUPLICATED_REASON + ":")


def max_deliveries_reason(max_deliveries: int) -> str:
    """The dead-letter reason the tracker gives a message whose worker went silent ``max_deliveries`` times."""
    return f"max deliveries ({max_deliveries}) reached"


# --- dead letters ------------------------------------------------------------------------------------------------


class DeadLetterHeaders(NamedTuple):
    """What a dead letter says about itself beyond the original's payload and user headers."""

    reason: str
    #: The queue it came from (the original's record key).
    queue_key: bytes
    delivery: DeliveryHeaders

    def encode(self, user_headers: Sequence[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
        """The dead letter's headers: the original's user headers, its delivery triple, the reason and the queue."""
        return [*user_headers, *self.delivery.encode(),
                (HEADER_DLQ_REASON, (self.reason or REJECTED_REASON).encode()), (HEADER_DLQ_QUEUE, self.queue_key)]

    @classmethod
    def parse(cls, headers: Mapping[str, bytes]) -> DeadLetterHeaders:
        return cls(headers.get(HEADER_DLQ_REASON, b"").decode(errors="replace"),
                   headers.get(HEADER_DLQ_QUEUE, b""), DeliveryHeaders.parse(headers))


def user_headers(headers: Mapping[str, bytes]) -> dict[str, bytes]:
    """The headers a sender gave, without kmq's internal ones."""
    return {k: v for k, v in headers.items() if k not in INTERNAL_HEADERS}

# --- markers-topic record keys -------------------------------------------------------------------------------

#: Key of a tracker's clock probe (``marker_batch.encode_clock_probe``): a batch with no entries, so no queue's
#: figures move; a batch needs a key, and markers keys are queue ids, so this name is taken.
CLOCK_PROBE_KEY = b"kmq-clock-probe"

# --- consumer groups -----------------------------------------------------------------------------------------

#: kafka-mq-go's tracker group; ``Config.tracker_group`` defaults to it.
TRACKER_GROUP = "kafka-mq-redelivery"


#: kafka-mq-go's consumer group prefix: with it, Go and Python consumers of one queue share a group.
CONSUMER_GROUP_PREFIX = "kafka-mq-"


def consumer_group(queue: str, prefix: str = CONSUMER_GROUP_PREFIX) -> str:
    """A queue's consumer group: ``kafka-mq-<queue>`` (kafka-mq-go's), or another prefix's (``consumer_group_prefix``:
    two deployments on one cluster that use the same queue names need different groups)."""
    return f"{prefix}{queue}"


#: The default topic set's prefixes of the redrive groups and of the one-reader groups.
REDRIVE_GROUP_PREFIX = "kmq-dlq-redrive-"
PRIVATE_GROUP_PREFIX = "kmq-"


def redrive_group(queue: str, prefix: str = REDRIVE_GROUP_PREFIX) -> str:
    """The group whose committed offsets record how far ``kmq dlq redrive`` has moved a queue's dead letters."""
    return f"{prefix}{queue}"


def private_group(purpose: str, prefix: str = PRIVATE_GROUP_PREFIX) -> str:
    """A group of one reader that only assigns partitions (a replay, a control follower): never shared."""
    return f"{prefix}{purpose}-{uuid.uuid4().hex}"


# --- topic sets: the resources of a named set, under its prefix P (docs/concepts/topic-sets.md) -------------------

#: ``P.messages`` and ``P.markers``; the dead-letter and control topics follow from the messages topic as in the
#: default set (``<messages>.dlq``, ``<messages>.control``).
SET_MESSAGES_TOPIC, SET_MARKERS_TOPIC = "messages", "markers"
#: ``P.consumer.<queue>``, ``P.tracker``, ``P.dlq-redrive.<queue>``; one-reader groups ``P.<purpose>-<uuid>``.
SET_CONSUMER_GROUP, SET_TRACKER_GROUP, SET_REDRIVE_GROUP = "consumer.", "tracker", "dlq-redrive."
#: The suffix of the default dead-letter topic's name (``<message_topic>.dlq``).
DLQ_SUFFIX = ".dlq"


#: The client id a tracker's clients, clock probes and Ends carry unless configured otherwise.
TRACKER_CLIENT_ID = "kmq-redelivery-tracker"

# --- time: on the wire, a moment is integer milliseconds since the epoch (UTC) -------------------------------------

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)


def now_ms() -> int:
    """The wall clock now, in ms since the epoch, rounded down (a reading never ahead of the clock): for "is it
    due yet" and ages."""
    return time.time_ns() // 1_000_000


def ms_from_datetime(moment: datetime) -> int:
    """An aware datetime in ms since the epoch, rounded up: a due time, a pause's end or a purge's line given as
    ``moment`` never takes effect before it. Exact (no float): 4.017 s is 4017 ms."""
    if not isinstance(moment, datetime) or moment.tzinfo is None:
        raise ValueError(f"needs a timezone-aware datetime, got {moment!r}")
    return -(-((moment - _EPOCH) // _US) // 1000)


def ms_after(seconds: float) -> int:
    """The moment ``seconds`` from now, in ms since the epoch, rounded up (a due time or an expiry: never early)."""
    return -(-(time.time_ns() + round(seconds * 1e9)) // 1_000_000)


def ms_from_seconds(seconds: float) -> int:
    """A duration in seconds as whole milliseconds (a delay, a TTL, a time limit), rounded to the nearest."""
    return round(seconds * 1000)


def datetime_from_ms(ms: int) -> datetime:
    """Milliseconds since the epoch as an aware UTC datetime (exact)."""
    return _EPOCH + timedelta(milliseconds=ms)
