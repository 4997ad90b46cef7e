"""A kombu message on a kmq queue: the payload bytes, the send options read from it, and the way back. Pure.

kombu's virtual transports hand ``_put`` a JSON-able dict (``body``, ``headers``, ``properties`` …); it travels as
the kmq payload, unchanged. What kmq can do better than the worker's memory is read off it here: a Celery task's
``eta`` (countdown, retry with countdown) becomes kmq's ``deliver_at``, and kombu's ``expiration`` (milliseconds,
AMQP's per-message TTL) becomes kmq's ``ttl``. A ``dedup_id`` header (``apply_async(headers={"dedup_id": …})``)
becomes kmq's dedup id on the task's first send; a retry (Celery re-sends the task, ``retries`` > 0) is a new run
of the same task, never a duplicate of it, so it goes without.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

#: A kmq header naming the Celery task, so `kmq dlq list` and `kmq inspect` show what a dead letter was.
HEADER_TASK = "celery-task"
HEADER_TASK_ID = "celery-task-id"
#: The Celery message header a task's sender sets to deduplicate it (docs/guides/dedup-and-schedules.md).
DEDUP_HEADER = "dedup_id"

Payload = dict[str, Any]


class EnvelopeError(ValueError):
    """Raised when a kmq message's payload is not a kombu message (it was sent by something else)."""


@dataclass(frozen=True, slots=True)
class Outgoing:
    """What ``_put`` sends: the payload bytes and the kmq send options taken from the kombu message."""

    payload: bytes
    headers: dict[str, str]
    deliver_at: datetime | None
    ttl_s: float | None
    dedup_id: str | None = None


def encode(message: Payload, now: datetime) -> Outgoing:
    """The kmq form of a kombu message; ``now`` decides whether an ``eta`` is still ahead."""
    headers = message.get("headers") or {}
    names: dict[str, str] = {}
    if isinstance(headers.get("task"), str):
        names[HEADER_TASK] = headers["task"]
    if isinstance(headers.get("id"), str):
        names[HEADER_TASK_ID] = headers["id"]
    return Outgoing(
        payload=json.dumps(message, separators=(",", ":")).encode(),
        headers=names,
        deliver_at=due_time(headers.get("eta"), now),
        ttl_s=ttl_seconds((message.get("properties") or {}).get("expiration")),
        dedup_id=dedup_id if isinstance(dedup_id := headers.get(DEDUP_HEADER), str) and not headers.get("retries")
        else None,
    )


def due_time(eta: object, now: datetime) -> datetime | None:
    """A Celery ``eta`` header (ISO 8601; naive means UTC, Celery's default) as an aware time if still ahead."""
    if not isinstance(eta, str) or not eta:
        return None
    try:
        when = datetime.fromisoformat(eta)
    except ValueError:
        return None  # Celery will refuse it itself, with its own error; kmq delivers it at once
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when if when > now else None


def ttl_seconds(expiration: object) -> float | None:
    """kombu's ``expiration`` property (milliseconds, a string as in AMQP) in seconds, or None."""
    if expiration is None:
        return None
    try:
        ms = float(str(expiration))
    except ValueError:
        return None
    # kmq wants a positive ttl; an expiration of 0 means "already expired": the smallest kmq allows.
    return max(ms, 1.0) / 1000


def decode(payload: bytes, delivery_tag: str, *, redelivered: bool, delivery_count: int,
           message_id: str) -> Payload:
    """The kombu message of a kmq payload, with a fresh delivery tag and kmq's delivery facts in its
    ``delivery_info`` (a redelivered copy is a new delivery, so the publisher's tag is not reused)."""
    try:
        message = json.loads(payload)
    except (UnicodeDecodeError, ValueError) as err:
        raise EnvelopeError(f"payload is not JSON: {err}") from None
    if not isinstance(message, dict) or not isinstance(message.get("properties"), dict):
        raise EnvelopeError("payload is not a kombu message (no 'properties' object)")
    properties = message["properties"]
    properties["delivery_tag"] = delivery_tag
    info = properties.get("delivery_info")
    if not isinstance(info, dict):
        info = properties["delivery_info"] = {}
    info["redelivered"] = redelivered
    info["kmq_delivery_count"] = delivery_count
    info["kmq_message_id"] = message_id
    # Celery hands a task only some keys of delivery_info, but all its properties: ``self.request.properties``.
    properties["kmq_delivery_count"] = delivery_count
    properties["kmq_message_id"] = message_id
    if redelivered:
        message["redelivered"] = True
    return message
