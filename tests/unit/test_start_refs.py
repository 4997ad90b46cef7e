"""Starts by reference on the wire: round trips beside copies, their size, and the batch version that keeps a
version-1 reader (an older kmq tracker) from silently missing them."""

from __future__ import annotations

import contextlib

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given
from hypothesis import strategies as st

from kmq.errors import MarkerDecodeError
from kmq.wire import MessageId
from kmq.wire._proto import kmq_marker_pb2 as pb
from kmq.wire.marker_batch import BATCH_PREFIX, REFS_PREFIX, decode_batch, decode_record, encode_starts
from kmq.wire.markers import Marker, MarkerType, decode
from tests.interop._proto import kafka_mq_v1_pb2 as upstream
from tests.unit.fakes import FakeStart
from tests.unit.test_markers import message_ids

refs = st.builds(FakeStart, message_id=message_ids, payload=st.just(b""), record_headers=st.just({}),
                 delivery_count=st.integers(1, 2**32 - 1), first=st.none() | message_ids,
                 enqueued_at_ms=st.integers(0, 2**62))
copies = st.builds(FakeStart, message_id=message_ids, payload=st.binary(max_size=50),
                   record_headers=st.dictionaries(st.text(max_size=8), st.binary(max_size=8), max_size=2))


def _expected(start: FakeStart, key: bytes, after: int, *, reference: bool) -> Marker:
    first = start.first_message_id
    return Marker(MarkerType.START, start.message_id, after, key, b"" if reference else start.payload,
                  delivery_count=start.delivery_count, first_message_id=None if first == start.message_id else first,
                  enqueued_at_ms=start.enqueued_at_ms, client_id="c", instance_id="h:1",
                  headers=() if reference else tuple(start.record_headers.items()), reference=reference)


@given(st.lists(copies, max_size=5), st.lists(refs, min_size=1, max_size=30, unique_by=lambda s: s.message_id))
def test_a_batch_of_copies_and_references_decodes_to_every_start_once(
    copied: list[FakeStart], referenced: list[FakeStart],
) -> None:
    value = encode_starts(b"q", 500, copied, refs=referenced, client_id="c", instance_id="h:1")
    assert value.startswith(REFS_PREFIX)
    decoded = decode_record(value)
    assert decoded[:len(copied)] == [_expected(s, b"q", 500, reference=False) for s in copied]
    want = sorted((_expected(s, b"q", 500, reference=True) for s in referenced), key=lambda m: m.message_id)
    assert decoded[len(copied):] == want


def test_a_batch_without_references_stays_version_1_byte_for_byte() -> None:
    starts = [FakeStart(MessageId(0, 5), b"payload", {"h": b"v"})]
    assert encode_starts(b"q", 500, starts) == encode_starts(b"q", 500, starts, refs=())
    assert encode_starts(b"q", 500, starts).startswith(BATCH_PREFIX)


def test_a_first_delivery_costs_a_few_bytes_whatever_its_payload() -> None:
    now = 1_790_000_000_000
    starts = [FakeStart(MessageId(i % 6, 1_000_000 + i), b"x" * 8192, enqueued_at_ms=now + i) for i in range(500)]
    value = encode_starts(b"emails", 60_000, [], refs=starts, client_id="worker-1", instance_id="host:4242")
    assert len(value) / len(starts) < 6


@given(st.lists(refs, min_size=1, max_size=5, unique_by=lambda s: s.message_id))
def test_neither_a_version_1_reader_nor_kafka_mq_go_takes_a_batch_of_references_for_anything(
    referenced: list[FakeStart],
) -> None:
    value = encode_starts(b"q", 1, [], refs=referenced)
    with pytest.raises(MarkerDecodeError):
        decode(value)
    with pytest.raises(DecodeError):
        upstream.Marker().ParseFromString(value)
    assert value[:4] != BATCH_PREFIX  # a version-1 decoder refuses the version byte


def _refs_record(**fields: list[int]) -> bytes:
    batch = pb.MarkerBatch(key=b"q")
    for name, values in fields.items():
        getattr(batch.refs, name).extend(values)
    return REFS_PREFIX + batch.SerializeToString()


@pytest.mark.parametrize(("fields", "reason"), [
    ({"partitions": [0], "run_lengths": [2], "offset_deltas": [1], "enqueued_deltas": [0]}, "unequal length"),
    ({"partitions": [0, 1], "run_lengths": [1], "offset_deltas": [1], "enqueued_deltas": [0]}, "unequal length"),
    ({"partitions": [-1], "run_lengths": [1], "offset_deltas": [1], "enqueued_deltas": [0]}, "negative partition"),
    ({"partitions": [0], "run_lengths": [0], "offset_deltas": [], "enqueued_deltas": []}, "empty run"),
    ({"partitions": [1, 0], "run_lengths": [1, 1], "offset_deltas": [1, 1], "enqueued_deltas": [0, 0]},
     "partition order"),
    ({"partitions": [0], "run_lengths": [2], "offset_deltas": [5, 0], "enqueued_deltas": [0, 0]}, "offset order"),
    ({"partitions": [0], "run_lengths": [1], "offset_deltas": [1], "enqueued_deltas": [0], "extra_indexes": [3],
      "extra_delivery_counts": [2], "extra_first_partitions": [0], "extra_first_offsets": [0]}, "out of range"),
    ({"partitions": [0], "run_lengths": [1], "offset_deltas": [1], "enqueued_deltas": [0], "extra_indexes": [0]},
     "unequal length"),
])
def test_malformed_references_are_refused_with_the_reason(fields: dict[str, list[int]], reason: str) -> None:
    with pytest.raises(MarkerDecodeError, match=reason):
        decode_batch(_refs_record(**fields))


@given(st.lists(st.integers(-(2**31), 2**31 - 1), max_size=6), st.lists(st.integers(0, 2**32 - 1), max_size=6),
       st.lists(st.integers(0, 2**64 - 1), max_size=6), st.lists(st.integers(-(2**63), 2**63 - 1), max_size=6))
def test_arbitrary_reference_columns_decode_or_raise_marker_decode_error(
    partitions: list[int], runs: list[int], deltas: list[int], enqueued: list[int],
) -> None:
    value = _refs_record(partitions=partitions, run_lengths=runs, offset_deltas=deltas, enqueued_deltas=enqueued)
    with contextlib.suppress(MarkerDecodeError):
        decode_record(value)
