"""InFlight: one started, not yet ended message as the tracker knows it, and what its redelivery is made from."""

from __future__ import annotations

from dataclasses import dataclass

from kmq.wire import MessageId
from kmq.wire.markers import Headers, StartView


@dataclass(slots=True)
class InFlight(StartView):
    """A started, not yet ended message: the Start's payload and metadata, and its deadline. ``value`` None: a Start
    by reference (its payload and headers are read back from the messages topic when it is redelivered)."""

    message_id: MessageId
    key: bytes
    value: bytes | None
    headers: Headers
    #: 0 when a kafka-mq-go consumer wrote the Start (unknown: treated as 1).
    delivery_count: int
    first_message_id: MessageId | None
    enqueued_at_ms: int
    marker_offset: int
    start_timestamp_ms: int
    deadline_ms: int
    #: No handler had it (given back unprocessed, or read before its due time): the copy keeps ``delivery_count``.
    returned: bool = False
    #: Who Started it: (client_id, instance_id), one tuple shared by a batch's entries; None from kafka-mq-go.
    holder: tuple[str, str] | None = None
