"""The marker codec: kmq's marker values ⇄ protobuf bytes, byte-compatible with kafka-mq-go (fields 1-6).

Pure: no Kafka imports. Decoding never trusts its input: anything that is not a well-formed marker raises
MarkerDecodeError, which callers log, count and skip.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any, cast

from google.protobuf.message import DecodeError

from kmq.errors import MarkerDecodeError
from kmq.wire import MessageId
from kmq.wire._proto import kmq_marker_pb2 as pb
from kmq.wire.marker_bytes import PlainFields, read_plain

Headers = tuple[tuple[str, bytes], ...]

class MarkerType(IntEnum):
    START = 0
    END = 1
    KEEPALIVE = 2


class EndReason(IntEnum):
    ACKED = 0
    REJECTED = 1
    REDELIVERED = 2
    DEAD_LETTERED = 3


class StartView:
    """What a Start's fields say, shared by a Start marker and the tracker's in-flight entry built from it."""

    __slots__ = ()
    key: bytes
    message_id: MessageId
    first_message_id: MessageId | None

    @property
    def queue(self) -> str:
        return self.key.decode("utf-8", "replace")

    @property
    def first_id(self) -> MessageId:
        """The first delivery's message id, which links redelivered copies to the original."""
        return self.first_message_id or self.message_id


@dataclass(frozen=True, slots=True)
class Marker(StartView):
    """One markers-topic record. ``key``/``value``/``headers`` are set on START only (the payload to redeliver),
    ``value``/``headers`` empty on a Start by reference."""

    type: MarkerType
    message_id: MessageId
    redeliver_after_ms: int = 0
    key: bytes = b""
    value: bytes = b""
    # kmq extensions; 0 / "" / None mean "written by kafka-mq-go" (unknown).
    delivery_count: int = 0
    first_message_id: MessageId | None = None
    enqueued_at_ms: int = 0
    client_id: str = ""
    instance_id: str = ""
    headers: Headers = ()
    end_reason: EndReason = EndReason.ACKED
    reason: str = ""
    #: A Start by reference (kmq format only): no payload or headers here, they are on the messages topic at
    #: ``message_id``.
    reference: bool = False
    #: About an owner-tracked (grouped) message (kmq format only, ``MarkerBatch.owner_tracked``): its owner
    #: redelivers it in place, with a new Start of the same record.
    owner_tracked: bool = False


_SCALAR_FIELDS = ("redeliver_after_ms", "key", "value", "delivery_count", "enqueued_at_ms", "client_id",
                  "instance_id", "reason")


def encode(marker: Marker) -> bytes:
    """Serialises a marker; fields 1-6 exactly as kafka-mq-go writes them (message_id always present)."""
    if marker.reference:
        raise ValueError(f"a Start by reference ({marker.message_id}) has no per-message encoding")
    # Built through the constructor so partition 0 / offset 0 is still written (bytes 1a 00), as Go does.
    mid = marker.message_id
    msg = pb.Marker(message_id=pb.MessageID(partition=mid.partition, offset=mid.offset))
    # Only non-default fields are set: each constructor argument costs time on the hot path (two per message).
    for name in _SCALAR_FIELDS:
        value = getattr(marker, name)
        if value:
            setattr(msg, name, value)
    if marker.type:
        msg.type = cast(Any, int(marker.type))
    if marker.end_reason:
        msg.end_reason = cast(Any, int(marker.end_reason))
    if marker.first_message_id is not None:
        first = marker.first_message_id
        msg.first_message_id.CopyFrom(pb.MessageID(partition=first.partition, offset=first.offset))
    for key, value in marker.headers:
        msg.headers.add(key=key, value=value)
    return msg.SerializeToString()


def parse(data: bytes | None) -> pb.Marker:
    """The protobuf of a well-formed marker (what ``decode`` checks, without building a Marker); raises
    MarkerDecodeError like ``decode``."""
    return parse_with_id(data)[0]


def parse_with_id(data: bytes | None) -> tuple[pb.Marker, int, MessageId]:
    """``parse``, and the marker's type and message id, each field read once (a field read of the protobuf costs
    as much as the parse itself: the tracker's per-record path reads them from here)."""
    if not data:
        # An empty value parses as a START without message id: it crashes the Go tracker, so never accept it.
        raise MarkerDecodeError("empty value", data)
    msg = pb.Marker()
    try:
        msg.ParseFromString(data)
    except DecodeError as err:
        raise MarkerDecodeError(f"not a protobuf Marker ({err})", data) from err
    version, kind = msg.version, msg.type
    if version != pb.Marker.V1:
        raise MarkerDecodeError(f"unknown marker version {version}", data)
    if kind not in _TYPES:
        raise MarkerDecodeError(f"unknown marker type {kind}", data)
    if not msg.HasField("message_id"):
        raise MarkerDecodeError("no message_id", data)
    where = msg.message_id
    partition, offset = where.partition, where.offset
    if partition < 0 or offset < 0:
        raise MarkerDecodeError("negative message_id", data)
    return msg, kind, _new_id(MessageId, (partition, offset))


def plain_fields(data: bytes | None) -> PlainFields:
    """A per-message marker's fields as a tracker folds them (``kmq.wire.marker_bytes.PlainFields``); raises
    MarkerDecodeError like ``decode``. Reads the bytes directly when they have the shape every writer gives
    (``read_plain``), else through protobuf, which is the reference for both."""
    fields = read_plain(data) if data else None
    return fields if fields is not None else plain_fields_of_protobuf(data)


def plain_fields_of_protobuf(data: bytes | None) -> PlainFields:
    """``plain_fields`` read through protobuf: the reference ``read_plain`` is held equal to."""
    msg, kind, message_id = parse_with_id(data)
    first = msg.first_message_id if msg.HasField("first_message_id") else None
    return (kind, message_id, msg.redeliver_after_ms, msg.key, msg.value,
            tuple((h.key, h.value) for h in msg.headers) if msg.headers else (), msg.delivery_count,
            None if first is None else _new_id(MessageId, (first.partition, first.offset)), msg.enqueued_at_ms,
            msg.reason)


#: MessageId's own constructor is a Python function; the tuple's is not (same value).
_new_id = tuple.__new__
_TYPES = frozenset(int(t) for t in MarkerType)


def decode(data: bytes | None) -> Marker:
    """Parses a marker; raises MarkerDecodeError for empty, unparseable or semantically invalid records."""
    msg, kind_number, message_id = parse_with_id(data)
    kind = MarkerType(kind_number)
    # A START with an empty key is what a kafka-mq-go consumer of queue "" writes (proto3 omits empty bytes):
    # legal there, so a kmq tracker tracks and redelivers it like any other (its copy has an empty key).
    return Marker(
        type=kind,
        message_id=message_id,
        redeliver_after_ms=msg.redeliver_after_ms,
        key=msg.key,
        value=msg.value,
        delivery_count=msg.delivery_count,
        first_message_id=(MessageId(msg.first_message_id.partition, msg.first_message_id.offset)
                          if msg.HasField("first_message_id") else None),
        enqueued_at_ms=msg.enqueued_at_ms,
        client_id=msg.client_id,
        instance_id=msg.instance_id,
        headers=tuple((h.key, h.value) for h in msg.headers),
        end_reason=(EndReason(msg.end_reason) if msg.end_reason in EndReason._value2member_map_
                    else EndReason.ACKED),
        reason=msg.reason,
    )
