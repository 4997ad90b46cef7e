"""Records as Messages: the one step of the Start pipeline that runs for every record of this queue.

Compiled by mypyc (setup.py's hot path, with ``kmq.client.message``, so a Message is built by a C constructor and
not a dataclass ``__init__``); ``tests/unit/test_compiled.py`` holds it equal to this source run interpreted.
"""

from __future__ import annotations

from typing import Final

from confluent_kafka import Message as KafkaMessage

from kmq import wire
from kmq._kafka.records import record_timestamp_ms
from kmq.client.message import Message, Settler
from kmq.wire import MessageId

#: MessageId's own constructor is a Python function (the named tuple's ``__new__``); the tuple's is not.
_new_id: Final = tuple.__new__


def to_message(record: KafkaMessage, queue: str, settler: Settler, next_keep_alive: float) -> Message:
    """A record of ``queue`` as the Message handed to a worker (kmq headers parsed, user headers kept)."""
    msg_id: MessageId = _new_id(MessageId, (record.partition() or 0, record.offset() or 0))
    raw: list[tuple[str, bytes]] | None = record.headers()  # type: ignore[assignment]
    headers: dict[str, bytes] = {k: v or b"" for k, v in raw} if raw else {}
    internal = wire.INTERNAL_HEADERS
    if not headers or internal.isdisjoint(headers):  # a first delivery (user headers, a dedup id): the common case
        kind, timestamp_ms = record.timestamp()
        return Message(record.value() or b"", headers, queue, msg_id, 1, msg_id,
                       timestamp_ms if kind and timestamp_ms is not None and timestamp_ms >= 0 else 0,
                       settler, "", next_keep_alive)
    kmq = wire.DeliveryHeaders.parse(headers)
    return Message(
        payload=record.value() or b"", queue=queue, message_id=msg_id,
        record_headers={k: v for k, v in headers.items() if k not in internal},
        delivery_count=kmq.delivery_count, first_message_id=kmq.first_message_id or msg_id,
        enqueued_at_ms=kmq.enqueued_at_ms or record_timestamp_ms(record),
        _settler=settler, _next_keep_alive=next_keep_alive,
    )


def to_messages(records: list[KafkaMessage], queue: str, settler: Settler, next_keep_alive: float) -> list[Message]:
    """``to_message`` of each record of a batch (the loop compiled with it)."""
    return [to_message(record, queue, settler, next_keep_alive) for record in records]
