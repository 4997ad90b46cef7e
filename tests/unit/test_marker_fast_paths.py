"""The kafka-mq-go format's fast paths (what a consumer writes per message and a tracker reads per marker) agree
with the codec the golden-bytes tests pin (tests/unit/test_markers.py): the bytes written, the markers refused, the
fields read back."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kmq.errors import MarkerDecodeError
from kmq.redelivery.partition_state import PartitionState
from kmq.wire import RETURN_REASON, MessageId
from kmq.wire.marker_bytes import PlainFields, encode_end, encode_keep_alive, encode_start, read_plain
from kmq.wire.markers import (
    EndReason,
    Marker,
    MarkerType,
    decode,
    encode,
    parse,
    plain_fields,
    plain_fields_of_protobuf,
)
from tests.unit.test_markers import markers


@given(markers)
def test_the_start_fast_path_writes_the_same_bytes_as_encode(marker: Marker) -> None:
    start = Marker(MarkerType.START, marker.message_id, marker.redeliver_after_ms, marker.key, marker.value,
                   delivery_count=marker.delivery_count, first_message_id=marker.first_message_id,
                   enqueued_at_ms=marker.enqueued_at_ms, client_id=marker.client_id, instance_id=marker.instance_id,
                   headers=marker.headers)
    assert encode_start(start.message_id, start.redeliver_after_ms, start.key, start.value,
                        delivery_count=start.delivery_count, first_message_id=start.first_message_id,
                        enqueued_at_ms=start.enqueued_at_ms, headers=start.headers, client_id=start.client_id,
                        instance_id=start.instance_id) == encode(start)


@given(markers)
def test_parse_accepts_what_decode_accepts_with_the_same_fields(marker: Marker) -> None:
    msg = parse(encode(marker))
    assert (MarkerType(msg.type), msg.message_id.partition, msg.message_id.offset, msg.redeliver_after_ms,
            msg.reason) == (marker.type, *marker.message_id, marker.redeliver_after_ms, marker.reason)
    assert decode(encode(marker)).end_reason is marker.end_reason or marker.end_reason is EndReason.ACKED


@given(st.binary(max_size=40))
def test_parse_refuses_exactly_what_decode_refuses(raw: bytes) -> None:
    refused = []
    for read in (parse, decode):
        with contextlib.suppress(MarkerDecodeError):
            read(raw)
            continue
        refused.append(read)
    assert refused in ([], [parse, decode])


plain_markers = st.lists(st.builds(
    lambda kind, i, after, reason: Marker(kind, MessageId(i % 2, i), after, b"q" if kind is MarkerType.START else b"",
                                          b"p%d" % i if kind is MarkerType.START else b"",
                                          reason=reason if kind is MarkerType.KEEPALIVE else ""),
    st.sampled_from(MarkerType), st.integers(0, 6), st.integers(0, 300), st.sampled_from(["", RETURN_REASON])),
    max_size=30)


@given(plain_markers, st.integers(0, 10_000))
def test_the_trackers_per_record_fast_path_folds_like_decoding_each_marker(seq: list[Marker], now_ms: int) -> None:
    fast, slow = PartitionState(0), PartitionState(0)
    for offset, marker in enumerate(seq):
        fast.apply_plain(offset, offset * 50, encode(marker))
        slow.apply(offset, offset * 50, decode(encode(marker)))
    assert fast.in_flight == slow.in_flight and fast.copies.deadlines == slow.copies.deadlines
    assert fast.stats == slow.stats
    assert (fast.commit_offset(), fast.next_offset) == (slow.commit_offset(), slow.next_offset)
    assert fast.take_expired(now_ms) == slow.take_expired(now_ms)


# --- reading: read_plain against protobuf ---------------------------------------------------------------------


def _reference(data: bytes) -> PlainFields | None:
    try:
        return plain_fields_of_protobuf(data)
    except MarkerDecodeError:
        return None


@given(markers)
def test_every_marker_a_writer_gives_is_read_without_protobuf_and_alike(marker: Marker) -> None:
    written = [encode(marker), encode_end(marker.message_id, marker.instance_id),
               encode_keep_alive(marker.message_id, marker.redeliver_after_ms),
               encode_start(marker.message_id, marker.redeliver_after_ms, marker.key, marker.value,
                            delivery_count=marker.delivery_count, first_message_id=marker.first_message_id,
                            enqueued_at_ms=marker.enqueued_at_ms, headers=marker.headers, client_id=marker.client_id,
                            instance_id=marker.instance_id)]
    for data in written:
        fields = read_plain(data)
        assert fields is not None, data.hex(" ")
        assert fields == plain_fields_of_protobuf(data) == plain_fields(data)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out) + bytes([value])


#: Values at the edges of each field's range: protobuf wraps or truncates past them.
edge_numbers = st.sampled_from([0, 1, 2, 3, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1])
#: A MessageID's or a Header's body: its two fields, in either order, or any bytes.
bodies = (st.lists(st.tuples(st.sampled_from([0x08, 0x10, 0x0A, 0x12, 0x18]), edge_numbers | st.binary(max_size=4)),
                   max_size=3).map(lambda fs: b"".join(
                       bytes([t]) + (_varint(v) if isinstance(v, int) else _varint(len(v)) + v) for t, v in fs))
          | st.binary(max_size=6) | st.sampled_from([b"\x0a\x02\xc3\x28", b"\x0a\x01x\x12\x01y"]))


@st.composite
def fields(draw: st.DrawFn) -> bytes:
    """One protobuf field of a Marker, or of no Marker: any number 1-24, either wire type, edge values."""
    number = draw(st.integers(1, 24))
    if draw(st.booleans()):
        return _varint(number << 3) + _varint(draw(edge_numbers))
    body = draw(bodies | st.sampled_from([b"\xc3\x28", b"ok"]))  # invalid and valid UTF-8 for the strings
    return _varint(number << 3 | 2) + _varint(len(body)) + body


def _mutated(data: bytes, at: int, how: int, extra: bytes) -> bytes:
    at %= len(data) + 1
    if how == 0:  # cut short
        return data[:at]
    if how == 1:  # one byte changed
        return data[:at] + bytes([(data[at] if at < len(data) else 0) ^ (extra[0] if extra else 0x80)]) + data[at + 1:]
    if how == 2:  # bytes inserted: a field where it may not be, or a field cut
        return data[:at] + extra + data[at:]
    return data + extra  # fields after the end: repeated, unknown or out of order


@given(markers, st.integers(0, 10_000), st.integers(0, 3), fields() | st.binary(max_size=12) | markers.map(encode))
def test_read_plain_reads_what_protobuf_reads_or_leaves_it_to_protobuf(marker: Marker, at: int, how: int,
                                                                       extra: bytes) -> None:
    data = _mutated(encode(marker), at, how, extra)
    fields_read = read_plain(data)
    assert fields_read is None or fields_read == _reference(data), data.hex(" ")
    assert _reference(data) == _or_refused(data)


def _split(data: bytes) -> list[bytes]:
    """A well-formed marker's bytes as its fields."""
    parts, pos = [], 0
    while pos < len(data):
        start = pos
        pos += 1 if data[pos] < 0x80 else 2
        if data[pos - 1] & 7 == 2 or data[start] & 7 == 2:
            size, pos = _read_varint(data, pos)
            pos += size
        else:
            _, pos = _read_varint(data, pos)
        parts.append(data[start:pos])
    return parts


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while data[pos] >= 0x80:
        value |= (data[pos] & 0x7F) << shift
        shift += 7
        pos += 1
    return value | data[pos] << shift, pos + 1


@given(markers, st.lists(st.tuples(st.sampled_from(["insert", "replace", "swap"]), st.integers(0, 30), fields()),
                         min_size=1, max_size=3))
def test_read_plain_of_a_marker_with_fields_added_replaced_or_moved_reads_what_protobuf_reads(
        marker: Marker, edits: list[tuple[str, int, bytes]]) -> None:
    parts = _split(encode(marker))
    assert b"".join(parts) == encode(marker)
    for edit, at, field in edits:
        at %= len(parts) + 1
        if edit == "insert" or at == len(parts):
            parts.insert(at, field)
        elif edit == "replace":
            parts[at] = field
        else:
            parts[at], parts[-1] = parts[-1], parts[at]
    data = b"".join(parts)
    fields_read = read_plain(data)
    assert fields_read is None or fields_read == _reference(data), data.hex(" ")


ID = b"\x1a\x04\x08\x01\x10\x05"  # message_id 1:5
LEFT_TO_PROTOBUF = {
    "version V1 + 1": b"\x08\x01" + ID,
    "type 3": b"\x10\x03" + ID,
    "partition 2**31 (wraps negative)": b"\x1a\x06\x08\x80\x80\x80\x80\x08",
    "partition -1 (ten bytes)": b"\x1a\x0b\x08" + _varint(2**64 - 1),
    "offset 2**63 (wraps negative)": b"\x1a\x0a\x10" + _varint(2**63),
    "delivery count 2**32 (truncated)": ID + b"\x80\x01" + _varint(2**32),
    "enqueued 2**63 (wraps negative)": ID + b"\x90\x01" + _varint(2**63),
    "end reason 2**31": ID + b"\xb0\x01" + _varint(2**31),
    "message_id twice (merged)": ID + b"\x1a\x02\x10\x07",
    "first_message_id twice (merged)": ID + b"\x8a\x01\x02\x08\x02\x8a\x01\x02\x10\x03",
    "fields out of order": ID + b"\x10\x01",
    "an unknown field": ID + b"\x38\x01",
    "a field of the wrong wire type": ID + b"\x22\x00",
    "a fixed-width field": ID + b"\x25\x00\x00\x00\x00",
    "reason not UTF-8": ID + b"\xba\x01\x02\xc3\x28",
    "client id not UTF-8": ID + b"\x9a\x01\x01\xff",
    "header key not UTF-8": ID + b"\xaa\x01\x03\x0a\x01\xff",
    "header field twice": ID + b"\xaa\x01\x04\x12\x00\x12\x00",
    "header of an unknown field": ID + b"\xaa\x01\x02\x18\x01",
    "no message_id": b"\x10\x01",
    "a varint cut short": ID + b"\x20\x80",
    "a varint of eleven bytes": ID + b"\x20" + b"\x80" * 10 + b"\x01",
    "a varint past 64 bits": ID + b"\x20" + b"\xff" * 9 + b"\x02",
    "a length past the end": ID + b"\x2a\x05ab",
    "a two-byte tag past 23": ID + b"\x80\x02\x00",
    "a tag cut short": ID + b"\x80",
    "empty": b"",
}


@pytest.mark.parametrize("data", LEFT_TO_PROTOBUF.values(), ids=LEFT_TO_PROTOBUF)
def test_read_plain_leaves_each_odd_shape_to_protobuf_which_reads_or_refuses_it(data: bytes) -> None:
    assert read_plain(data) is None
    assert _or_refused(data) == _reference(data)


@given(st.binary(max_size=60))
def test_read_plain_on_arbitrary_bytes_never_reads_what_protobuf_refuses(raw: bytes) -> None:
    fields = read_plain(raw)
    assert fields is None or fields == _reference(raw), raw.hex(" ")


def _or_refused(data: bytes) -> PlainFields | None:
    try:
        return plain_fields(data)
    except MarkerDecodeError:
        return None
