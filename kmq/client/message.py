"""Message: one delivery of a queued payload, and the handle a worker settles it with (ack, release, reject)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from kmq import otel
from kmq.errors import MessageSettledError
from kmq.wire import (
    HEADER_DELIVER_AT,
    HEADER_EXPIRES_AT,
    HEADER_GROUP,
    HEADER_TIME_LIMIT,
    OPTION_HEADERS,
    MessageId,
    datetime_from_ms,
    ms_from_seconds,
)


class Settler(Protocol):
    """What a Message needs from the consumer that delivered it."""

    def _ack(self, message: Message) -> None: ...
    def _release(self, message: Message, delay_ms: int) -> None: ...
    def _reject(self, message: Message, reason: str) -> None: ...
    def _give_back(self, message: Message) -> None: ...
    def _keep_alive(self, message: Message) -> None: ...


class Message:
    """A delivered message. Settle it exactly once with ``ack``, ``release`` or ``reject``, from any thread.

    Until then kmq keeps it alive (KeepAlive markers every redelivery timeout / 2); if the process dies,
    the redelivery tracker hands it to another consumer with ``delivery_count`` + 1.
    """

    # A plain class with its own __init__, not a dataclass: compiled by mypyc (setup.py), a dataclass keeps the
    # __init__ the dataclasses module generates at run time, interpreted and slower than this one (one per record).

    #: The bytes the producer sent.
    payload: bytes
    #: The record's headers (values as bytes): the producer's (``headers``), and the send options kmq wrote as
    #: headers (``time_limit``, ``deliver_at``, ``expires_at``, ``group``), which travel with it into Starts, copies
    #: and letters.
    record_headers: dict[str, bytes]
    #: The queue it was received from.
    queue: str
    #: Where this delivery's record sits on the messages topic (a redelivered copy has its own).
    message_id: MessageId
    #: How many times a handler has been given this message, this time included: 1 on first delivery. A message
    #: given back unprocessed (``give_back``, a consumer's close, a worker's shutdown) does not count.
    delivery_count: int
    #: The first delivery's id; equal to ``message_id`` on first delivery.
    first_message_id: MessageId
    #: When the original was produced (ms since the epoch), on copies too.
    enqueued_at_ms: int
    _settler: Settler
    #: Set by the settler once it has claimed the message (its in-flight table decides who settles: no lock here).
    _settled_as: str
    _next_keep_alive: float
    #: The ``process`` span its settles are recorded on, while one runs (kmq.otel; None when tracing is off).
    _span: Any
    #: The tracker's deadline for this delivery on the broker's clock, as far as durable markers prove it (ms; 0:
    #: no Start reported yet, or no Start at all).
    _deadline_ms: int

    def __init__(self, payload: bytes, record_headers: dict[str, bytes], queue: str, message_id: MessageId,
                 delivery_count: int, first_message_id: MessageId, enqueued_at_ms: int, _settler: Settler,
                 _settled_as: str = "", _next_keep_alive: float = 0.0, _span: Any = None,
                 _deadline_ms: int = 0) -> None:
        self.payload = payload
        self.record_headers = record_headers
        self.queue = queue
        self.message_id = message_id
        self.delivery_count = delivery_count
        self.first_message_id = first_message_id
        self.enqueued_at_ms = enqueued_at_ms
        self._settler = _settler
        self._settled_as = _settled_as
        self._next_keep_alive = _next_keep_alive
        self._span = _span
        self._deadline_ms = _deadline_ms

    def __repr__(self) -> str:
        return (f"Message(payload={self.payload!r}, record_headers={self.record_headers!r}, queue={self.queue!r}, "
                f"message_id={self.message_id!r}, delivery_count={self.delivery_count!r}, "
                f"first_message_id={self.first_message_id!r}, enqueued_at_ms={self.enqueued_at_ms!r})")

    @property
    def enqueued_at(self) -> datetime:
        """When the original was produced (UTC)."""
        return datetime_from_ms(self.enqueued_at_ms)

    @property
    def headers(self) -> dict[str, bytes]:
        """The producer's headers (values as bytes); kmq's send options are ``time_limit``, ``deliver_at``,
        ``expires_at`` and ``group``."""
        record = self.record_headers
        if not record or not any(k in OPTION_HEADERS for k in record):
            return record
        return {k: v for k, v in record.items() if k not in OPTION_HEADERS}

    @property
    def time_limit(self) -> float | None:
        """Seconds the sender allowed a handler for this message (``send(time_limit=…)``), or None."""
        raw = self.record_headers.get(HEADER_TIME_LIMIT)
        return int(raw) / 1000 if raw else None

    @property
    def deliver_at_ms(self) -> int | None:
        """``deliver_at`` in ms since the epoch, or None."""
        raw = self.record_headers.get(HEADER_DELIVER_AT)
        return int(raw) if raw else None

    @property
    def deliver_at(self) -> datetime | None:
        """When the sender allowed it to be handed out (``send(delay=…)`` / ``deliver_at``), or None."""
        due = self.deliver_at_ms
        return None if due is None else datetime_from_ms(due)

    @property
    def expires_at(self) -> datetime | None:
        """After when no handler gets it (``send(ttl=…)``, or the queue's ``queue_ttl_ms``), or None."""
        raw = self.record_headers.get(HEADER_EXPIRES_AT)
        return datetime_from_ms(int(raw)) if raw else None

    @property
    def group(self) -> str | None:
        """The message group it was sent with (``send(group=…)``), or None: its group's messages are handed out in
        the order they were written and one at a time (see the message groups guide)."""
        raw = self.record_headers.get(HEADER_GROUP)
        return raw.decode(errors="replace") if raw else None

    @property
    def redelivered(self) -> bool:
        """True from the second delivery on (``delivery_count > 1``)."""
        return self.delivery_count > 1

    @property
    def settled(self) -> bool:
        """True once acked, released, rejected, given back or purged."""
        return bool(self._settled_as)

    def ack(self) -> None:
        """Marks the message done (End marker); it is never delivered again."""
        self._settler._ack(self)
        if self._span is not None:
            otel.settled(self._span, "ack")

    def release(self, delay: float = 0.0) -> None:
        """Gives the message back for redelivery, now or after ``delay`` seconds."""
        if delay < 0:
            raise ValueError(f"release delay must be >= 0 seconds, got {delay}")
        self._settler._release(self, ms_from_seconds(delay))
        if self._span is not None:
            otel.settled(self._span, "release", delay_s=delay)

    def reject(self, reason: str = "") -> None:
        """Refuses the message for good: it goes to the dead-letter topic and is never redelivered."""
        self._settler._reject(self, reason)
        if self._span is not None:
            otel.settled(self._span, "reject", reason=reason)

    def give_back(self) -> None:
        """Returns a message its handler never started on (a worker shutting down with prefetched messages):
        redelivered at once, and unlike ``release`` it does not count as a delivery."""
        self._settler._give_back(self)
        if self._span is not None:
            otel.settled(self._span, "give_back")

    def keep_alive(self) -> None:
        """Extends the deadline now; automatic keep-alives already run while the message is unsettled."""
        if self.settled:
            raise MessageSettledError(f"message {self.message_id} of queue {self.queue!r} is already settled "
                                      f"({self._settled_as})")
        self._settler._keep_alive(self)

    def _already_settled(self, how: str) -> MessageSettledError:
        return MessageSettledError(f"cannot {how} message {self.message_id} of queue {self.queue!r}: "
                                   f"already settled ({self._settled_as or 'by another thread'})")
