"""The per-message markers of the kafka-mq-go format (Start, End, keep-alive), written byte by byte.

A consumer in that format writes a Start and an End record per message, and building a protobuf message to
serialise each was a fifth of its time (issue #37). These functions write the same bytes directly: the fields in
field-number order, defaults left out, ``message_id`` always present (``1a 00`` for partition 0 offset 0, as Go
writes it), as protobuf's own serialiser does. ``kmq.wire.markers.encode`` stays the reference, and
``tests/unit/test_markers.py`` holds every function here equal to it on drawn markers. Compiled by mypyc (setup.py's
HOT_PATH). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from kmq.wire import MessageId

# Field tags of kmq_marker.proto's Marker ((number << 3) | wire type), as varint bytes.
_TYPE_END: Final = b"\x10\x01"  # type (2) = END (1)
_TYPE_KEEPALIVE: Final = b"\x10\x02"
_MESSAGE_ID: Final = b"\x1a"  # 3, length-delimited
_REDELIVER_AFTER_MS: Final = b"\x20"  # 4, varint
_KEY: Final = b"\x2a"  # 5
_VALUE: Final = b"\x32"  # 6
_DELIVERY_COUNT: Final = b"\x80\x01"  # 16, varint
_FIRST_MESSAGE_ID: Final = b"\x8a\x01"  # 17
_ENQUEUED_AT_MS: Final = b"\x90\x01"  # 18, varint
_CLIENT_ID: Final = b"\x9a\x01"  # 19
_INSTANCE_ID: Final = b"\xa2\x01"  # 20
_HEADER: Final = b"\xaa\x01"  # 21, repeated Header
# MessageID's and Header's fields (1: partition / key, 2: offset / value).
_FIELD_1_VARINT: Final = b"\x08"
_FIELD_2_VARINT: Final = b"\x10"
_FIELD_1_BYTES: Final = b"\x0a"
_FIELD_2_BYTES: Final = b"\x12"
#: A negative int32 or int64 is written as its 64-bit two's complement (ten bytes), as protobuf does.
_TWO_TO_64: Final = 1 << 64


def encode_end(message_id: MessageId, instance_id: str = "") -> bytes:
    """An End of ``message_id`` (an ack). The instance id tells a kmq ack from a kafka-mq-go End, which has none
    (see kmq.ops.lifecycle)."""
    out = _TYPE_END + _message_id(_MESSAGE_ID, message_id)
    if instance_id:
        out += _text(_INSTANCE_ID, instance_id)
    return out


def encode_keep_alive(message_id: MessageId, redeliver_after_ms: int) -> bytes:
    """A keep-alive of ``message_id``: redeliver it ``redeliver_after_ms`` after this record, not before."""
    out = _TYPE_KEEPALIVE + _message_id(_MESSAGE_ID, message_id)
    if redeliver_after_ms:
        out += _REDELIVER_AFTER_MS + _varint(redeliver_after_ms)
    return out


def encode_start(message_id: MessageId, redeliver_after_ms: int, key: bytes, value: bytes, *, delivery_count: int,
                 first_message_id: MessageId | None, enqueued_at_ms: int, headers: Iterable[tuple[str, bytes]],
                 client_id: str = "", instance_id: str = "") -> bytes:
    """A Start of ``message_id`` with the copy the tracker redelivers (``key`` its queue, ``value`` its payload)."""
    out = bytearray(_message_id(_MESSAGE_ID, message_id))  # appended in place: the payload is copied once
    if redeliver_after_ms:
        out += _REDELIVER_AFTER_MS + _varint(redeliver_after_ms)
    if key:
        out += _bytes(_KEY, key)
    if value:
        out += _bytes(_VALUE, value)
    if delivery_count:
        out += _DELIVERY_COUNT + _varint(delivery_count)
    if first_message_id is not None:
        out += _message_id(_FIRST_MESSAGE_ID, first_message_id)
    if enqueued_at_ms:
        out += _ENQUEUED_AT_MS + _varint(enqueued_at_ms)
    if client_id:
        out += _text(_CLIENT_ID, client_id)
    if instance_id:
        out += _text(_INSTANCE_ID, instance_id)
    for name, content in headers:
        header = (_text(_FIELD_1_BYTES, name) if name else b"") + (_bytes(_FIELD_2_BYTES, content) if content else b"")
        out += _bytes(_HEADER, header)
    return bytes(out)


def _message_id(tag: bytes, message_id: MessageId) -> bytes:
    partition, offset = message_id
    body = b""
    if partition:
        body = _FIELD_1_VARINT + _varint(partition)
    if offset:
        body += _FIELD_2_VARINT + _varint(offset)
    return tag + _varint(len(body)) + body


def _text(tag: bytes, text: str) -> bytes:
    return _bytes(tag, text.encode("utf-8"))


def _bytes(tag: bytes, content: bytes) -> bytes:
    return tag + _varint(len(content)) + content


def _varint(value: int) -> bytes:
    if value < 0:
        value += _TWO_TO_64
    if value < 0x80:
        return _ONE_BYTE[value]
    # The groups of 7 bits, low first, each with its continuation bit, gathered in one int and written at once
    # (a bytearray grown a byte at a time cost twice as much).
    packed, size = 0, 0
    while value >= 0x80:
        packed |= ((value & 0x7F) | 0x80) << (8 * size)
        value >>= 7
        size += 1
    packed |= value << (8 * size)
    return packed.to_bytes(size + 1, "little")


#: Every varint below 128 (most lengths, counts and field values), made once.
_ONE_BYTE: Final = [bytes((i,)) for i in range(0x80)]
