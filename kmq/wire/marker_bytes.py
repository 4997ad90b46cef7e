"""The per-message markers of the kafka-mq-go format (Start, End, keep-alive), written and read byte by byte.

A consumer in that format writes a Start and an End record per message, and building a protobuf message to
serialise each was a fifth of its time (issue #37). These functions write the same bytes directly: the fields in
field-number order, defaults left out, ``message_id`` always present (``1a 00`` for partition 0 offset 0, as Go
writes it), as protobuf's own serialiser does. ``kmq.wire.markers.encode`` stays the reference, and
``tests/unit/test_markers.py`` holds every function here equal to it on drawn markers.

A tracker reads every one of those records back, and parsing each into a protobuf message and reading its fields
one by one was a third of a rebuild's time. ``read_plain`` reads the same fields from the bytes in one pass, for the
shape every writer gives (each known field at most once, in field-number order, its values in range); anything
else it leaves to ``kmq.wire.markers.plain_fields``, the reference, which ``tests/unit/test_marker_fast_paths.py``
holds it equal to on drawn markers and arbitrary bytes. Compiled by mypyc (setup.py's HOT_PATH). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from kmq.wire import MessageId

#: A per-message marker's fields as a tracker folds them: (type, message_id, redeliver_after_ms, key, value,
#: headers, delivery_count, first_message_id, enqueued_at_ms, reason). A tuple: it is made once per marker read.
PlainFields = tuple[int, MessageId, int, bytes, bytes, tuple[tuple[str, bytes], ...], int, MessageId | None, int,
                    str]

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


# --- reading ----------------------------------------------------------------------------------------------------

#: The largest value a varint field of each kind holds as itself. Beyond it protobuf wraps (int32, int64) or
#: truncates (uint32, the enums): the reference decides those.
_INT32_MAX: Final = 2**31 - 1
_UINT32_MAX: Final = 2**32 - 1
_INT64_MAX: Final = 2**63 - 1
_UINT64_MAX: Final = 2**64 - 1
#: Marker.type: START, END, KEEPALIVE (a version other than V1 = 0 is refused).
_MAX_TYPE: Final = 2
_HEADERS_FIELD: Final = 21


def read_plain(data: bytes) -> PlainFields | None:
    """A per-message marker's fields, or None when its bytes are not in the shape every writer gives (the
    reference, ``kmq.wire.markers.plain_fields``, then reads or refuses it)."""
    n = len(data)
    pos = 0
    last = 0
    kind = after = count = enqueued = 0
    message_id: MessageId | None = None
    first: MessageId | None = None
    key = value = b""
    reason = ""
    headers: list[tuple[str, bytes]] = []
    while pos < n:
        tag = data[pos]
        if tag >= 0x80:  # fields 16-23: a two-byte tag whose second byte is 1
            if pos + 1 >= n or data[pos + 1] != 1:
                return None
            tag = (tag & 0x7F) | 0x80
            pos += 2
        else:
            pos += 1
        field = tag >> 3
        if field < last or (field == last and field != _HEADERS_FIELD):
            return None  # out of order or repeated: protobuf merges those, the reference knows how
        last = field
        if tag & 7 == 0:  # varint
            number, pos = _read_varint(data, pos, n)
            if pos < 0:
                return None
            if field == 1:
                if number:
                    return None  # a version other than V1: the reference refuses it
            elif field == 2:
                if number > _MAX_TYPE:
                    return None
                kind = number
            elif field == 4:
                after = number
            elif field == 16:
                if number > _UINT32_MAX:
                    return None
                count = number
            elif field == 18:
                if number > _INT64_MAX:
                    return None
                enqueued = number
            elif field == 22:
                if number > _INT32_MAX:
                    return None  # an end reason is not folded; only checked as protobuf would read it
            else:
                return None
        elif tag & 7 == 2:  # length-delimited
            size, pos = _read_varint(data, pos, n)
            if pos < 0 or size > n - pos:
                return None
            end = pos + size
            if field == 3 or field == 17:
                read_id = _read_message_id(data, pos, end)
                if read_id is None:
                    return None
                if field == 3:
                    message_id = read_id
                else:
                    first = read_id
            elif field == 5:
                key = data[pos:end]
            elif field == 6:
                value = data[pos:end]
            elif field == 19 or field == 20 or field == 23:
                try:
                    text = data[pos:end].decode("utf-8")
                except UnicodeDecodeError:
                    return None
                if field == 23:
                    reason = text
            elif field == _HEADERS_FIELD:
                header = _read_header(data, pos, end)
                if header is None:
                    return None
                headers.append(header)
            else:
                return None
            pos = end
        else:
            return None
    if message_id is None:
        return None  # the reference refuses a marker without one
    return kind, message_id, after, key, value, tuple(headers), count, first, enqueued, reason


def _read_varint(data: bytes, pos: int, n: int) -> tuple[int, int]:
    """(value, position after it); position -1 if cut short, longer than ten bytes or past 64 bits."""
    value = 0
    shift = 0
    while pos < n:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (value, pos) if value <= _UINT64_MAX else (0, -1)
        shift += 7
        if shift > 63:
            return 0, -1
    return 0, -1


def _read_message_id(data: bytes, pos: int, end: int) -> MessageId | None:
    """A MessageID's partition and offset, both in range (≥ 0), or None."""
    partition = offset = 0
    last = 0
    while pos < end:
        tag = data[pos]
        pos += 1
        if (tag != 0x08 and tag != 0x10) or tag <= last:
            return None
        last = tag
        number, pos = _read_varint(data, pos, end)
        if pos < 0:
            return None
        if tag == 0x08:
            if number > _INT32_MAX:
                return None  # negative, or wrapped: the reference decides
            partition = number
        else:
            if number > _INT64_MAX:
                return None
            offset = number
    return _new_id(MessageId, (partition, offset))


def _read_header(data: bytes, pos: int, end: int) -> tuple[str, bytes] | None:
    """A Header's key (UTF-8) and value, or None."""
    name = ""
    content = b""
    last = 0
    while pos < end:
        tag = data[pos]
        pos += 1
        if (tag != 0x0A and tag != 0x12) or tag <= last:
            return None
        last = tag
        size, pos = _read_varint(data, pos, end)
        if pos < 0 or size > end - pos:
            return None
        if tag == 0x0A:
            try:
                name = data[pos:pos + size].decode("utf-8")
            except UnicodeDecodeError:
                return None
        else:
            content = data[pos:pos + size]
        pos += size
    return name, content


#: MessageId's own constructor is a Python function (the named tuple's ``__new__``); the tuple's is not.
_new_id: Final = tuple.__new__
