"""The kafka-mq-go format's fast paths (what a consumer writes per message and a tracker reads per marker) agree
with the codec the golden-bytes tests pin (tests/unit/test_markers.py)."""

from __future__ import annotations

import contextlib

from hypothesis import given
from hypothesis import strategies as st

from kmq.errors import MarkerDecodeError
from kmq.redelivery.partition_state import PartitionState
from kmq.wire import RETURN_REASON, MessageId
from kmq.wire.marker_bytes import encode_start
from kmq.wire.markers import EndReason, Marker, MarkerType, decode, encode, parse
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
