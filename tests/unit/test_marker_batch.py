"""The batched marker format: round trips, and never mistaken for a per-message marker (ours or kafka-mq-go's)."""

from __future__ import annotations

import contextlib

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given
from hypothesis import strategies as st

from kmq.errors import MarkerDecodeError
from kmq.wire import RELEASE_REASON, RETURN_REASON, MessageId
from kmq.wire.marker_batch import (
    BATCH_PREFIX,
    decode_batch,
    decode_record,
    encode_clock_probe,
    encode_ends,
    encode_settles,
    encode_starts,
    is_batch,
)
from kmq.wire.markers import EndReason, Marker, MarkerType, decode, encode
from tests.interop._proto import kafka_mq_v1_pb2 as upstream
from tests.unit.fakes import FakeStart
from tests.unit.test_markers import markers, message_ids

starts = st.builds(FakeStart, message_id=message_ids, payload=st.binary(max_size=100),
                   record_headers=st.dictionaries(st.text(max_size=8), st.binary(max_size=8), max_size=3),
                   delivery_count=st.integers(1, 2**32 - 1), first=message_ids,
                   enqueued_at_ms=st.integers(0, 2**62))
keys = st.binary(min_size=1, max_size=20)
afters = st.integers(0, 2**63)


@given(keys, afters, st.lists(starts, min_size=1, max_size=20), st.text(max_size=10))
def test_a_start_batch_decodes_to_the_starts_a_per_message_consumer_would_write(
    key: bytes, after: int, batch: list[FakeStart], client_id: str,
) -> None:
    decoded = decode_record(encode_starts(key, after, batch, client_id=client_id))
    assert decoded == [
        Marker(MarkerType.START, s.message_id, after, key, s.payload, delivery_count=s.delivery_count,
               first_message_id=None if s.first_message_id == s.message_id else s.first_message_id,
               enqueued_at_ms=s.enqueued_at_ms, client_id=client_id, headers=tuple(s.record_headers.items()))
        for s in batch]


releases = st.builds(lambda mid, delay, why: Marker(MarkerType.KEEPALIVE, mid, delay, reason=why),
                     message_ids, st.integers(0, 2**40), st.sampled_from([RELEASE_REASON, RETURN_REASON]))
ends = st.builds(lambda mid, why, text: Marker(MarkerType.END, mid, end_reason=why, reason=text),
                 message_ids, st.sampled_from([EndReason.REJECTED, EndReason.REDELIVERED, EndReason.DEAD_LETTERED]),
                 st.text(max_size=20))


@given(keys, st.lists(ends, max_size=20), st.text(max_size=10))
def test_ends_from_their_fields_are_the_bytes_of_their_markers(key: bytes, markers: list[Marker],
                                                              client_id: str) -> None:
    assert encode_ends(key, [(m.message_id, m.end_reason, m.reason) for m in markers], client_id) == encode_settles(
        key, 0, others=markers, client_id=client_id)


def test_an_end_without_a_reason_kind_is_refused_as_in_encode_settles() -> None:
    with pytest.raises(ValueError, match="END/ACKED"):
        encode_ends(b"q", [(MessageId(0, 1), EndReason.ACKED, "")])


@given(keys, afters, st.lists(message_ids, max_size=20), st.lists(message_ids, max_size=20),
       st.lists(releases | ends, max_size=5))
def test_a_settle_batch_decodes_to_keep_alives_then_releases_and_ends_then_acks(
    key: bytes, after: int, keep_alives: list[MessageId], acks: list[MessageId], others: list[Marker],
) -> None:
    decoded = decode_record(encode_settles(key, after, keep_alives=keep_alives, acks=acks, others=others))
    assert decoded == [
        *(Marker(MarkerType.KEEPALIVE, mid, after) for mid in keep_alives),
        *others,
        *(Marker(MarkerType.END, mid) for mid in acks)]


def test_a_clock_probe_is_a_batch_with_nothing_in_it_for_any_reader() -> None:
    probe = encode_clock_probe("kmq-redelivery-tracker")
    assert is_batch(probe) and decode_record(probe) == []
    decoded = decode_batch(probe)
    assert not decoded.hello and decoded.client_id == "kmq-redelivery-tracker"


@given(markers)
def test_no_per_message_marker_is_taken_for_a_batch(marker: Marker) -> None:
    data = encode(marker)
    assert not is_batch(data)
    assert decode_record(data) == [marker]


@given(keys, afters, st.lists(starts, max_size=5), st.lists(message_ids, max_size=5))
def test_no_batch_is_taken_for_a_per_message_marker_by_kmq_or_by_kafka_mq_go(
    key: bytes, after: int, batch: list[FakeStart], acks: list[MessageId],
) -> None:
    for data in (encode_starts(key, after, batch), encode_settles(key, after, acks=acks)):
        assert data.startswith(BATCH_PREFIX)
        with pytest.raises(MarkerDecodeError):
            decode(data)
        with pytest.raises(DecodeError):
            upstream.Marker().ParseFromString(data)


@pytest.mark.parametrize(("raw", "reason"), [
    (b"\x00XY\x01", "not a kmq marker batch"),
    (b"\x00KB\x04", "unknown marker batch version 4"),
    (BATCH_PREFIX + b"\xff\xff", "not a protobuf MarkerBatch"),
    (BATCH_PREFIX, "without a key"),
    (BATCH_PREFIX + bytes.fromhex("0a 01 41 48 01"), "unequal length"),
])
def test_malformed_batches_are_refused_with_the_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(MarkerDecodeError, match=reason):
        decode_record(raw)


@given(st.binary(max_size=64).map(lambda b: BATCH_PREFIX + b))
def test_arbitrary_batch_bodies_decode_or_raise_marker_decode_error_never_anything_else(raw: bytes) -> None:
    with contextlib.suppress(MarkerDecodeError):
        decode_record(raw)
