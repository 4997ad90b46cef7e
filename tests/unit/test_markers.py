"""The marker codec: golden bytes from kafka-mq-go, round trips, interop with the upstream schema, bad input."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kmq.errors import MarkerDecodeError
from kmq.wire import MessageId
from kmq.wire.marker_bytes import encode_end, encode_keep_alive
from kmq.wire.markers import EndReason, Marker, MarkerType, decode, encode
from tests.interop._proto import kafka_mq_v1_pb2 as upstream

GOLDEN = [
    (Marker(MarkerType.START, MessageId(1, 5), 1000, b"A", b"apple"),
     "1a 04 08 01 10 05 20 e8 07 2a 01 41 32 05 61 70 70 6c 65"),
    (Marker(MarkerType.KEEPALIVE, MessageId(1, 5), 1000), "10 02 1a 04 08 01 10 05 20 e8 07"),
    (Marker(MarkerType.END, MessageId(1, 5)), "10 01 1a 04 08 01 10 05"),
    (Marker(MarkerType.END, MessageId(0, 0)), "10 01 1a 00"),
    (Marker(MarkerType.START, MessageId(0, 0), 60000, b"test-queue", b"x"),
     "1a 00 20 e0 d4 03 2a 0a 74 65 73 74 2d 71 75 65 75 65 32 01 78"),
]

message_ids = st.builds(MessageId, st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1))
markers = st.builds(
    Marker,
    type=st.sampled_from(MarkerType),
    message_id=message_ids,
    redeliver_after_ms=st.integers(0, 2**64 - 1),
    key=st.binary(min_size=1, max_size=20),
    value=st.binary(max_size=200),
    delivery_count=st.integers(0, 2**32 - 1),
    first_message_id=st.none() | message_ids,
    enqueued_at_ms=st.integers(0, 2**62),
    client_id=st.text(max_size=10),
    instance_id=st.text(max_size=10),
    headers=st.lists(st.tuples(st.text(max_size=8), st.binary(max_size=8)), max_size=3).map(tuple),
    end_reason=st.sampled_from(EndReason),
    reason=st.text(max_size=20),
)


@pytest.mark.parametrize(("marker", "golden"), GOLDEN)
def test_kmq_writes_kafka_mq_go_golden_bytes(marker: Marker, golden: str) -> None:
    assert encode(marker).hex(" ") == golden


@pytest.mark.parametrize(("marker", "golden"), GOLDEN)
def test_kmq_reads_kafka_mq_go_golden_bytes(marker: Marker, golden: str) -> None:
    assert decode(bytes.fromhex(golden)) == marker


@given(markers)
def test_every_marker_survives_a_round_trip(marker: Marker) -> None:
    assert decode(encode(marker)) == marker


@given(message_ids | st.builds(MessageId, st.integers(-2**31, 2**31 - 1), st.integers(-2**63, 2**63 - 1)),
       st.integers(0, 2**64 - 1), st.text(max_size=10))
def test_the_end_and_keep_alive_fast_paths_write_the_same_bytes_as_encode(mid: MessageId, after: int,
                                                                          instance_id: str) -> None:
    assert encode_end(mid) == encode(Marker(MarkerType.END, mid))
    assert encode_end(mid, instance_id) == encode(Marker(MarkerType.END, mid, instance_id=instance_id))
    assert encode_keep_alive(mid, after) == encode(Marker(MarkerType.KEEPALIVE, mid, after))


@given(markers)
def test_the_upstream_schema_reads_fields_1_to_6_of_any_kmq_marker(marker: Marker) -> None:
    theirs = upstream.Marker()
    theirs.ParseFromString(encode(marker))
    assert theirs.version == upstream.Marker.V1
    assert theirs.type == int(marker.type)
    assert (theirs.message_id.partition, theirs.message_id.offset) == (
        marker.message_id.partition, marker.message_id.offset)
    assert theirs.redeliver_after_ms == marker.redeliver_after_ms
    assert (theirs.key, theirs.value) == (marker.key, marker.value)


@given(st.sampled_from(MarkerType), message_ids, st.integers(0, 2**40), st.binary(min_size=1), st.binary())
def test_kmq_reads_markers_built_with_the_plain_upstream_schema(
    kind: MarkerType, mid: MessageId, after: int, key: bytes, value: bytes
) -> None:
    theirs = upstream.Marker(type=int(kind), redeliver_after_ms=after, key=key, value=value,
                             message_id=upstream.MessageID(partition=mid.partition, offset=mid.offset))
    ours = decode(theirs.SerializeToString())
    assert (ours.type, ours.message_id, ours.redeliver_after_ms, ours.key, ours.value) == (
        kind, mid, after, key, value)
    assert ours.delivery_count == 0 and ours.first_message_id is None and ours.first_id == mid


@pytest.mark.parametrize(("raw", "reason"), [
    (None, "empty"),
    (b"", "empty"),
    (b"this is not a valid marker", "not a protobuf"),
    (bytes.fromhex("08 07 1a 04 08 01 10 05"), "unknown marker version 7"),
    (bytes.fromhex("10 09 1a 00"), "unknown marker type 9"),
    (bytes.fromhex("10 01"), "no message_id"),
])
def test_malformed_markers_are_refused_with_the_reason(raw: bytes | None, reason: str) -> None:
    with pytest.raises(MarkerDecodeError, match=reason) as caught:
        decode(raw)
    assert caught.value.raw == raw


@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_raise_marker_decode_error_never_anything_else(raw: bytes) -> None:
    with contextlib.suppress(MarkerDecodeError):
        decode(raw)


def test_a_start_with_an_empty_key_is_what_a_go_consumer_of_queue_empty_writes_and_is_accepted() -> None:
    start = decode(bytes.fromhex("1a 04 08 01 10 05 20 e8 07 32 01 78"))  # no key (field 5), value "x"
    assert (start.type, start.key, start.queue, start.value, start.message_id) == (
        MarkerType.START, b"", "", b"x", MessageId(1, 5))
